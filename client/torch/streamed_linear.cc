// Blocks without gradient checkpointing (streamed_linear.h).
#include "client/torch/streamed_linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <utility>
#include <vector>

namespace blockswap::torch {
namespace {

using at::Tensor;
using Tensors = std::vector<at::Tensor>;

// The block whose fn runs on this thread (RunWithSavedTokens), if any.
struct RunningBlock {
  StreamOffloader* offloader = nullptr;
  uint32_t block = 0;
};
thread_local std::optional<RunningBlock> running;

class RunningGuard {
 public:
  explicit RunningGuard(RunningBlock block) : previous_(std::exchange(running, block)) {}
  ~RunningGuard() { running = previous_; }
  RunningGuard(const RunningGuard&) = delete;
  RunningGuard& operator=(const RunningGuard&) = delete;

 private:
  std::optional<RunningBlock> previous_;
};

// What a backward needs to find a block (autograd's saved_data holds IValues).
struct BlockToken : ::torch::CustomClassHolder {
  StreamOffloader* offloader = nullptr;
  uint32_t block = 0;
  size_t tensor = 0;  // StreamedLinear: the weight's index among the block's streamed tensors
};

// Identity over a block call's inputs; its backward runs once every input
// gradient of the call exists, i.e. after the block's backward.
class BlockBackward : public ::torch::autograd::Function<BlockBackward> {
 public:
  static Tensors forward(::torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                         c10::IValue token) {
    ctx->saved_data["token"] = token;
    Tensors outputs = inputs.vec();
    for (const Tensor& output : outputs) {
      if (output.defined() && !output.requires_grad()) ctx->mark_non_differentiable({output});
    }
    return outputs;
  }

  static Tensors backward(::torch::autograd::AutogradContext* ctx, Tensors grads) {
    auto token = ctx->saved_data["token"].toCapsule();
    auto* t = static_cast<BlockToken*>(token.get());
    t->offloader->AfterBackward(t->block);
    grads.emplace_back();  // the token argument
    return grads;
  }
};

// A Linear on a streamed weight that saves its input and (block, tensor):
// backward takes the weight from the slot holding the block then.
class TokenLinear : public ::torch::autograd::Function<TokenLinear> {
 public:
  static Tensor forward(::torch::autograd::AutogradContext* ctx, const Tensor& x,
                        const Tensor& weight, const Tensor& bias, c10::IValue token) {
    ctx->saved_data["token"] = token;
    ctx->saved_data["bias_defined"] = bias.defined();
    ctx->save_for_backward({x});
    return at::linear(x, weight, bias.defined() ? std::optional<Tensor>(bias) : std::nullopt);
  }

  static Tensors backward(::torch::autograd::AutogradContext* ctx, Tensors grads) {
    auto token = ctx->saved_data["token"].toCapsule();
    auto* t = static_cast<BlockToken*>(token.get());
    const Tensor& grad = grads.at(0);
    Tensors out(4);
    if (ctx->needs_input_grad(0)) {
      out[0] = grad.matmul(t->offloader->StreamedForBackward(t->block, t->tensor));
    }
    if (ctx->saved_data["bias_defined"].toBool() && ctx->needs_input_grad(2)) {
      out[2] = grad.reshape({-1, grad.size(-1)}).sum(0);
    }
    return out;
  }
};

}  // namespace

Tensors RunWithSavedTokens(StreamOffloader& offloader, uint32_t block, const BlockFnList& fn,
                           const Tensors& inputs) {
  bool any = false;
  for (const Tensor& input : inputs) any = any || (input.defined() && input.requires_grad());
  Tensors wrapped = inputs;
  if (any) {
    auto token = c10::make_intrusive<BlockToken>();
    token->offloader = &offloader;
    token->block = block;
    wrapped =
        BlockBackward::apply(at::TensorList(inputs), c10::IValue::make_capsule(std::move(token)));
  }
  RunningGuard guard(RunningBlock{&offloader, block});
  return fn(wrapped);
}

Tensor StreamedLinear(::torch::nn::LinearImpl& linear, const Tensor& x) {
  if (!running.has_value() || !c10::GradMode::is_enabled()) return linear.forward(x);
  std::optional<size_t> index = running->offloader->StreamedIndex(running->block, linear.weight);
  if (!index.has_value()) return linear.forward(x);
  auto token = c10::make_intrusive<BlockToken>();
  token->offloader = running->offloader;
  token->block = running->block;
  token->tensor = *index;
  return TokenLinear::apply(x, linear.weight, linear.bias,
                            c10::IValue::make_capsule(std::move(token)));
}

}  // namespace blockswap::torch
