// blockswap::torch — LibTorch trainers stream their frozen blocks through
// blockswapd (docs/client.md: the reference's LoRAStreamOffloader, with the
// masters and the copies in the daemon).
//
// A StreamOffloader takes the N transformer blocks of a model. S of them
// (placed evenly) stream: the tensors a selector picks in them (default: the
// weight of every Linear) are registered with the daemon once (identical
// content from any process is one model), and from then on point at the
// daemon's read-only host master while evicted, and at a ring slot on the
// device while loaded. Everything else of every block lives on the device.
// The training loop looks like the reference's:
//
//   offloader.PrepareBlockDevicesBeforeForward();
//   for (uint32_t i = 0; i < blocks.size(); ++i)
//     x = offloader.Forward(i, [block = blocks[i]](const at::Tensor& h) { return block->forward(h);
//     }, x);
//   loss(x).backward();
//
// Forward() waits for block i, runs it, then frees its slot and prefetches
// ahead. Under grad mode it runs the block as a gradient checkpoint (a custom
// autograd function): no activations are kept, backward recomputes the block
// with the weights bound at that time, backpropagates through it, then does
// the backward-side scheduling (free the slot, prefetch behind, wait for the
// block that runs next). LibTorch has no module backward hooks; the
// checkpoint is where they live. It also makes backward reach every block
// (the reference's hooks need a block input that requires grad).
//
// Without checkpointing (BlockSwapConfig.gradient_checkpointing = false) the
// block runs once, keeping its activations; an identity autograd function
// over its inputs does the backward-side scheduling once the block's
// backward is done. A streamed weight must then not be saved by autograd
// (its slot is overwritten long before backward): the block computes its
// streamed Linears through StreamedLinear(), whose autograd function saves
// (block, tensor) instead, and takes the weight in backward from the slot
// that holds the block then (loaded on demand, a self-heal, if it does not).
// A Linear that computes on a streamed weight otherwise fails backward
// loudly ("modified by an inplace operation": every load bumps the version).
//
// Models the daemon already holds (BlockSwapConfig.model_id / model_file):
// the trainer builds its blocks with the streamed tensors never
// materialised (meta tensors, e.g. ReleaseToMeta below, or real ones: their
// values are not read) and the offloader takes the
// layout from the model: the selector's tensors of each block are matched
// by name (the name in the block, `qkv.base.weight`) against the model's,
// with dtype and shape checked, and bound to views of the daemon's masters;
// nothing is packed or uploaded. The model holds either every block (block
// b of the model is block b — what a file registration gives; the resident
// blocks' streamed tensors are then copied from their masters to the device)
// or only the streaming ones, in order (what a packed registration gives;
// the resident blocks must then carry real tensors).
//
// Only on top of the client library's C ABI (blockswap.h): it builds against
// the torch the trainer has. Thread-compatible: one training thread drives
// an offloader. The offloader must outlive every autograd graph built by its
// Forward()/Checkpoint() (their backward calls back into it).
#ifndef BLOCKSWAP_TORCH_H_
#define BLOCKSWAP_TORCH_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace blockswap::torch {

using ModulePtr = std::shared_ptr<::torch::nn::Module>;

// One streamed tensor: `name` is a parameter or a buffer registered directly
// on `module`, which sits at `path` in the block ("" for the block itself).
struct StreamedTensor {
  std::string path;
  ModulePtr module;
  std::string name;
};
// Picks what streams in one block. May return several tensors per module
// (a quantized weight and its scales), parameters or buffers; every
// streaming block must answer with tensors that exist.
using Selector = std::function<std::vector<StreamedTensor>(const ModulePtr& block)>;
// The default: the `weight` of every torch::nn::Linear, and of every module
// whose type name ends in "Linear" that has a defined `weight` parameter.
std::vector<StreamedTensor> LinearWeights(const ModulePtr& block);

// Frees a frozen tensor's memory, leaving a meta tensor of its shape and
// dtype in the same handle (what modules hold): LibTorch modules allocate
// their weights when built and set_data cannot turn a tensor meta. For
// streamed tensors a model in the daemon will give (BlockSwapConfig.model_id,
// model_file). Refuses a tensor that requires grad.
void ReleaseToMeta(const at::Tensor& tensor);

// The reference's BlockSwapConfig, plus what talking to the daemon needs.
// Pinned vs staged masters is the daemon's policy, not the client's.
struct BlockSwapConfig {
  c10::Device device = c10::Device(c10::kCPU);  // cpu on a host-backend daemon
  uint32_t blocks_to_swap = 0;                  // S; 0 streams nothing
  bool supports_backward = true;                // false: inference (forward-only, wrap-around)
  uint32_t ring_size = 2;                       // B, clamped to S
  bool debug = false;                           // print every finished pass's statistics
  std::string socket_path;                      // "": as bs_connect (env, system, private)
  std::string client_name = "blockswap-torch";
  std::string model_name = "torch-blocks";
  Selector selector;  // empty = LinearWeights
  // The stream the blocks compute on; the scheduler orders its loads and
  // `free` records against it. Default: the device's current stream when
  // the offloader is made. Work on another stream is joined into it.
  std::optional<c10::Stream> stream;
  // The daemon device to use; "" = the one that is `device` (same UUID).
  std::string device_uuid;
  // Test mode: fill a slot with 0xFF bytes (NaN for floats) right before it
  // is handed back for its next load, so a stale read cannot pass.
  bool poison_released_slots = false;
  // The reference's offloaded checkpoint: the checkpoint keeps its first
  // input (the hidden states) on the host, copied asynchronously (pinned
  // memory on cuda), and brings it back for the recompute.
  bool offload_activations = false;
  // false: Forward() runs blocks without checkpointing (see the top of this
  // file; streamed Linears compute through StreamedLinear).
  bool gradient_checkpointing = true;
  // A model already in the daemon instead of one packed from the blocks'
  // tensors (see "Models the daemon already holds" below): its id, or a
  // safetensors file (or sharded *.index.json) the offloader registers
  // (bs_model_register_file) with the pattern and selector below.
  std::string model_id;
  std::string model_file;
  std::string model_block_pattern = "^blocks\\.(\\d+)\\.";
  std::string model_select;        // "" = every tensor of a block
  uint32_t model_select_rank = 0;  // 0 = any
};

enum class Direction { kForward = 1, kBackward = 2 };

// The statistics of one finished pass (bs_pass_stats).
struct PassStats {
  Direction direction = Direction::kForward;
  double stall_seconds = 0;      // the compute stream sat idle at the waits (time lost)
  double host_wait_seconds = 0;  // the thread blocked in the waits (mostly compute draining)
  double copy_seconds = 0;
  uint64_t waits = 0;
  uint64_t not_ready_waits = 0;
  uint64_t self_heals = 0;
  uint64_t loads = 0;
  uint64_t rebinds = 0;
};
std::string FormatPassStats(const PassStats& stats);

using BlockFn = std::function<at::Tensor(const at::Tensor&)>;
using BlockFnList = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// The reference's to_device / to_cpu: every tensor of a nested container
// (lists, tuples, dicts as IValues, to any depth) moved to `device`; other
// values come back unchanged.
c10::IValue ToDevice(const c10::IValue& value, const c10::Device& device,
                     bool non_blocking = false);
c10::IValue ToCpu(const c10::IValue& value);
// The reference's create_cpu_offloading_wrapper: `fn` with its inputs moved
// to `device` before it runs and its outputs moved to the CPU after.
BlockFnList CpuOffloadingWrapper(BlockFnList fn, const c10::Device& device);

class StreamOffloader;

// linear->forward(x), except inside StreamOffloader::Forward() of a block
// run without checkpointing when `linear`'s weight streams: then an autograd
// function that saves (block, tensor) in place of the weight.
at::Tensor StreamedLinear(::torch::nn::LinearImpl& linear, const at::Tensor& x);

class StreamOffloader {
 public:
  // Connects to the daemon, registers the streamed tensors of the streaming
  // blocks, creates the ring and moves every block's other parameters and
  // buffers to config.device. Throws blockswap::Error (daemon, C ABI) or
  // c10::Error (bad configuration, a trainable streamed tensor, ...).
  StreamOffloader(std::vector<ModulePtr> blocks, BlockSwapConfig config);
  ~StreamOffloader();
  StreamOffloader(const StreamOffloader&) = delete;
  StreamOffloader& operator=(const StreamOffloader&) = delete;

  // --- the reference's interface ---
  // Before each forward pass (and around sampling): rebinds, puts the first
  // B streaming blocks into the ring (no transfer for a slot that already
  // holds its block).
  void PrepareBlockDevicesBeforeForward();
  // Before block `block` computes: its weights are in its slot and the
  // current stream waits for them.
  void WaitForBlock(uint32_t block);
  // After block `block`'s forward: its slot is free, the block B ahead loads.
  void SubmitMoveBlocksForward(uint32_t block);
  void SetForwardOnly(bool forward_only);

  // WaitForBlock, the block (checkpointed under grad mode, see the top of
  // this file), SubmitMoveBlocksForward. `fn` is kept and called again in
  // backward: it must capture by value what it uses (not loop variables by
  // reference).
  at::Tensor Forward(uint32_t block, const BlockFn& fn, const at::Tensor& input);
  std::vector<at::Tensor> Forward(uint32_t block, const BlockFnList& fn,
                                  const std::vector<at::Tensor>& inputs);
  // Only the checkpointed call with its backward-side actions, for a loop
  // that calls WaitForBlock / SubmitMoveBlocksForward itself. Outside grad
  // mode (or with supports_backward false) it is a plain call.
  std::vector<at::Tensor> Checkpoint(uint32_t block, const BlockFnList& fn,
                                     const std::vector<at::Tensor>& inputs);

  // Ends the pass being counted (e.g. after loss.backward()) so that its
  // statistics are reported to the daemon and LastPass sees them.
  void FinishPass();
  std::optional<PassStats> LastPass(Direction direction) const;

  // --- introspection ---
  uint32_t num_blocks() const;
  const std::vector<uint32_t>& streaming_blocks() const;  // rank r -> block
  std::optional<uint32_t> streaming_rank(uint32_t block) const;
  uint32_t ring_slots() const;  // after the clamp; 0 when nothing streams
  // The memory of ring slot `slot` (device pointer on cuda, host on host).
  const void* slot_data(uint32_t slot) const;
  uint64_t slot_bytes() const;
  std::string model_id() const;  // "" when nothing streams
  c10::Stream stream() const;
  const BlockSwapConfig& config() const;

  // Used by the checkpoint's backward; not for trainers.
  void AfterBackward(uint32_t block);
  // Used by StreamedLinear; not for trainers. The index of `tensor` (a
  // module's handle) among `block`'s streamed tensors, if it is one; that
  // tensor over the slot holding `block`, loaded on demand if it does not.
  std::optional<size_t> StreamedIndex(uint32_t block, const at::Tensor& tensor) const;
  at::Tensor StreamedForBackward(uint32_t block, size_t index);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace blockswap::torch

#endif  // BLOCKSWAP_TORCH_H_
