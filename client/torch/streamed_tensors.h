// A block's streamed tensors: the ones the selector picks, each the module's
// own handle (so that rebinding it repoints what the module computes with),
// described to the C ABI's offloader and rebound between a master, a ring
// slot and meta. StreamOffloader keeps one list per block and decides when
// each rebinding happens; this file knows nothing of the sequence, the
// streams or autograd. Like the offloader, used by one training thread.
#ifndef BLOCKSWAP_CLIENT_TORCH_STREAMED_TENSORS_H_
#define BLOCKSWAP_CLIENT_TORCH_STREAMED_TENSORS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "blockswap/blockswap.h"
#include "blockswap/torch.h"

namespace blockswap::torch {

// A refusal of the C ABI's offloader (its message says what was wrong).
inline void Refuse(int code) { TORCH_CHECK(code == BS_OK, bs_last_error()); }

// One streamed tensor of a block.
struct Streamed {
  at::Tensor tensor;       // the module's handle
  std::string name;        // its path in the block: "qkv.base.weight"
  std::string dtype_name;  // safetensors
  std::vector<int64_t> sizes;
  std::vector<uint64_t> shape;  // sizes, as the C ABI takes them
  at::ScalarType dtype;
  uint64_t offset = 0;     // in the model block / ring slot
  at::Tensor master = {};  // view of the daemon's read-only master

  // A view of this tensor's bytes in the block laid out at `base` (a ring
  // slot, a master), on `device`. The bytes must outlive the view.
  at::Tensor At(void* base, const c10::Device& device) const;
};

// What `select` picks in `block` (block `index` of the offloader, for
// messages), resolved to the modules' own handles. Refuses, with the C ABI's
// message for `offloader`, a name that is neither a parameter nor a buffer
// of its module; refuses a missing module and an undefined tensor.
std::vector<Streamed> SelectStreamed(const bs_offloader* offloader, const Selector& select,
                                     const ModulePtr& block, uint32_t index);

// The C ABI's view of `tensors` as they are now. With `with_data`, each
// materialised tensor's bytes, copied to the host into `host_copies`, which
// must outlive the view; the names point into `tensors`.
std::vector<bs_offloader_tensor> Describe(const std::vector<Streamed>& tensors, bool with_data,
                                          std::vector<at::Tensor>& host_copies);

// set_data, also between meta and real: set_data refuses to change a
// tensor's kind (meta to cpu/cuda and back), so a frozen tensor gets it the
// way set_data gives data (the same shallow copy, without the kind check; a
// frozen tensor has no gradient accumulator to reset).
void Rebind(const at::Tensor& tensor, const at::Tensor& data);

}  // namespace blockswap::torch

#endif  // BLOCKSWAP_CLIENT_TORCH_STREAMED_TENSORS_H_
