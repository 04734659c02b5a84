// blockswap::torch::StreamOffloader (include/blockswap/torch.h): tensors
// rebound on every binding the scheduler of the C ABI reports, and the
// checkpoint that carries the backward-side scheduling.
#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/GradMode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "blockswap/blockswap.hpp"
#include "blockswap/torch.h"
#include "client/torch/block_checkpoint.h"
#include "client/torch/streamed_linear.h"
#include "client/torch/streamed_tensors.h"

#if BLOCKSWAP_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace blockswap::torch {
namespace {

using at::Tensor;
using Tensors = std::vector<at::Tensor>;

c10::Stream CurrentStream(const c10::Device& device) {
  if (device.is_cpu()) return c10::Stream(c10::Stream::DEFAULT, device);
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

// Work queued on `from` so far happens before work queued on `into` later.
void Join(const c10::Stream& from, const c10::Stream& into) {
  if (from == into || from.device_type() == c10::kCPU) return;
  c10::Event event(from.device_type());
  event.record(from);
  event.block(into);
}

// The handle the C ABI takes: a cudaStream_t on cuda, NULL on host.
void* NativeStream(const c10::Stream& stream) {
  return stream.device_type() == c10::kCPU ? nullptr : stream.native_handle();
}

struct OffloaderDeleter {
  void operator()(bs_offloader* offloader) const { bs_offloader_destroy(offloader); }
};

// The last finished pass in `direction`, if there is one.
std::optional<PassStats> LastPassOf(const bs_offloader* offloader, Direction direction) {
  bs_pass_stats c{};
  if (bs_offloader_last_pass(offloader, static_cast<int>(direction), &c) != BS_OK) {
    return std::nullopt;
  }
  return PassStats{.direction = static_cast<Direction>(c.direction),
                   .stall_seconds = c.stall_seconds,
                   .host_wait_seconds = c.host_wait_seconds,
                   .copy_seconds = c.copy_seconds,
                   .waits = c.waits,
                   .not_ready_waits = c.not_ready_waits,
                   .self_heals = c.self_heals,
                   .loads = c.loads,
                   .rebinds = c.rebinds};
}

}  // namespace

std::string FormatPassStats(const PassStats& s) {
  char line[256];
  std::snprintf(
      line, sizeof(line),
      "%s: stall %.3f ms, host wait %.3f ms, copy %.3f ms, waits %llu, not-ready %llu, "
      "self-heals %llu, loads %llu, rebinds %llu",
      s.direction == Direction::kBackward ? "bwd" : "fwd", s.stall_seconds * 1e3,
      s.host_wait_seconds * 1e3, s.copy_seconds * 1e3, static_cast<unsigned long long>(s.waits),
      static_cast<unsigned long long>(s.not_ready_waits),
      static_cast<unsigned long long>(s.self_heals), static_cast<unsigned long long>(s.loads),
      static_cast<unsigned long long>(s.rebinds));
  return line;
}

struct StreamOffloader::Impl {
  BlockSwapConfig config;
  std::vector<ModulePtr> blocks;
  std::vector<uint32_t> streaming;              // rank -> block
  std::vector<std::vector<Streamed>> streamed;  // by block (resident ones: what a model gives)
  c10::Stream stream = c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kCPU));
  Tensor anchor;  // an input that requires grad, for blocks that have none
  std::exception_ptr bind_error;
  // The sequence: placement, model, ring, scheduler (client/c_api/c_api_offloader.cc).
  std::unique_ptr<bs_offloader, OffloaderDeleter> offloader;

  bool is_streaming(uint32_t block) const {
    return bs_offloader_is_streaming(offloader.get(), block) != 0;
  }
  bool started() const { return bs_offloader_started(offloader.get()) != 0; }

  // Checks a C ABI result, after rethrowing what a binding callback threw.
  void Check(int code, const char* what) {
    if (bind_error != nullptr) std::rethrow_exception(std::exchange(bind_error, nullptr));
    detail::Check(code, what);
  }

  // Streamed tensors must stay frozen (bs_offloader_check_block).
  void CheckFrozen(uint32_t block) const {
    Tensors none;
    const std::vector<bs_offloader_tensor> descs = Describe(streamed[block], false, none);
    Refuse(bs_offloader_check_block(offloader.get(), block, descs.data(),
                                    static_cast<uint32_t>(descs.size())));
  }

  static void OnBind(void* self, uint32_t block, uint32_t slot, uint32_t previous,
                     int loaded) noexcept {
    auto* impl = static_cast<Impl*>(self);
    try {
      impl->Bind(block, slot, previous, loaded != 0);
    } catch (...) {
      if (impl->bind_error == nullptr) impl->bind_error = std::current_exception();
    }
  }

  // `block` now lives in `slot`; `previous`, bound there before, goes back
  // to its master. A load changes the slot's bytes under both: their version
  // counters move, so a tensor autograd saved from either fails loudly.
  void Bind(uint32_t block, uint32_t slot, uint32_t previous, bool loaded) {
    if (previous != UINT32_MAX) {
      for (Streamed& t : streamed.at(previous)) {
        t.tensor.set_data(t.master);
        if (loaded) t.tensor.unsafeGetTensorImpl()->bump_version();
      }
    }
    void* base = bs_offloader_slot(offloader.get(), slot);
    for (Streamed& t : streamed.at(block)) {
      t.tensor.set_data(t.At(base, config.device));
      if (loaded) t.tensor.unsafeGetTensorImpl()->bump_version();
    }
  }

  // Construction steps (StreamOffloader's constructor runs them in order).
  void ResolveDevice();
  void CreateOffloader();
  void SelectStreamedTensors(bool from_daemon);
  void UseDevice();
  void OpenModel();
  void MoveResidentPartsToDevice();
  void Start();

  // A tensor left meta here has nothing to come from.
  void CheckNoMeta(uint32_t block) const {
    const auto check = [&](const std::string& name, const Tensor& t) {
      Refuse(bs_offloader_check_materialised(offloader.get(), block, name.c_str(),
                                             t.defined() && t.is_meta() ? 1 : 0));
    };
    for (const auto& p : blocks[block]->named_parameters()) check(p.key(), p.value());
    for (const auto& p : blocks[block]->named_buffers()) check(p.key(), p.value());
  }

  void CheckNotCapturing(const char* what) const {
#if BLOCKSWAP_TORCH_CUDA
    if (!config.device.is_cuda()) return;
    for (void* handle : {NativeStream(CurrentStream(config.device)), NativeStream(stream)}) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(static_cast<cudaStream_t>(handle), &status) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      if (status != cudaStreamCaptureStatusNone) Refuse(bs_offloader_refuse_capture(what));
    }
#else
    (void)what;
#endif
  }

  // Test mode (BlockSwapConfig.poison_released_slots): the scheduler tells
  // each slot it is about to hand back for another block's load; filling it
  // on the scheduler's stream, before the slot's free record, makes a read of
  // the block that is leaving it see 0xFF instead of plausible weights.
  static void OnBeforeReload(void* self, uint32_t slot) noexcept {
    auto* impl = static_cast<Impl*>(self);
    try {
      c10::OptionalStreamGuard guard;
      if (!impl->stream.device().is_cpu()) guard.reset_stream(impl->stream);
      const bs_offloader* o = impl->offloader.get();
      at::from_blob(bs_offloader_slot(o, slot), {static_cast<int64_t>(bs_offloader_slot_bytes(o))},
                    at::TensorOptions().dtype(at::kByte).device(impl->config.device))
          .fill_(0xFF);
    } catch (...) {
      if (impl->bind_error == nullptr) impl->bind_error = std::current_exception();
    }
  }

  void AfterForward(uint32_t block) {
    if (!is_streaming(block) || !started()) return;
    Join(CurrentStream(config.device), stream);
    Check(bs_offloader_after_forward(offloader.get(), block), "bs_offloader_after_forward");
  }

  // Every block, resident ones too: the hook also waits for block-1.
  void AfterBackward(uint32_t block) {
    if (!started()) return;
    const c10::Stream current = CurrentStream(config.device);
    Join(current, stream);
    Check(bs_offloader_after_backward(offloader.get(), block), "bs_offloader_after_backward");
    Join(stream, current);
  }

  void PrintPasses() const {
    for (Direction direction : {Direction::kForward, Direction::kBackward}) {
      if (std::optional<PassStats> pass = LastPassOf(offloader.get(), direction)) {
        std::fprintf(stderr, "[blockswap %s] %s\n", config.model_name.c_str(),
                     FormatPassStats(*pass).c_str());
      }
    }
  }
};

// --- construction, in named steps ------------------------------------------

// The device (a bare "cuda" is the current one) and the stream the
// scheduler orders against.
void StreamOffloader::Impl::ResolveDevice() {
  c10::Device& device = config.device;
  TORCH_CHECK(device.is_cpu() || device.is_cuda(),
              "BlockSwapConfig.device must be cpu or cuda, not ", device);
#if BLOCKSWAP_TORCH_CUDA
  if (device.is_cuda() && !device.has_index()) {
    device = c10::Device(c10::kCUDA, c10::cuda::current_device());
  }
#else
  TORCH_CHECK(!device.is_cuda(), "this blockswap::torch was built without CUDA support");
#endif
  CheckNotCapturing("creating a StreamOffloader");
  stream = config.stream.value_or(CurrentStream(device));
  TORCH_CHECK(stream.device() == device, "BlockSwapConfig.stream is on ", stream.device(),
              ", not on the offloader's device ", device);
}

// The C ABI's offloader: the configuration checked and the streaming blocks
// placed, before anything is registered.
void StreamOffloader::Impl::CreateOffloader() {
  const bs_offloader_config c{
      .kind = "",
      .num_blocks = static_cast<uint32_t>(blocks.size()),
      .blocks_to_swap = config.blocks_to_swap,
      .ring_size = config.ring_size,
      .forward_only = config.supports_backward ? 0 : 1,
      .socket_path = config.socket_path.c_str(),
      .client_name = config.client_name.c_str(),
      .model_id = config.model_id.c_str(),
      .model_file = config.model_file.c_str(),
      .model_block_pattern = config.model_block_pattern.c_str(),
      .model_select = config.model_select.c_str(),
      .model_select_rank = config.model_select_rank,
      .model_name = config.model_name.c_str(),
      .reconnect_timeout_s = 30,
      .name_hint = nullptr,
  };
  bs_offloader* created = nullptr;
  Refuse(bs_offloader_create(&c, &created));
  offloader.reset(created);
  streaming.resize(bs_offloader_streaming_count(created));
  for (uint32_t r = 0; r < streaming.size(); ++r) {
    streaming[r] = bs_offloader_streaming_block(created, r);
  }
}

// The streamed tensors the selector picks: of the streaming blocks, and of
// every block when the model comes from the daemon (a model of every block
// also feeds resident ones).
void StreamOffloader::Impl::SelectStreamedTensors(bool from_daemon) {
  const auto n = static_cast<uint32_t>(blocks.size());
  const Selector select = config.selector ? config.selector : Selector(LinearWeights);
  streamed.assign(n, {});
  for (uint32_t b = 0; b < n; ++b) {
    if (!from_daemon && !is_streaming(b)) continue;
    streamed[b] = SelectStreamed(offloader.get(), select, blocks[b], b);
    CheckFrozen(b);
  }
}

// Attaches and names the daemon device that is config.device.
void StreamOffloader::Impl::UseDevice() {
  Refuse(bs_offloader_connect(offloader.get()));
  Refuse(bs_offloader_use_device(offloader.get(),
                                 config.device.is_cuda() ? config.device.index() : -1,
                                 config.device_uuid.c_str(), config.device.str().c_str()));
}

// Registers the streaming blocks' tensors or opens the daemon's model, and
// points every streamed tensor's `master` at its bytes there. With a model
// of every block, the resident blocks' streamed tensors are copied from their
// masters to the device once.
void StreamOffloader::Impl::OpenModel() {
  const auto n = static_cast<uint32_t>(blocks.size());
  Tensors host_copies;  // the packed model's bytes, alive during the call
  std::vector<std::vector<bs_offloader_tensor>> descs(n);
  std::vector<bs_offloader_block> layout(n);
  for (uint32_t b = 0; b < n; ++b) {
    descs[b] = Describe(streamed[b], is_streaming(b), host_copies);
    layout[b] = bs_offloader_block{descs[b].data(), static_cast<uint32_t>(descs[b].size())};
  }
  Refuse(bs_offloader_open_model(offloader.get(), layout.data()));
  for (uint32_t b = 0; b < n; ++b) {
    const void* master = bs_offloader_master(offloader.get(), b);
    if (master == nullptr) continue;
    for (size_t k = 0; k < streamed[b].size(); ++k) {
      Streamed& t = streamed[b][k];
      t.offset = bs_offloader_tensor_offset(offloader.get(), b, static_cast<uint32_t>(k));
      // Read-only memory: the mapping is PROT_READ, a write faults.
      t.master = t.At(const_cast<void*>(master), c10::Device(c10::kCPU));
      if (!is_streaming(b)) {
        Rebind(t.tensor,
               at::empty(t.sizes, at::TensorOptions().dtype(t.dtype).device(config.device))
                   .copy_(t.master));
      }
    }
  }
}

// Everything but the streamed tensors goes to the device; the streamed ones
// are out of the way (empty) during the move, then point at their masters.
void StreamOffloader::Impl::MoveResidentPartsToDevice() {
  for (uint32_t b = 0; b < blocks.size(); ++b) {
    std::vector<Streamed>* own = is_streaming(b) ? &streamed[b] : nullptr;
    if (own != nullptr) {
      for (Streamed& t : *own) Rebind(t.tensor, at::empty({0}, at::TensorOptions().dtype(t.dtype)));
    }
    CheckNoMeta(b);
    blocks[b]->to(config.device);
    if (own != nullptr) {
      for (Streamed& t : *own) t.tensor.set_data(t.master);
    }
  }
}

// The ring and the scheduler over it, on the offloader's stream.
void StreamOffloader::Impl::Start() {
  Check(bs_offloader_start(offloader.get(), NativeStream(stream), &Impl::OnBind, this),
        "bs_offloader_start");
  if (config.poison_released_slots) {
    Check(bs_offloader_set_reload_hook(offloader.get(), &Impl::OnBeforeReload, this),
          "bs_offloader_set_reload_hook");
  }
  anchor = at::zeros({0}, at::TensorOptions().device(config.device)).requires_grad_(true);
}

StreamOffloader::StreamOffloader(std::vector<ModulePtr> blocks, BlockSwapConfig config)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.config = std::move(config);
  m.blocks = std::move(blocks);
  TORCH_CHECK(!m.blocks.empty(), "StreamOffloader needs at least one block");
  for (size_t b = 0; b < m.blocks.size(); ++b) {
    TORCH_CHECK(m.blocks[b] != nullptr, "block ", b, " is null");
  }
  m.ResolveDevice();
  m.CreateOffloader();
  const bool from_daemon = bs_offloader_from_daemon(m.offloader.get()) != 0;
  if (m.streaming.empty() && !from_daemon) {
    for (const ModulePtr& block : m.blocks) block->to(m.config.device);
    return;
  }
  m.SelectStreamedTensors(from_daemon);
  m.UseDevice();
  m.OpenModel();
  m.MoveResidentPartsToDevice();
  if (!m.streaming.empty()) m.Start();
}

StreamOffloader::~StreamOffloader() {
  Impl& m = *impl_;
  // The masters and slots are unmapped with the model and the ring: leave
  // the streamed tensors empty rather than dangling.
  for (uint32_t b : m.streaming) {
    for (Streamed& t : m.streamed[b]) {
      try {
        t.tensor.set_data(at::empty({0}, at::TensorOptions().dtype(t.dtype)));
      } catch (...) {
      }
    }
  }
  // The ring's teardown after the last use of its slots: closed on the
  // scheduler's stream once that follows the compute stream (its last
  // kernels may still read a slot).
  if (!m.started()) return;
  try {
    Join(CurrentStream(m.config.device), m.stream);
    (void)bs_offloader_close(m.offloader.get(), NativeStream(m.stream), 5000);
  } catch (...) {
    // A destructor cannot report it; bs_offloader_destroy closes what is left.
  }
}

void StreamOffloader::PrepareBlockDevicesBeforeForward() {
  Impl& m = *impl_;
  if (!m.started()) return;
  m.CheckNotCapturing("PrepareBlockDevicesBeforeForward");
  m.Check(bs_offloader_prepare(m.offloader.get()), "bs_offloader_prepare");
  Join(m.stream, CurrentStream(m.config.device));
}

void StreamOffloader::WaitForBlock(uint32_t block) {
  Impl& m = *impl_;
  if (!m.is_streaming(block)) {
    Refuse(bs_offloader_wait_for_block(m.offloader.get(), block));  // refuses one out of range
    return;
  }
  m.CheckNotCapturing("WaitForBlock");
  m.CheckFrozen(block);
  m.Check(bs_offloader_wait_for_block(m.offloader.get(), block), "bs_offloader_wait_for_block");
  Join(m.stream, CurrentStream(m.config.device));
}

void StreamOffloader::SubmitMoveBlocksForward(uint32_t block) { impl_->AfterForward(block); }

void StreamOffloader::AfterBackward(uint32_t block) { impl_->AfterBackward(block); }

void StreamOffloader::SetForwardOnly(bool forward_only) {
  Impl& m = *impl_;
  m.Check(bs_offloader_set_forward_only(m.offloader.get(), forward_only ? 1 : 0),
          "bs_offloader_set_forward_only");
}

Tensor StreamOffloader::Forward(uint32_t block, const BlockFn& fn, const Tensor& input) {
  // By value: backward calls it again, long after this returns.
  Tensors outputs = Forward(
      block, [fn](const Tensors& inputs) { return Tensors{fn(inputs.at(0))}; }, Tensors{input});
  return outputs.at(0);
}

Tensors StreamOffloader::Forward(uint32_t block, const BlockFnList& fn, const Tensors& inputs) {
  WaitForBlock(block);
  Tensors outputs = Checkpoint(block, fn, inputs);
  SubmitMoveBlocksForward(block);
  return outputs;
}

Tensors StreamOffloader::Checkpoint(uint32_t block, const BlockFnList& fn, const Tensors& inputs) {
  Impl& m = *impl_;
  if (!c10::GradMode::is_enabled() || !m.config.supports_backward || !m.started()) {
    return fn(inputs);
  }
  if (!m.config.gradient_checkpointing) return RunWithSavedTokens(*this, block, fn, inputs);
  return RunAsCheckpoint(*this, block, fn, inputs, m.anchor, m.config.offload_activations);
}

std::optional<size_t> StreamOffloader::StreamedIndex(uint32_t block, const Tensor& tensor) const {
  const Impl& m = *impl_;
  if (!m.is_streaming(block)) return std::nullopt;
  const std::vector<Streamed>& streamed = m.streamed[block];
  for (size_t i = 0; i < streamed.size(); ++i) {
    if (streamed[i].tensor.unsafeGetTensorImpl() == tensor.unsafeGetTensorImpl()) return i;
  }
  return std::nullopt;
}

Tensor StreamOffloader::StreamedForBackward(uint32_t block, size_t index) {
  Impl& m = *impl_;
  bs_offloader* o = m.offloader.get();
  const uint32_t slot = bs_offloader_slot_of(o, block);
  if (bs_offloader_slot_block(o, slot) != block) {
    // Out of the expected order: the hooks did not bring the block back.
    const c10::Stream current = CurrentStream(m.config.device);
    Join(current, m.stream);
    m.Check(bs_offloader_ensure_block(o, block), "bs_offloader_ensure_block");
    Join(m.stream, current);
  }
  return m.streamed[block].at(index).At(bs_offloader_slot(o, slot), m.config.device);
}

void StreamOffloader::FinishPass() {
  Impl& m = *impl_;
  m.Check(bs_offloader_finish_pass(m.offloader.get()), "bs_offloader_finish_pass");
  if (m.config.debug && m.started()) m.PrintPasses();
}

std::optional<PassStats> StreamOffloader::LastPass(Direction direction) const {
  return LastPassOf(impl_->offloader.get(), direction);
}

uint32_t StreamOffloader::num_blocks() const { return static_cast<uint32_t>(impl_->blocks.size()); }
const std::vector<uint32_t>& StreamOffloader::streaming_blocks() const { return impl_->streaming; }
std::optional<uint32_t> StreamOffloader::streaming_rank(uint32_t block) const {
  const std::vector<uint32_t>& s = impl_->streaming;
  const auto it = std::find(s.begin(), s.end(), block);
  if (it == s.end()) return std::nullopt;
  return static_cast<uint32_t>(it - s.begin());
}
uint32_t StreamOffloader::ring_slots() const {
  return bs_offloader_ring_slots(impl_->offloader.get());
}
const void* StreamOffloader::slot_data(uint32_t slot) const {
  return slot < ring_slots() ? bs_offloader_slot(impl_->offloader.get(), slot) : nullptr;
}
uint64_t StreamOffloader::slot_bytes() const {
  return bs_offloader_slot_bytes(impl_->offloader.get());
}
std::string StreamOffloader::model_id() const {
  return bs_offloader_model_id(impl_->offloader.get());
}
c10::Stream StreamOffloader::stream() const { return impl_->stream; }
const BlockSwapConfig& StreamOffloader::config() const { return impl_->config; }

}  // namespace blockswap::torch
