// The block as a gradient checkpoint (block_checkpoint.h).
#include "client/torch/block_checkpoint.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <utility>
#include <vector>

namespace blockswap::torch {
namespace {

using at::Tensor;
using Tensors = std::vector<at::Tensor>;

// What the checkpoint's backward needs. IValue carries it as a capsule
// (autograd's saved_data holds IValues only).
struct CheckpointState : ::torch::CustomClassHolder {
  StreamOffloader* offloader = nullptr;
  uint32_t block = 0;
  BlockFnList fn;
  std::vector<bool> requires_grad;  // per real input (the anchor excluded)
  // offload_activations: the first input lives on the host until backward.
  std::optional<c10::Device> offloaded_from;
};

// A host copy of `x`, made asynchronously (pinned memory) from a cuda tensor.
Tensor HostCopy(const Tensor& x) {
  if (!x.is_cuda()) return x.to(at::kCPU);
  Tensor host = at::empty(x.sizes(), x.options().device(at::kCPU).pinned_memory(true));
  host.copy_(x, /*non_blocking=*/true);
  return host;
}

// The block as a gradient checkpoint: forward without a graph, backward
// recomputes it with the weights bound now, backpropagates through it, then
// runs the backward-side scheduling of the block.
class BlockCheckpoint : public ::torch::autograd::Function<BlockCheckpoint> {
 public:
  // `inputs` as a TensorList: autograd treats a std::vector as a non-tensor
  // argument and would build no graph.
  static Tensors forward(::torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                         c10::IValue state) {
    auto* s = static_cast<CheckpointState*>(state.toCapsule().get());
    ctx->saved_data["state"] = state;
    Tensors saved = inputs.vec();
    if (s->offloaded_from.has_value()) saved[0] = HostCopy(saved[0]);
    ctx->save_for_backward(saved);
    at::NoGradGuard no_grad;
    return s->fn(Tensors(inputs.begin(), inputs.begin() + s->requires_grad.size()));
  }

  static Tensors backward(::torch::autograd::AutogradContext* ctx, Tensors grad_outputs) {
    auto state = ctx->saved_data["state"].toCapsule();
    auto* s = static_cast<CheckpointState*>(state.get());
    Tensors saved = ctx->get_saved_variables();
    if (s->offloaded_from.has_value()) {
      saved[0] = saved[0].to(*s->offloaded_from, /*non_blocking=*/true);
    }
    const size_t real = s->requires_grad.size();
    Tensors inputs;
    for (size_t i = 0; i < real; ++i) {
      inputs.push_back(saved[i].detach().requires_grad_(s->requires_grad[i]));
    }
    Tensors outputs;
    {
      at::AutoGradMode grad(true);
      outputs = s->fn(inputs);
    }
    Tensors roots, grads;
    for (size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) ::torch::autograd::backward(roots, grads);
    Tensors input_grads(saved.size() + 1);  // + the state argument
    for (size_t i = 0; i < real; ++i) {
      if (s->requires_grad[i]) input_grads[i] = inputs[i].grad();
    }
    s->offloader->AfterBackward(s->block);
    return input_grads;
  }
};

}  // namespace

Tensors RunAsCheckpoint(StreamOffloader& offloader, uint32_t block, const BlockFnList& fn,
                        const Tensors& inputs, const Tensor& anchor, bool offload_activations) {
  auto state = c10::make_intrusive<CheckpointState>();
  state->offloader = &offloader;
  state->block = block;
  state->fn = fn;
  if (offload_activations && !inputs.empty() && inputs[0].defined()) {
    state->offloaded_from = inputs[0].device();
  }
  bool any = false;
  for (const Tensor& input : inputs) {
    state->requires_grad.push_back(input.defined() && input.requires_grad());
    any = any || state->requires_grad.back();
  }
  Tensors args = inputs;
  if (!any) args.push_back(anchor);  // so that backward reaches this block
  return BlockCheckpoint::apply(at::TensorList(args), c10::IValue::make_capsule(std::move(state)));
}

}  // namespace blockswap::torch
