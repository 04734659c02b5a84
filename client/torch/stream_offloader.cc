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
#include <torch/nn/modules/linear.h>

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

#if BLOCKSWAP_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace blockswap::torch {
namespace {

using at::Tensor;
using Tensors = std::vector<at::Tensor>;

// The safetensors name of `type` (the client library's table,
// bs_dtype_of_torch, keyed by the name Python gives the dtype).
std::string DtypeName(at::ScalarType type) {
  const std::string torch_name(c10::getDtypeNames(type).first);
  const char* name = bs_dtype_of_torch(torch_name.c_str());
  TORCH_CHECK(name != nullptr, "blockswap::torch cannot stream a tensor of dtype ", type, ": ",
              bs_last_error());
  return name;
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string FullName(const StreamedTensor& entry) {
  return entry.path.empty() ? entry.name : entry.path + "." + entry.name;
}

// The module's own handle of the tensor (same TensorImpl), so that set_data
// repoints what the module computes with.
Tensor FindTensor(const StreamedTensor& entry, uint32_t block) {
  TORCH_CHECK(entry.module != nullptr, "the selector returned no module for '", FullName(entry),
              "' in block ", block);
  if (const Tensor* p = entry.module->named_parameters(false).find(entry.name)) return *p;
  if (const Tensor* b = entry.module->named_buffers(false).find(entry.name)) return *b;
  TORCH_CHECK(false, "the selector picked '", FullName(entry), "' in block ", block,
              ", which is neither a parameter nor a buffer of ", entry.module->name());
}

// set_data, also between meta and real: set_data refuses to change a
// tensor's kind (meta to cpu/cuda and back), so a frozen tensor gets it the
// way set_data gives data (the same shallow copy, without the kind check; a
// frozen tensor has no gradient accumulator to reset).
void Rebind(const Tensor& tensor, const Tensor& data) {
  if (tensor.is_meta() == data.is_meta()) {
    tensor.set_data(data);
    return;
  }
  TORCH_CHECK(!tensor.requires_grad(),
              "a tensor that requires grad cannot change between meta and real data");
  tensor.unsafeGetTensorImpl()->shallow_copy_from(data.getIntrusivePtr());
}

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

struct SchedulerDeleter {
  void operator()(bs_scheduler* scheduler) const { bs_scheduler_destroy(scheduler); }
};

// The last finished pass in `direction`, if there is one.
std::optional<PassStats> LastPassOf(const bs_scheduler* scheduler, Direction direction) {
  bs_pass_stats c{};
  if (bs_scheduler_last_pass(scheduler, static_cast<int>(direction), &c) != BS_OK) {
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

std::vector<StreamedTensor> LinearWeights(const ModulePtr& block) {
  std::vector<StreamedTensor> picked;
  for (const auto& item : block->named_modules("", /*include_self=*/true)) {
    const ModulePtr& module = item.value();
    const bool linear = dynamic_cast<::torch::nn::LinearImpl*>(module.get()) != nullptr ||
                        EndsWith(module->name(), "Linear") ||
                        EndsWith(module->name(), "LinearImpl");
    if (!linear) continue;
    const Tensor* weight = module->named_parameters(false).find("weight");
    if (weight == nullptr || !weight->defined()) continue;
    picked.push_back(StreamedTensor{item.key(), module, "weight"});
  }
  return picked;
}

void ReleaseToMeta(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.defined(), "ReleaseToMeta: the tensor is undefined");
  if (!tensor.is_meta())
    Rebind(tensor, at::empty(tensor.sizes(), tensor.options().device(at::kMeta)));
}

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
  // One streamed tensor of a streaming block.
  struct Streamed {
    Tensor tensor;  // the module's handle
    std::string name;
    std::vector<int64_t> sizes;
    at::ScalarType dtype;
    uint64_t offset = 0;  // in the model block / ring slot
    Tensor master = {};   // view of the daemon's read-only master
  };

  BlockSwapConfig config;
  std::vector<ModulePtr> blocks;
  std::vector<uint32_t> streaming;               // rank -> block
  std::vector<std::optional<uint32_t>> rank_of;  // block -> rank
  uint32_t ring_slots = 0;
  std::vector<std::vector<Streamed>> streamed;      // by rank
  std::vector<std::optional<uint32_t>> slot_block;  // block bound to each slot
  bool forward_only = false;
  c10::Stream stream = c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kCPU));
  Tensor anchor;  // an input that requires grad, for blocks that have none
  std::exception_ptr bind_error;

  // Destroyed in reverse: scheduler, ring, model, client.
  std::optional<Client> client;
  std::optional<Model> model;
  std::optional<Ring> ring;
  std::unique_ptr<bs_scheduler, SchedulerDeleter> scheduler;

  bool is_streaming(uint32_t block) const {
    return block < rank_of.size() && rank_of[block].has_value();
  }

  // Checks a C ABI result, after rethrowing what a binding callback threw.
  void Check(int code, const char* what) {
    if (bind_error != nullptr) std::rethrow_exception(std::exchange(bind_error, nullptr));
    detail::Check(code, what);
  }

  static void OnBind(void* self, uint32_t block, uint32_t slot, int loaded) noexcept {
    auto* impl = static_cast<Impl*>(self);
    try {
      impl->Bind(block, slot, loaded != 0);
    } catch (...) {
      if (impl->bind_error == nullptr) impl->bind_error = std::current_exception();
    }
  }

  // `block` now lives in `slot`; the block bound there before goes back to
  // its master. A load changes the slot's bytes under both: their version
  // counters move, so a tensor autograd saved from either fails loudly.
  void Bind(uint32_t block, uint32_t slot, bool loaded) {
    std::optional<uint32_t>& previous = slot_block.at(slot);
    if (previous.has_value() && *previous != block) {
      for (Streamed& t : streamed[*rank_of[*previous]]) {
        t.tensor.set_data(t.master);
        if (loaded) t.tensor.unsafeGetTensorImpl()->bump_version();
      }
    }
    auto* base = static_cast<char*>(ring->slot(slot));
    for (Streamed& t : streamed[*rank_of.at(block)]) {
      t.tensor.set_data(at::from_blob(base + t.offset, t.sizes,
                                      at::TensorOptions().dtype(t.dtype).device(config.device)));
      if (loaded) t.tensor.unsafeGetTensorImpl()->bump_version();
    }
    previous = block;
  }

  // The UUID of the daemon device that is config.device.
  // Construction steps (StreamOffloader's constructor runs them in order).
  void ResolveDevice();
  void PlaceStreamingBlocks();
  std::vector<std::vector<Streamed>> SelectStreamedTensors(bool from_daemon);
  bool OpenOrRegisterModel(bool from_daemon);
  uint64_t BindEveryMaster(bool every_block, std::vector<std::vector<Streamed>>& picked);
  void MoveResidentPartsToDevice();
  void CreateRingAndScheduler(const std::string& uuid, uint64_t slot_bytes, bool every_block);

  std::string DaemonDevice() const {
    const c10::Device& device = config.device;
    std::string uuid = config.device_uuid;
    const std::vector<std::string> devices = client->devices();
    if (client->backend() == BS_BACKEND_HOST) {
      TORCH_CHECK(device.is_cpu(),
                  "blockswapd runs the host backend (its rings are host memory): "
                  "BlockSwapConfig.device must be cpu, not ",
                  device);
      if (uuid.empty() && !devices.empty()) uuid = devices.front();
    } else {
      TORCH_CHECK(device.is_cuda(), "blockswapd runs the cuda backend: BlockSwapConfig.device ",
                  "must be a cuda device, not ", device);
#if BLOCKSWAP_TORCH_CUDA
      if (uuid.empty()) {
        cudaDeviceProp prop{};
        TORCH_CHECK(cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess,
                    "cudaGetDeviceProperties(", device, ") failed");
        static constexpr char kHex[] = "0123456789abcdef";
        uuid = "GPU-";
        for (int i = 0; i < 16; ++i) {
          if (i == 4 || i == 6 || i == 8 || i == 10) uuid += '-';
          const auto byte = static_cast<unsigned char>(prop.uuid.bytes[i]);
          uuid += kHex[byte >> 4];
          uuid += kHex[byte & 0xf];
        }
      }
#endif
    }
    TORCH_CHECK(std::find(devices.begin(), devices.end(), uuid) != devices.end(), "device ", device,
                " (", uuid, ") is not one blockswapd drives (it has ", devices.size(),
                " devices; BlockSwapConfig.device_uuid names one)");
    return uuid;
  }

  // Matches block `block`'s streamed tensors with model block `model_block`
  // (bs_model_match_block: same set, dtype and shape) and points each one's
  // `master` at its bytes there.
  void BindMasters(uint32_t block, uint32_t model_block, std::vector<Streamed>& tensors) {
    std::vector<std::string> dtypes;
    std::vector<std::vector<uint64_t>> shapes;
    std::vector<bs_tensor_desc> descs;
    dtypes.reserve(tensors.size());
    shapes.reserve(tensors.size());
    for (const Streamed& t : tensors) {
      dtypes.push_back(DtypeName(t.dtype));
      shapes.emplace_back(t.sizes.begin(), t.sizes.end());
      descs.push_back(bs_tensor_desc{t.name.c_str(), dtypes.back().c_str(), shapes.back().data(),
                                     static_cast<uint32_t>(shapes.back().size()), nullptr});
    }
    std::vector<uint64_t> offsets(tensors.size());
    TORCH_CHECK(bs_model_match_block(model->get(), model_block, descs.data(),
                                     static_cast<uint32_t>(descs.size()), offsets.data()) == BS_OK,
                "block ", block, ": ", bs_last_error());
    const auto* master = static_cast<const char*>(model->master(model_block));
    for (size_t k = 0; k < tensors.size(); ++k) {
      Streamed& t = tensors[k];
      t.offset = offsets[k];
      // Read-only memory: the mapping is PROT_READ, a write faults.
      t.master = at::from_blob(const_cast<char*>(master) + t.offset, t.sizes,
                               at::TensorOptions().dtype(t.dtype).device(at::kCPU));
    }
  }

  // A tensor left meta here has nothing to come from.
  void CheckNoMeta(uint32_t block) const {
    const auto check = [&](const std::string& name, const Tensor& t) {
      TORCH_CHECK(!t.defined() || !t.is_meta(), "block ", block, " tensor '", name,
                  "' is a meta tensor (never materialised) that no model gives: only the "
                  "selector's tensors are bound to the daemon's model (one of every block "
                  "feeds resident blocks too; one of only the streaming blocks does not)");
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
      TORCH_CHECK(status == cudaStreamCaptureStatusNone, "blockswap::torch: ", what,
                  " during CUDA graph capture. Streamed blocks are loaded by blockswapd and "
                  "waited for on the host, which a captured graph cannot replay: capture only "
                  "the resident part of the model, or run the offloaded blocks outside the graph");
    }
#else
    (void)what;
#endif
  }

  void CheckFrozen(uint32_t block) const {
    if (is_streaming(block)) CheckFrozen(block, streamed[*rank_of[block]]);
  }
  static void CheckFrozen(uint32_t block, const std::vector<Streamed>& tensors) {
    for (const Streamed& t : tensors) {
      TORCH_CHECK(!t.tensor.requires_grad(), "block ", block, " tensor '", t.name,
                  "' requires grad, but streamed tensors must be frozen (the next load "
                  "overwrites its slot). Call requires_grad_(false) on it, or leave it out of "
                  "BlockSwapConfig.selector");
    }
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
      at::from_blob(impl->ring->slot(slot), {static_cast<int64_t>(impl->ring->slot_bytes())},
                    at::TensorOptions().dtype(at::kByte).device(impl->config.device))
          .fill_(0xFF);
    } catch (...) {
      if (impl->bind_error == nullptr) impl->bind_error = std::current_exception();
    }
  }

  void AfterForward(uint32_t block) {
    if (!is_streaming(block)) return;
    Join(CurrentStream(config.device), stream);
    Check(bs_scheduler_after_forward(scheduler.get(), block), "bs_scheduler_after_forward");
  }

  // Every block, resident ones too: the hook also waits for block-1.
  void AfterBackward(uint32_t block) {
    if (scheduler == nullptr) return;
    const c10::Stream current = CurrentStream(config.device);
    Join(current, stream);
    Check(bs_scheduler_after_backward(scheduler.get(), block), "bs_scheduler_after_backward");
    Join(stream, current);
  }

  void PrintPasses() const {
    for (Direction direction : {Direction::kForward, Direction::kBackward}) {
      if (std::optional<PassStats> pass = LastPassOf(scheduler.get(), direction)) {
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

// Which blocks stream and how many slots the ring has: the scheduler's
// placement (bs_place_blocks), before anything is registered.
void StreamOffloader::Impl::PlaceStreamingBlocks() {
  const auto n = static_cast<uint32_t>(blocks.size());
  uint32_t count = 0;
  Check(
      bs_place_blocks(n, config.blocks_to_swap, config.ring_size, nullptr, 0, &count, &ring_slots),
      "bs_place_blocks");
  streaming.resize(count);
  Check(bs_place_blocks(n, config.blocks_to_swap, config.ring_size, streaming.data(), count, &count,
                        &ring_slots),
        "bs_place_blocks");
  rank_of.assign(n, std::nullopt);
  for (uint32_t r = 0; r < count; ++r) rank_of[streaming[r]] = r;
}

// The streamed tensors the selector picks: of the streaming blocks, and of
// every block when the model comes from the daemon (a model of every block
// also feeds resident ones). Keeps the streaming ones (by rank) and returns
// every block's pick.
std::vector<std::vector<StreamOffloader::Impl::Streamed>>
StreamOffloader::Impl::SelectStreamedTensors(bool from_daemon) {
  const auto n = static_cast<uint32_t>(blocks.size());
  const auto count = static_cast<uint32_t>(streaming.size());
  const Selector select = config.selector ? config.selector : Selector(LinearWeights);
  std::vector<std::vector<Impl::Streamed>> picked(n);
  for (uint32_t b = 0; b < n; ++b) {
    if (!from_daemon && !is_streaming(b)) continue;
    const std::vector<StreamedTensor> entries = select(blocks[b]);
    TORCH_CHECK(!entries.empty() || !is_streaming(b), "block ", b,
                " streams, but the selector picked no tensor in it");
    for (const StreamedTensor& entry : entries) {
      Tensor tensor = FindTensor(entry, b);
      TORCH_CHECK(tensor.defined(), "block ", b, " tensor '", FullName(entry), "' is undefined");
      TORCH_CHECK(from_daemon || !tensor.is_meta(), "block ", b, " tensor '", FullName(entry),
                  "' is a meta tensor (never materialised): set BlockSwapConfig.model_id or "
                  "model_file to bind it to a model the daemon holds");
      picked[b].push_back(
          Impl::Streamed{tensor, FullName(entry), tensor.sizes().vec(), tensor.scalar_type()});
    }
  }
  streamed.resize(count);
  for (uint32_t r = 0; r < count; ++r) {
    streamed[r] = std::move(picked[streaming[r]]);
    CheckFrozen(streaming[r]);
  }
  return picked;
}

// Uploads the streaming blocks' tensors, or opens the daemon's model (by id
// or from a file). Returns whether the model holds every block (model block
// b is transformer block b) rather than only the streaming ones in rank order.
bool StreamOffloader::Impl::OpenOrRegisterModel(bool from_daemon) {
  const auto n = static_cast<uint32_t>(blocks.size());
  const auto count = static_cast<uint32_t>(streaming.size());
  bool every_block = false;
  if (!from_daemon) {
    std::vector<Block> layout(count);
    Tensors host_copies;
    for (uint32_t r = 0; r < count; ++r) {
      for (const Impl::Streamed& t : streamed[r]) {
        Tensor host = t.tensor.detach().to(at::kCPU).contiguous();
        host_copies.push_back(host);
        layout[r].push_back(blockswap::Tensor{t.name, DtypeName(t.dtype),
                                              std::vector<uint64_t>(t.sizes.begin(), t.sizes.end()),
                                              host.data_ptr()});
      }
    }
    model.emplace(client->Register(config.model_name, layout));
  } else {
    model.emplace(config.model_file.empty()
                      ? client->Open(config.model_id)
                      : client->RegisterFile(config.model_file, config.model_block_pattern,
                                             config.model_select, config.model_select_rank));
    const uint32_t have = model->block_count();
    TORCH_CHECK(have == n || have == count, "model ", model->id(), " has ", have,
                " blocks; the offloader has ", n, " blocks of which ", count,
                " stream: the model must hold every block (", n, ") or only the streaming ones (",
                count, ", in order)");
    every_block = have == n && count < n;
  }
  return every_block;
}

// Points every streamed tensor at its master (the model's layout says where
// each sits in its block) and, with a model of every block, copies the
// resident blocks' streamed tensors to the device once. Returns the bytes a
// slot needs.
uint64_t StreamOffloader::Impl::BindEveryMaster(bool every_block,
                                                std::vector<std::vector<Streamed>>& picked) {
  const auto n = static_cast<uint32_t>(blocks.size());
  const auto count = static_cast<uint32_t>(streaming.size());
  const c10::Device& device = config.device;
  uint64_t slot_bytes = 0;
  for (uint32_t r = 0; r < count; ++r) {
    const uint32_t b = streaming[r];
    const uint32_t model_block = every_block ? b : r;
    slot_bytes = std::max(slot_bytes, model->block_bytes(model_block));
    BindMasters(b, model_block, streamed[r]);
  }
  // A model of every block gives the resident blocks' streamed tensors too:
  // copied once from the masters to the device.
  for (uint32_t b = 0; b < n && every_block; ++b) {
    if (is_streaming(b)) continue;
    BindMasters(b, b, picked[b]);
    CheckFrozen(b, picked[b]);
    for (Impl::Streamed& t : picked[b]) {
      Rebind(t.tensor,
             at::empty(t.sizes, at::TensorOptions().dtype(t.dtype).device(device)).copy_(t.master));
    }
  }
  return slot_bytes;
}

// Everything but the streamed tensors goes to the device; the streamed ones
// are out of the way (empty) during the move, then point at their masters.
void StreamOffloader::Impl::MoveResidentPartsToDevice() {
  const auto n = static_cast<uint32_t>(blocks.size());
  const c10::Device& device = config.device;
  for (uint32_t b = 0; b < n; ++b) {
    std::vector<Impl::Streamed>* own = is_streaming(b) ? &streamed[*rank_of[b]] : nullptr;
    if (own != nullptr) {
      for (Impl::Streamed& t : *own) {
        Rebind(t.tensor, at::empty({0}, at::TensorOptions().dtype(t.dtype)));
      }
    }
    CheckNoMeta(b);
    blocks[b]->to(device);
    if (own != nullptr) {
      for (Impl::Streamed& t : *own) t.tensor.set_data(t.master);
    }
  }
}

// The ring on the daemon's device and the C ABI's scheduler over it.
void StreamOffloader::Impl::CreateRingAndScheduler(const std::string& uuid, uint64_t slot_bytes,
                                                   bool every_block) {
  const auto n = static_cast<uint32_t>(blocks.size());
  const c10::Device& device = config.device;
  ring.emplace(client->CreateRing(uuid, ring_slots, slot_bytes));
  slot_block.assign(ring_slots, std::nullopt);
  const bs_scheduler_config scheduler_config{n, config.blocks_to_swap, config.ring_size,
                                             forward_only ? 1 : 0, every_block ? 1 : 0};
  bs_scheduler* created = nullptr;
  Check(bs_scheduler_create(client->get(), ring->get(), model->get(), &scheduler_config,
                            NativeStream(stream), &Impl::OnBind, this, &created),
        "bs_scheduler_create");
  scheduler.reset(created);
  if (config.poison_released_slots) {
    Check(bs_scheduler_set_reload_hook(created, &Impl::OnBeforeReload, this),
          "bs_scheduler_set_reload_hook");
  }
  anchor = at::zeros({0}, at::TensorOptions().device(device)).requires_grad_(true);
}

StreamOffloader::StreamOffloader(std::vector<ModulePtr> blocks, BlockSwapConfig config)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.config = std::move(config);
  m.blocks = std::move(blocks);
  m.forward_only = !m.config.supports_backward;
  TORCH_CHECK(!m.blocks.empty(), "StreamOffloader needs at least one block");
  for (size_t b = 0; b < m.blocks.size(); ++b) {
    TORCH_CHECK(m.blocks[b] != nullptr, "block ", b, " is null");
  }
  m.ResolveDevice();
  m.PlaceStreamingBlocks();
  const bool from_daemon = !m.config.model_id.empty() || !m.config.model_file.empty();
  TORCH_CHECK(m.config.model_id.empty() || m.config.model_file.empty(),
              "BlockSwapConfig.model_id and model_file are exclusive (the file's model has its "
              "own id)");
  if (m.streaming.empty() && !from_daemon) {
    for (const ModulePtr& block : m.blocks) block->to(m.config.device);
    return;
  }
  std::vector<std::vector<Impl::Streamed>> picked = m.SelectStreamedTensors(from_daemon);
  m.client.emplace(m.config.socket_path, m.config.client_name);
  const std::string uuid = m.DaemonDevice();
  const bool every_block = m.OpenOrRegisterModel(from_daemon);
  const uint64_t slot_bytes = m.BindEveryMaster(every_block, picked);
  m.MoveResidentPartsToDevice();
  if (m.streaming.empty()) return;
  m.CreateRingAndScheduler(uuid, slot_bytes, every_block);
}

StreamOffloader::~StreamOffloader() {
  Impl& m = *impl_;
  // The masters and slots are unmapped with the model and the ring: leave
  // the streamed tensors empty rather than dangling.
  for (auto& block : m.streamed) {
    for (Impl::Streamed& t : block) {
      try {
        t.tensor.set_data(at::empty({0}, at::TensorOptions().dtype(t.dtype)));
      } catch (...) {
      }
    }
  }
  // The ring's teardown after the last use of its slots: the scheduler goes,
  // then the ring is closed on the scheduler's stream once that follows the
  // compute stream (its last kernels may still read a slot). Closing records
  // the releases, synchronises, and only then lets the daemon free the ring.
  m.scheduler.reset();
  if (!m.ring.has_value()) return;
  try {
    Join(CurrentStream(m.config.device), m.stream);
    m.ring->Close(NativeStream(m.stream));
  } catch (...) {
    // A destructor cannot report it; ~Ring closes what is left.
  }
}

void StreamOffloader::PrepareBlockDevicesBeforeForward() {
  Impl& m = *impl_;
  if (m.scheduler == nullptr) return;
  m.CheckNotCapturing("PrepareBlockDevicesBeforeForward");
  m.Check(bs_scheduler_prepare(m.scheduler.get()), "bs_scheduler_prepare");
  Join(m.stream, CurrentStream(m.config.device));
}

void StreamOffloader::WaitForBlock(uint32_t block) {
  Impl& m = *impl_;
  TORCH_CHECK(block < m.blocks.size(), "block ", block, " out of range (", m.blocks.size(),
              " blocks)");
  if (!m.is_streaming(block)) return;
  m.CheckNotCapturing("WaitForBlock");
  m.CheckFrozen(block);
  m.Check(bs_scheduler_wait_for_block(m.scheduler.get(), block), "bs_scheduler_wait_for_block");
  Join(m.stream, CurrentStream(m.config.device));
}

void StreamOffloader::SubmitMoveBlocksForward(uint32_t block) { impl_->AfterForward(block); }

void StreamOffloader::AfterBackward(uint32_t block) { impl_->AfterBackward(block); }

void StreamOffloader::SetForwardOnly(bool forward_only) {
  Impl& m = *impl_;
  m.forward_only = forward_only;
  if (m.scheduler != nullptr) {
    m.Check(bs_scheduler_set_forward_only(m.scheduler.get(), forward_only ? 1 : 0),
            "bs_scheduler_set_forward_only");
  }
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
  if (!c10::GradMode::is_enabled() || !m.config.supports_backward || m.scheduler == nullptr) {
    return fn(inputs);
  }
  if (!m.config.gradient_checkpointing) return RunWithSavedTokens(*this, block, fn, inputs);
  return RunAsCheckpoint(*this, block, fn, inputs, m.anchor, m.config.offload_activations);
}

std::optional<size_t> StreamOffloader::StreamedIndex(uint32_t block, const Tensor& tensor) const {
  const Impl& m = *impl_;
  if (!m.is_streaming(block)) return std::nullopt;
  const std::vector<Impl::Streamed>& streamed = m.streamed[*m.rank_of[block]];
  for (size_t i = 0; i < streamed.size(); ++i) {
    if (streamed[i].tensor.unsafeGetTensorImpl() == tensor.unsafeGetTensorImpl()) return i;
  }
  return std::nullopt;
}

Tensor StreamOffloader::StreamedForBackward(uint32_t block, size_t index) {
  Impl& m = *impl_;
  const uint32_t slot = *m.rank_of.at(block) % m.ring_slots;
  if (m.slot_block.at(slot) != block) {
    // Out of the expected order: the hooks did not bring the block back.
    const c10::Stream current = CurrentStream(m.config.device);
    Join(current, m.stream);
    m.Check(bs_scheduler_ensure_block(m.scheduler.get(), block), "bs_scheduler_ensure_block");
    Join(m.stream, current);
  }
  const Impl::Streamed& t = m.streamed[*m.rank_of[block]].at(index);
  return at::from_blob(static_cast<char*>(m.ring->slot(slot)) + t.offset, t.sizes,
                       at::TensorOptions().dtype(t.dtype).device(m.config.device));
}

void StreamOffloader::FinishPass() {
  Impl& m = *impl_;
  if (m.scheduler == nullptr) return;
  m.Check(bs_scheduler_finish_pass(m.scheduler.get()), "bs_scheduler_finish_pass");
  if (m.config.debug) m.PrintPasses();
}

std::optional<PassStats> StreamOffloader::LastPass(Direction direction) const {
  if (impl_->scheduler == nullptr) return std::nullopt;
  return LastPassOf(impl_->scheduler.get(), direction);
}

uint32_t StreamOffloader::num_blocks() const { return static_cast<uint32_t>(impl_->blocks.size()); }
const std::vector<uint32_t>& StreamOffloader::streaming_blocks() const { return impl_->streaming; }
std::optional<uint32_t> StreamOffloader::streaming_rank(uint32_t block) const {
  return block < impl_->rank_of.size() ? impl_->rank_of[block] : std::nullopt;
}
uint32_t StreamOffloader::ring_slots() const { return impl_->ring_slots; }
const void* StreamOffloader::slot_data(uint32_t slot) const {
  return impl_->ring.has_value() && slot < impl_->ring_slots ? impl_->ring->slot(slot) : nullptr;
}
uint64_t StreamOffloader::slot_bytes() const {
  return impl_->ring.has_value() ? impl_->ring->slot_bytes() : 0;
}
std::string StreamOffloader::model_id() const {
  return impl_->model.has_value() ? impl_->model->id() : "";
}
c10::Stream StreamOffloader::stream() const { return impl_->stream; }
const BlockSwapConfig& StreamOffloader::config() const { return impl_->config; }

}  // namespace blockswap::torch
