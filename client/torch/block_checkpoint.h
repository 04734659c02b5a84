// The checkpoint that carries the backward-side scheduling: a block run as a
// gradient checkpoint, forward without a graph; its backward recomputes the
// block with the weights bound at that time, backpropagates through it, then
// calls StreamOffloader::AfterBackward for the block. A separate translation
// unit only because the autograd Function is long; it includes nothing of
// the offloader's internals.
#ifndef BLOCKSWAP_CLIENT_TORCH_BLOCK_CHECKPOINT_H_
#define BLOCKSWAP_CLIENT_TORCH_BLOCK_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "blockswap/torch.h"

namespace blockswap::torch {

// `fn` over `inputs` as a checkpoint of `block`. With no input requiring
// grad, `anchor` (a requires-grad empty tensor) is passed too, so that
// backward still reaches the block. With `offload_activations`, the first
// input is kept on the host until backward.
std::vector<at::Tensor> RunAsCheckpoint(StreamOffloader& offloader, uint32_t block,
                                        const BlockFnList& fn,
                                        const std::vector<at::Tensor>& inputs,
                                        const at::Tensor& anchor, bool offload_activations);

}  // namespace blockswap::torch

#endif  // BLOCKSWAP_CLIENT_TORCH_BLOCK_CHECKPOINT_H_
