#include "client/core/trainer_copy_ring.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/core/say_once.h"
#include "shared/base/monotonic_clock.h"
#include "shared/base/status.h"
#include "shared/protocol/load_protocol.h"

namespace blockswap::client {
namespace {

constexpr absl::Duration kDestroyDrainTimeout = absl::Seconds(5);

// Why this process stages masters the daemon pins, said once per process.
void SayStagingOnce(const absl::Status& why) {
  static std::atomic<bool> said{false};
  SayOnce(said, absl::StrCat(why.message(), "; this process copies such masters through pinned "
                                            "staging buffers of its own"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainerCopyRing>> TrainerCopyRing::Create(Device& device,
                                                                          uint32_t slot_count,
                                                                          uint64_t slot_bytes) {
  const RingShape shape{slot_count, slot_bytes};
  BLOCKSWAP_RETURN_IF_ERROR(ValidateRingShape(shape));
  absl::StatusOr<std::unique_ptr<DeviceMemory>> memory =
      device.AllocatePrivate(SlotStride(shape) * slot_count);
  if (!memory.ok()) {
    return Annotate(memory.status(), absl::StrCat("allocating a ring of ", slot_count, " slots of ",
                                                  slot_bytes, " bytes on ", device.info().uuid));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<Stream> copy_stream, device.CreateStream());
  std::vector<Slot> slots(slot_count);
  for (Slot& slot : slots) {
    BLOCKSWAP_ASSIGN_OR_RETURN(slot.filled, device.CreateEvent());
    BLOCKSWAP_ASSIGN_OR_RETURN(slot.free, device.CreateEvent());
  }
  return std::unique_ptr<TrainerCopyRing>(new TrainerCopyRing(
      device, shape, *std::move(memory), std::move(copy_stream), std::move(slots)));
}

TrainerCopyRing::TrainerCopyRing(Device& device, RingShape shape,
                                 std::unique_ptr<DeviceMemory> memory,
                                 std::unique_ptr<Stream> copy_stream, std::vector<Slot> slots)
    : Ring(device, shape),
      memory_(std::move(memory)),
      copy_stream_(std::move(copy_stream)),
      slots_(std::move(slots)) {}

TrainerCopyRing::~TrainerCopyRing() {
  absl::StatusOr<std::unique_ptr<Stream>> stream =
      device().WrapStream(nullptr, kDestroyDrainTimeout);
  if (stream.ok()) {
    (void)Close(**stream, kDestroyDrainTimeout);
    return;
  }
  // No stream to order against: the copy stream's work is still waited for.
  absl::MutexLock lock(&mu_);
  if (copy_stream_ != nullptr) (void)copy_stream_->Synchronize();
}

absl::Status TrainerCopyRing::Close(Stream& stream, absl::Duration timeout) {
  (void)timeout;  // every wait here is on this process's own work
  absl::MutexLock lock(&mu_);
  if (memory_ == nullptr) return absl::OkStatus();
  absl::Status first;
  const auto keep_first = [&first](const absl::Status& status) {
    if (first.ok() && !status.ok()) first = status;
  };
  // The compute's reads of the slots and the copies into them are done
  // before the memory, the buffers and the masters they touch go.
  keep_first(stream.Synchronize());
  keep_first(copy_stream_->Synchronize());
  keep_first(meter_.Collect(/*wait_for_all=*/true));
  stager_.reset();
  reading_.clear();
  newest_copy_ = nullptr;
  memory_.reset();
  return first;
}

void* TrainerCopyRing::slot(uint32_t s) const {
  absl::MutexLock lock(&mu_);
  if (memory_ == nullptr || s >= shape().slot_count) return nullptr;
  return memory_->data() + s * SlotStride(shape());
}

absl::Status TrainerCopyRing::CheckUsable(uint32_t slot) const {
  if (memory_ == nullptr) return absl::FailedPreconditionError("the ring is closed");
  if (slot >= shape().slot_count) {
    return absl::OutOfRangeError(
        absl::StrCat("slot ", slot, " of a ring of ", shape().slot_count, " slots"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StagedCopier*> TrainerCopyRing::Stager() {
  if (stager_ == nullptr) {
    absl::StatusOr<std::unique_ptr<StagedCopier>> started =
        StagedCopier::Start(device(), StagingOptions());
    if (!started.ok()) {
      return Annotate(started.status(), "copying a staged master needs this process's staging "
                                        "buffers");
    }
    stager_ = *std::move(started);
  }
  return stager_.get();
}

absl::Status TrainerCopyRing::QueueCopy(MasterView& view, std::byte* destination, size_t bytes) {
  absl::Status pinned = view.PinOnce(device());
  if (pinned.ok()) return copy_stream_->CopyHostToDevice(destination, view.data(), bytes);
  if (!view.staged()) SayStagingOnce(pinned);
  BLOCKSWAP_ASSIGN_OR_RETURN(StagedCopier * stager, Stager());
  return stager->Copy(*copy_stream_, destination, view.data(), bytes);
}

absl::Status TrainerCopyRing::Load(uint32_t slot, const Model& model, uint32_t block,
                                   Stream& stream) {
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckUsable(slot));
  std::shared_ptr<MasterView> view = model.master_view(block);
  if (view == nullptr) {
    return absl::OutOfRangeError(absl::StrCat("block ", block, " of model ", model.id(), " (",
                                              model.block_count(), " blocks)"));
  }
  const uint64_t bytes = model.layout().blocks[block].bytes;
  if (bytes > shape().slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("block ", block, " of model ", model.id(),
                                                   " has ", bytes, " bytes, more than a slot's ",
                                                   shape().slot_bytes));
  }
  Slot& target = slots_[slot];
  // The compute is done with what the slot held (the scheduler's contract):
  // its free is recorded now if the caller did not release it.
  if (!target.released) BLOCKSWAP_RETURN_IF_ERROR(stream.Record(*target.free));
  target.released = true;
  // Every copy queued so far is done: the masters they read may go.
  if (newest_copy_ != nullptr) {
    absl::StatusOr<bool> done = newest_copy_->Query();
    if (done.ok() && *done) reading_.clear();
  }
  if (!ProtocolStepSkipped(ProtocolStep::kTrainerCopyAwaitFree)) {
    BLOCKSWAP_RETURN_IF_ERROR(copy_stream_->Wait(*target.free));
  }
  BLOCKSWAP_RETURN_IF_ERROR(copy_stream_->LaunchHostFunc(
      [clock = clock_] { clock->began_ns.store(MonotonicNanos(), std::memory_order_relaxed); }));
  absl::Status queued = QueueCopy(*view, memory_->data() + slot * SlotStride(shape()), bytes);
  reading_.push_back(std::move(view));  // queued or not, a part of it may run
  BLOCKSWAP_RETURN_IF_ERROR(copy_stream_->LaunchHostFunc([clock = clock_] {
    clock->total_ns.fetch_add(
        MonotonicNanos() - clock->began_ns.load(std::memory_order_relaxed),
        std::memory_order_relaxed);
  }));
  BLOCKSWAP_RETURN_IF_ERROR(copy_stream_->Record(*target.filled));
  newest_copy_ = target.filled.get();
  ++target.loads;
  target.released = false;
  return Annotate(queued, absl::StrCat("loading block ", block, " into slot ", slot));
}

absl::Status TrainerCopyRing::Wait(uint32_t slot, Stream& stream, absl::Duration timeout) {
  (void)timeout;  // the copy is this process's own: it completes
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckUsable(slot));
  if (slots_[slot].loads == 0) {
    return absl::FailedPreconditionError(absl::StrCat("slot ", slot, " was never loaded"));
  }
  if (ProtocolStepSkipped(ProtocolStep::kTrainerStreamWaitFilled)) return absl::OkStatus();
  return stream.Wait(*slots_[slot].filled);
}

absl::StatusOr<std::optional<uint64_t>> TrainerCopyRing::WaitTimed(uint32_t slot, Stream& stream,
                                                                   absl::Duration timeout) {
  (void)timeout;
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckUsable(slot));
  const Slot& target = slots_[slot];
  if (target.loads == 0) {
    return absl::FailedPreconditionError(absl::StrCat("slot ", slot, " was never loaded"));
  }
  if (ProtocolStepSkipped(ProtocolStep::kTrainerStreamWaitFilled)) return std::nullopt;
  BLOCKSWAP_ASSIGN_OR_RETURN(WaitTimer * timer, meter_.Acquire());
  if (absl::Status waited = stream.WaitTimed(*target.filled, *timer); !waited.ok()) {
    meter_.Unused();
    return waited;
  }
  const uint64_t ticket = meter_.Issued(slot, target.loads);
  BLOCKSWAP_RETURN_IF_ERROR(meter_.Collect(/*wait_for_all=*/false));
  return ticket;
}

absl::StatusOr<std::vector<MeasuredStall>> TrainerCopyRing::TakeMeasuredStalls(bool wait_for_all) {
  absl::MutexLock lock(&mu_);
  if (memory_ != nullptr) BLOCKSWAP_RETURN_IF_ERROR(meter_.Collect(wait_for_all));
  return meter_.TakeCollected();
}

absl::Status TrainerCopyRing::Release(uint32_t slot, Stream& stream) {
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckUsable(slot));
  Slot& target = slots_[slot];
  if (target.loads == 0) {
    return absl::FailedPreconditionError(absl::StrCat("slot ", slot, " was never loaded"));
  }
  BLOCKSWAP_RETURN_IF_ERROR(stream.Record(*target.free));
  target.released = true;
  return absl::OkStatus();
}

absl::Status TrainerCopyRing::Drain(absl::Duration timeout) {
  (void)timeout;
  absl::MutexLock lock(&mu_);
  if (memory_ == nullptr) return absl::FailedPreconditionError("the ring is closed");
  BLOCKSWAP_RETURN_IF_ERROR(copy_stream_->Synchronize());
  reading_.clear();
  return absl::OkStatus();
}

bool TrainerCopyRing::Filled(uint32_t slot) {
  absl::MutexLock lock(&mu_);
  if (!CheckUsable(slot).ok() || slots_[slot].loads == 0) return false;
  absl::StatusOr<bool> done = slots_[slot].filled->Query();
  return done.ok() && *done;
}

std::optional<absl::Duration> TrainerCopyRing::CopyTime() {
  absl::MutexLock lock(&mu_);
  if (memory_ == nullptr) return std::nullopt;
  return absl::Nanoseconds(clock_->total_ns.load(std::memory_order_relaxed));
}

}  // namespace blockswap::client
