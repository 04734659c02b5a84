#include "shared/protocol/ring.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "shared/base/status.h"
#include "shared/os/futex.h"

namespace blockswap {

absl::Status ValidateRingShape(const RingShape& shape) {
  if (shape.slot_count == 0 || shape.slot_count > kMaxRingSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring of ", shape.slot_count, " slots (must be 1..", kMaxRingSlots, ")"));
  }
  if (shape.slot_bytes == 0) return absl::InvalidArgumentError("ring slots of 0 bytes");
  // Keeps slot_count * stride far from overflow.
  if (shape.slot_bytes > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring slots of ", shape.slot_bytes, " bytes (at most 1 TiB)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DaemonRing>> DaemonRing::Create(Device& device, uint64_t ring_id,
                                                               const RingShape& shape,
                                                               uint64_t boot_id) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateRingShape(shape));
  std::unique_ptr<DaemonRing> ring(new DaemonRing(device, ring_id, shape));
  const uint64_t stride = SlotStride(shape);
  for (uint32_t s = 0; s < shape.slot_count; ++s) ring->slot_offsets_.push_back(s * stride);
  BLOCKSWAP_ASSIGN_OR_RETURN(ring->memory_, device.Allocate(stride * shape.slot_count));
  BLOCKSWAP_RETURN_IF_ERROR(ring->CreateReadyWords());

  BLOCKSWAP_ASSIGN_OR_RETURN(
      ring->daemon_control_,
      SharedMemory::Create(absl::StrCat("ring-", ring_id, "-daemon-control"), kControlBlockBytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(ring->daemon_control_map_,
                             ring->daemon_control_.Map(Access::kReadWrite));
  // Only the mapping above may ever write the daemon's control block.
  BLOCKSWAP_RETURN_IF_ERROR(ring->daemon_control_.SealAgainstNewWriters());
  DaemonControlBlock& control = ring->control();
  control.magic = kDaemonControlMagic;
  control.version = kControlBlockVersion;
  control.slot_count = shape.slot_count;
  control.status.boot_id.store(boot_id, std::memory_order_relaxed);
  control.status.error_slot.store(UINT32_MAX, std::memory_order_relaxed);
  control.status.heartbeat_ms.store(MonotonicMillis(), std::memory_order_release);

  BLOCKSWAP_ASSIGN_OR_RETURN(ring->client_control_,
                             SharedMemory::Create(absl::StrCat("ring-", ring_id, "-client-control"),
                                                  kClientControlObjectBytes));
  {
    // Written once before the client has it; the daemon's lasting mapping
    // below is read-only.
    BLOCKSWAP_ASSIGN_OR_RETURN(Mapping init, ring->client_control_.Map(Access::kReadWrite));
    auto* client = static_cast<ClientControlBlock*>(init.data());
    client->magic = kClientControlMagic;
    client->version = kControlBlockVersion;
    client->slot_count = shape.slot_count;
    // A slot never used is free: its first generation needs no release.
    for (uint32_t s = 0; s < shape.slot_count; ++s) {
      client->releasable_seq[s].store(1, std::memory_order_relaxed);
    }
    TraceLog(static_cast<std::byte*>(init.data()) + kClientTraceOffset, kClientTraceCapacity)
        .Initialize();
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(ring->client_control_map_,
                             ring->client_control_.Map(Access::kReadOnly));
  return ring;
}

absl::Status DaemonRing::CreateReadyWords() {
  BLOCKSWAP_ASSIGN_OR_RETURN(
      SharedMemory memory,
      SharedMemory::Create(absl::StrCat("ring-", ring_id_, "-ready-words"), kReadyWordsBytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, memory.Map(Access::kReadWrite));
  absl::StatusOr<std::unique_ptr<StreamWords>> words = device_.MapStreamWords(std::move(mapping));
  // A device without stream memory operations: the client waits on the host
  // for landed_seq.
  if (absl::IsFailedPrecondition(words.status())) return absl::OkStatus();
  BLOCKSWAP_RETURN_IF_ERROR(words.status());
  ready_words_memory_ = std::move(memory);
  ready_words_ = *std::move(words);
  return absl::OkStatus();
}

TraceSnapshot DaemonRing::ReadClientTrace(uint64_t since_ns) const {
  // Read never writes through the view, so the read-only mapping suits it.
  auto* memory = const_cast<std::byte*>(static_cast<const std::byte*>(client_control_map_.data()));
  return TraceLog(memory + kClientTraceOffset, kClientTraceCapacity).Read(since_ns);
}

absl::StatusOr<RingExport> DaemonRing::Export() const {
  RingExport out;
  out.ring_id = ring_id_;
  out.device_uuid = device_.info().uuid;
  out.shape = shape_;
  out.slot_offsets = slot_offsets_;
  out.memory_bytes = memory_->size();
  out.boot_id = control().status.boot_id.load(std::memory_order_relaxed);
  BLOCKSWAP_ASSIGN_OR_RETURN(out.memory, memory_->Export());
  // A read-only open file description: the client cannot map it writable.
  BLOCKSWAP_ASSIGN_OR_RETURN(out.daemon_control, daemon_control_.fd().ReopenReadOnly());
  BLOCKSWAP_ASSIGN_OR_RETURN(out.client_control, client_control_.fd().Duplicate());
  if (ready_words_ != nullptr) {
    BLOCKSWAP_ASSIGN_OR_RETURN(out.ready_words, ready_words_memory_.fd().Duplicate());
  }
  return out;
}

namespace {

constexpr absl::string_view kUnusableHereUrl = "type.blockswap/ring-unusable-in-this-process";

absl::Status MarkUnusableHere(absl::Status error) {
  error.SetPayload(kUnusableHereUrl, absl::Cord());
  return error;
}

}  // namespace

bool UnusableInThisProcess(const absl::Status& error) {
  return error.GetPayload(kUnusableHereUrl).has_value();
}

absl::StatusOr<std::unique_ptr<RingImport>> RingImport::Import(Device& device,
                                                               RingExport exported) {
  const RingShape& shape = exported.shape;
  BLOCKSWAP_RETURN_IF_ERROR(ValidateRingShape(shape));
  if (exported.slot_offsets.size() != shape.slot_count) {
    return absl::InvalidArgumentError(absl::StrCat("ring ", exported.ring_id, " announces ",
                                                   shape.slot_count, " slots but carries ",
                                                   exported.slot_offsets.size(), " offsets"));
  }
  for (uint32_t s = 0; s < shape.slot_count; ++s) {
    uint64_t offset = exported.slot_offsets[s];
    if (offset % kSlotAlignment != 0 || offset > exported.memory_bytes ||
        exported.memory_bytes - offset < shape.slot_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("ring ", exported.ring_id, " slot ", s, " at offset ", offset, " (",
                       shape.slot_bytes, " bytes) does not fit its ", exported.memory_bytes,
                       "-byte memory or is not ", kSlotAlignment, "-byte aligned"));
    }
  }
  if (exported.request_ring_capacity != 0 &&
      exported.request_ring_capacity != kRequestRingCapacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring ", exported.ring_id, " announces a request ring of ", exported.request_ring_capacity,
        " entries; this client's control block has ", kRequestRingCapacity));
  }
  if (!exported.daemon_control.valid() || !exported.client_control.valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring ", exported.ring_id, " arrived without its control block"));
  }

  std::unique_ptr<RingImport> ring(new RingImport());
  ring->ring_id_ = exported.ring_id;
  ring->boot_id_ = exported.boot_id;
  ring->shape_ = shape;
  ring->slot_offsets_ = exported.slot_offsets;
  {
    absl::MutexLock lock(&ring->waits_mu_);
    ring->committed_.resize(shape.slot_count);
  }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> memory =
      device.ImportMemory(std::move(exported.memory), exported.memory_bytes);
  if (!memory.ok()) {
    return MarkUnusableHere(Annotate(
        memory.status(), absl::StrCat("ring ", exported.ring_id, ": importing its slots' memory")));
  }
  ring->memory_ = *std::move(memory);
  for (uint32_t s = 0; s < shape.slot_count; ++s) {
    BLOCKSWAP_ASSIGN_OR_RETURN(auto free, device.CreateEvent());
    ring->free_.push_back(std::move(free));
  }
  if (exported.ready_words.valid()) {
    // The daemon writes these words and nothing else on its stream: a client
    // that could not wait on them would read unfilled slots.
    BLOCKSWAP_ASSIGN_OR_RETURN(
        SharedMemory words, SharedMemory::Adopt(std::move(exported.ready_words), kReadyWordsBytes));
    BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, words.Map(Access::kReadWrite));
    absl::StatusOr<std::unique_ptr<StreamWords>> mapped = device.MapStreamWords(std::move(mapping));
    if (!mapped.ok()) {
      return MarkUnusableHere(Annotate(mapped.status(),
                                       absl::StrCat("ring ", exported.ring_id,
                                                    " signals its fills through stream words, "
                                                    "which this process cannot use")));
    }
    ring->ready_words_ = *std::move(mapped);
  }

  BLOCKSWAP_ASSIGN_OR_RETURN(
      SharedMemory daemon_control,
      SharedMemory::Adopt(std::move(exported.daemon_control), kControlBlockBytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(ring->daemon_control_map_, daemon_control.Map(Access::kReadOnly));
  BLOCKSWAP_ASSIGN_OR_RETURN(
      SharedMemory client_control,
      SharedMemory::Adopt(std::move(exported.client_control), kClientControlObjectBytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(ring->client_control_map_, client_control.Map(Access::kReadWrite));
  ring->trace_ =
      TraceLog(static_cast<std::byte*>(ring->client_control_map_.data()) + kClientTraceOffset,
               kClientTraceCapacity);

  if (exported.request_ring_capacity != 0 && !exported.doorbell.bell.valid()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring ", exported.ring_id, " announces a request ring but carries no doorbell"));
  }
  ring->has_request_ring_ = exported.request_ring_capacity != 0;
  if (exported.doorbell.bell.valid()) {
    BLOCKSWAP_ASSIGN_OR_RETURN(ring->doorbell_, Doorbell::Import(std::move(exported.doorbell)));
  }

  const DaemonControlBlock& control = ring->control();
  if (control.magic != kDaemonControlMagic || control.version != kControlBlockVersion ||
      control.slot_count != shape.slot_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring ", exported.ring_id, ": daemon control block has magic ", control.magic, " version ",
        control.version, " slots ", control.slot_count, "; expected version ", kControlBlockVersion,
        " with ", shape.slot_count, " slots"));
  }
  const ClientControlBlock& client = ring->client_control();
  if (client.magic != kClientControlMagic || client.slot_count != shape.slot_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring ", exported.ring_id, ": client control block is not initialised"));
  }
  return ring;
}

namespace {

// Moves every ready word of a ring to kReadyWordAbandonStep past the newest
// generation issued on its slot (filled_seq, published at issue), ahead of
// every wait either side can have queued. An absolute value, not a step, so
// that the daemon's end-of-stream writes (RingProducer::Fail) and the
// client's watchdog can both get there, in either order, any number of
// times. Once per process (`abandoned`). Each slot is first offered to
// `take_over(slot, word now, value)`: true leaves that word to the caller,
// who queues its write of `value`; `moved(slot, word before)` is told each
// word moved here.
void AbandonWords(StreamWords* words, const DaemonControlBlock& control, uint32_t slot_count,
                  std::atomic<bool>& abandoned,
                  absl::FunctionRef<bool(uint32_t slot, uint32_t now, uint32_t value)> take_over,
                  absl::FunctionRef<void(uint32_t slot, uint32_t before)> moved) {
  if (words == nullptr || abandoned.exchange(true)) return;
  for (uint32_t s = 0; s < slot_count; ++s) {
    std::atomic<uint32_t>& word = words->word(s);
    const uint32_t value = AbandonedWordValue(control, s);
    if (take_over(s, word.load(std::memory_order_acquire), value)) continue;
    moved(s, word.exchange(value, std::memory_order_acq_rel));
    FutexWakeAll(&word);  // a host-backend stream worker sleeps on it
  }
}

}  // namespace

uint32_t AbandonedWordValue(const DaemonControlBlock& control, uint32_t slot) {
  return control.filled_seq[slot].load(std::memory_order_acquire) + kReadyWordAbandonStep;
}

void DaemonRing::AbandonReadyWords() {
  AbandonWords(
      ready_words_.get(), control(), shape_.slot_count, abandoned_,
      [](uint32_t, uint32_t, uint32_t) { return false; }, [](uint32_t, uint32_t) {});
}

void RingImport::AbandonReadyWords() const {
  AbandonReadyWords([](uint32_t, uint32_t, uint32_t) { return false; });
}

void RingImport::AbandonReadyWords(
    absl::FunctionRef<bool(uint32_t slot, uint32_t generation, uint32_t value)> finish) const {
  absl::MutexLock lock(&waits_mu_);
  // The daemon's copy stream writes the word only after the copy: a word
  // short of a committed wait's generation means that copy was never seen
  // done. Its finisher copies it; else the release given here lets the work
  // behind the wait read the slot anyway.
  const auto short_of_wait = [this](uint32_t s, uint32_t word) {
    waits_mu_.AssertHeld();
    return committed_[s] && !WordReached(word, *committed_[s]);
  };
  AbandonWords(
      ready_words_.get(), control(), shape_.slot_count, abandoned_,
      [&](uint32_t s, uint32_t now, uint32_t value) {
        waits_mu_.AssertHeld();  // AbandonWords runs inside this lock
        return short_of_wait(s, now) && finish(s, *committed_[s], value);
      },
      [&](uint32_t s, uint32_t before) {
        waits_mu_.AssertHeld();
        if (short_of_wait(s, before)) unfinished_.push_back({s, *committed_[s]});
      });
}

bool RingImport::CommitStreamWait(uint32_t slot, uint32_t generation) const {
  absl::MutexLock lock(&waits_mu_);
  if (abandoned_.load(std::memory_order_acquire)) return false;
  committed_[slot] = generation;
  return true;
}

std::vector<RingImport::UnfinishedWait> RingImport::TakeUnfinishedWaits() const {
  absl::MutexLock lock(&waits_mu_);
  return std::exchange(unfinished_, {});
}

}  // namespace blockswap
