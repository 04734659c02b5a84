// Blocks run without gradient checkpointing (BlockSwapConfig.
// gradient_checkpointing = false): the identity autograd function that does
// a block's backward-side scheduling, and the block StreamedLinear() sees as
// running. A translation unit of its own, like block_checkpoint.h: two
// autograd Functions; it includes nothing of the offloader's internals.
#ifndef BLOCKSWAP_CLIENT_TORCH_STREAMED_LINEAR_H_
#define BLOCKSWAP_CLIENT_TORCH_STREAMED_LINEAR_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "blockswap/torch.h"

namespace blockswap::torch {

// `fn` over `inputs` as block `block`: StreamedLinear() streams through this
// offloader while it runs, and StreamOffloader::AfterBackward(block) runs
// once the block's backward has produced every input gradient (never, when
// no input requires grad: nothing runs after that block's backward).
std::vector<at::Tensor> RunWithSavedTokens(StreamOffloader& offloader, uint32_t block,
                                           const BlockFnList& fn,
                                           const std::vector<at::Tensor>& inputs);

}  // namespace blockswap::torch

#endif  // BLOCKSWAP_CLIENT_TORCH_STREAMED_LINEAR_H_
