// A small transformer stack with LoRA adapters: frozen base (attention + MLP
// blocks whose Linears stream), trainable low-rank adapters beside each
// Linear. Shared by blockswap-torch-demo and the layer's tests; header-only. Not in
// namespace blockswap: there `torch` would name blockswap::torch, which
// LibTorch's macros (TORCH_MODULE) do not expect.
#ifndef BLOCKSWAP_CLIENT_TORCH_DEMO_LORA_TRANSFORMER_H_
#define BLOCKSWAP_CLIENT_TORCH_DEMO_LORA_TRANSFORMER_H_

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "blockswap/torch.h"

namespace blockswap_lora {

// base(x) + up(down(x)): `base` is a frozen torch::nn::Linear (what the
// default selector streams); the adapter's matrices are plain parameters.
struct LoRALinearImpl : ::torch::nn::Module {
  // `meta_weight`: the base weight is a meta tensor (shape and dtype, no
  // memory), for a model whose weights the daemon already holds. LibTorch's
  // Linear has no meta construction: its weight is initialised as usual
  // (the random stream stays the same) and dropped at once.
  LoRALinearImpl(int64_t in, int64_t out, int64_t rank, bool meta_weight = false)
      : base(register_module("base", ::torch::nn::Linear(in, out))),
        down(register_parameter("lora_down", ::torch::randn({rank, in}) * 0.05)),
        up(register_parameter("lora_up", ::torch::randn({out, rank}) * 0.05)) {
    for (at::Tensor& p : base->parameters()) p.requires_grad_(false);
    if (meta_weight) ::blockswap::torch::ReleaseToMeta(base->weight);
  }
  // StreamedLinear: base(x), which also trains without checkpointing.
  at::Tensor forward(const at::Tensor& x) {
    return ::blockswap::torch::StreamedLinear(*base, x) +
           ::torch::linear(::torch::linear(x, down), up);
  }
  ::torch::nn::Linear base;
  at::Tensor down, up;
};
TORCH_MODULE(LoRALinear);

// Pre-norm block: causal multi-head self-attention, then a GELU MLP.
struct BlockImpl : ::torch::nn::Module {
  BlockImpl(int64_t dim, int64_t heads, int64_t rank, bool meta_weights = false)
      : heads(heads),
        ln1(register_module("ln1", ::torch::nn::LayerNorm(::torch::nn::LayerNormOptions({dim})))),
        ln2(register_module("ln2", ::torch::nn::LayerNorm(::torch::nn::LayerNormOptions({dim})))),
        qkv(register_module("qkv", LoRALinear(dim, 3 * dim, rank, meta_weights))),
        proj(register_module("proj", LoRALinear(dim, dim, rank, meta_weights))),
        fc1(register_module("fc1", LoRALinear(dim, 4 * dim, rank, meta_weights))),
        fc2(register_module("fc2", LoRALinear(4 * dim, dim, rank, meta_weights))) {
    for (at::Tensor& p : ln1->parameters()) p.requires_grad_(false);
    for (at::Tensor& p : ln2->parameters()) p.requires_grad_(false);
  }
  at::Tensor forward(const at::Tensor& x) {  // [batch, seq, dim]
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads;
    std::vector<at::Tensor> qkv_parts = qkv(ln1(x)).chunk(3, -1);
    auto split = [&](const at::Tensor& y) { return y.reshape({b, t, heads, hd}).transpose(1, 2); };
    at::Tensor scores =
        ::torch::matmul(split(qkv_parts[0]), split(qkv_parts[1]).transpose(-2, -1)) /
        std::sqrt(static_cast<double>(hd));
    at::Tensor mask = ::torch::full({t, t}, -INFINITY, x.options()).triu(1);
    at::Tensor attn = ::torch::softmax(scores + mask, -1);
    at::Tensor h =
        x + proj(::torch::matmul(attn, split(qkv_parts[2])).transpose(1, 2).reshape({b, t, d}));
    return h + fc2(::torch::gelu(fc1(ln2(h))));
  }
  int64_t heads;
  ::torch::nn::LayerNorm ln1, ln2;
  LoRALinear qkv, proj, fc1, fc2;
};
TORCH_MODULE(Block);

struct StackOptions {
  int64_t blocks = 12;
  int64_t dim = 64;
  int64_t heads = 4;
  int64_t rank = 4;
  uint64_t seed = 1;
  // The Linears' weights (what LinearWeights streams) as meta tensors; the
  // rest is as without (same seed, same values).
  bool meta_weights = false;
};

// The same options give the same weights (and so the same model id).
inline std::vector<Block> MakeStack(const StackOptions& options) {
  ::torch::manual_seed(options.seed);
  std::vector<Block> blocks;
  for (int64_t i = 0; i < options.blocks; ++i) {
    blocks.emplace_back(options.dim, options.heads, options.rank, options.meta_weights);
  }
  return blocks;
}

inline std::vector<std::shared_ptr<::torch::nn::Module>> Modules(const std::vector<Block>& blocks) {
  std::vector<std::shared_ptr<::torch::nn::Module>> modules;
  for (const Block& block : blocks) modules.push_back(block.ptr());
  return modules;
}

// The adapters' parameters, block by block.
inline std::vector<at::Tensor> LoraParameters(const std::vector<Block>& blocks) {
  std::vector<at::Tensor> params;
  for (const Block& block : blocks) {
    for (const at::Tensor& p : block->parameters()) {
      if (p.requires_grad()) params.push_back(p);
    }
  }
  return params;
}

// The frozen base of `blocks` (every parameter that needs no grad) as a
// safetensors file, each tensor named "blocks.<b>.<name in the block>"
// (e.g. "blocks.3.fc1.base.weight"): a base model's checkpoint as trainers
// keep it. F32, written in block order; throws c10::Error on I/O failure.
inline void WriteBaseSafetensors(const std::string& path, const std::vector<Block>& blocks) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::string header = "{";
  uint64_t offset = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    for (const auto& p : blocks[b]->named_parameters()) {
      if (p.value().requires_grad()) continue;
      at::Tensor t = p.value().detach().to(at::kCPU, at::kFloat).contiguous();
      const std::string name = "blocks." + std::to_string(b) + "." + p.key();
      std::string shape;
      for (int64_t d : t.sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
      const uint64_t bytes = t.numel() * t.element_size();
      header += (header.size() > 1 ? "," : "") + std::string("\"") + name +
                "\":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" +
                std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
      offset += bytes;
      tensors.emplace_back(name, t);
    }
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t length = header.size();  // little-endian on every target we build
  out.write(reinterpret_cast<const char*>(&length), sizeof(length));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& [name, t] : tensors) {
    out.write(static_cast<const char*>(t.data_ptr()),
              static_cast<std::streamsize>(t.numel() * t.element_size()));
  }
  out.close();
  TORCH_CHECK(out.good(), "writing ", path, " failed");
}

// One plain SGD step on the adapters, then their gradients cleared.
inline void SgdStep(const std::vector<at::Tensor>& params, double lr) {
  at::NoGradGuard no_grad;
  for (const at::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    p.sub_(p.grad() * lr);
    p.mutable_grad().zero_();
  }
}

}  // namespace blockswap_lora

#endif  // BLOCKSWAP_CLIENT_TORCH_DEMO_LORA_TRANSFORMER_H_
