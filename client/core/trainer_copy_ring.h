// TrainerCopyRing: a ring this process fills itself (copy path "trainer"),
// the reference offloader's data path over the node's one copy of the
// weights. Its slots are device memory of this process; a load is a copy on
// the ring's own copy stream from this process's read-only view of the
// daemon's master (Model::master_view), ordered against the caller's
// compute stream by events of this process:
//
//   compute stream                 copy stream
//   Release(s): record free[s] ──▶ Load(s, b): wait free[s]
//                                    copy master(b) → slot s
//   Wait(s):    wait filled[s] ◀──   record filled[s]
//
// A master the daemon pins is pinned here too, read-only, once per process
// (MasterView::PinOnce: the same pages, no more locked memory), and its copy
// is one DMA; one the daemon keeps pageable, or one this process may not
// pin (a locked-memory limit, a device without read-only registration), is
// staged through pinned buffers of this process (shared/copy/staged_copier.h),
// said once per process. Nothing here needs the daemon: once the model is
// open, a daemon that dies or restarts interrupts no pass.
#ifndef BLOCKSWAP_CLIENT_CORE_TRAINER_COPY_RING_H_
#define BLOCKSWAP_CLIENT_CORE_TRAINER_COPY_RING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/core/master_view.h"
#include "client/core/ring.h"
#include "client/core/stall_meter.h"
#include "shared/backend/backend.h"
#include "shared/copy/staged_copier.h"

namespace blockswap::client {

// Thread-safe.
class TrainerCopyRing final : public Ring {
 public:
  // Allocates the slots on `device` (which must outlive the ring) and the
  // ring's copy stream.
  static absl::StatusOr<std::unique_ptr<TrainerCopyRing>> Create(Device& device,
                                                                 uint32_t slot_count,
                                                                 uint64_t slot_bytes);
  // Close(default stream) unless the ring was closed.
  ~TrainerCopyRing() override;

  // Synchronises `stream` and the copy stream, then frees the slots.
  absl::Status Close(Stream& stream, absl::Duration timeout) override;
  using Ring::Close;
  // Nothing to bring back: the ring is this process's own, and its slots
  // keep what they hold.
  absl::Status Recreate() override { return absl::OkStatus(); }

  CopyPath copy_path() const override { return CopyPath::kTrainer; }
  uint64_t id() const override { return 0; }
  void* slot(uint32_t s) const override;

  using Ring::Load;
  using Ring::Release;
  using Ring::Wait;
  absl::Status Load(uint32_t slot, const Model& model, uint32_t block, Stream& stream) override;
  absl::Status Wait(uint32_t slot, Stream& stream, absl::Duration timeout) override;
  absl::Status Release(uint32_t slot, Stream& stream) override;
  absl::StatusOr<std::optional<uint64_t>> WaitTimed(uint32_t slot, Stream& stream,
                                                    absl::Duration timeout) override;
  absl::StatusOr<std::vector<MeasuredStall>> TakeMeasuredStalls(bool wait_for_all) override;
  absl::Status Drain(absl::Duration timeout) override;
  bool Filled(uint32_t slot) override;
  // From the copy stream's clock: each copy from when the stream began it
  // (its slot free, the copies before it done) to its end.
  std::optional<absl::Duration> CopyTime() override;
  absl::Status Health() override { return device().health(); }
  // OK: no wait here depends on another process.
  absl::Status TakeUnfinishedWaits() override { return absl::OkStatus(); }

 private:
  struct Slot {
    std::unique_ptr<Event> filled;  // recorded on the copy stream after each copy into it
    std::unique_ptr<Event> free;    // recorded on the compute stream at each release
    uint32_t loads = 0;             // copies issued into it
    bool released = true;           // `free` follows the compute's last use of the slot
  };
  // Copy-stream time, written by host functions on the copy stream.
  struct CopyClock {
    std::atomic<uint64_t> began_ns{0};
    std::atomic<uint64_t> total_ns{0};
  };

  TrainerCopyRing(Device& device, RingShape shape, std::unique_ptr<DeviceMemory> memory,
                  std::unique_ptr<Stream> copy_stream, std::vector<Slot> slots);
  absl::Status CheckUsable(uint32_t slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the copy of `bytes` of `view` into `destination` on the copy
  // stream: one DMA from the pinned master, else staged.
  absl::Status QueueCopy(MasterView& view, std::byte* destination, size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<StagedCopier*> Stager() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::unique_ptr<DeviceMemory> memory_ ABSL_GUARDED_BY(mu_);  // null once closed
  std::unique_ptr<Stream> copy_stream_ ABSL_GUARDED_BY(mu_);
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  // Made at the first staged copy; its buffers are read by queued copies,
  // so it goes after the copy stream was synchronised.
  std::unique_ptr<StagedCopier> stager_ ABSL_GUARDED_BY(mu_);
  // The masters the copies queued since the copy stream was last seen idle
  // read: kept mapped (and pinned) until then, whatever the caller closes.
  std::vector<std::shared_ptr<MasterView>> reading_ ABSL_GUARDED_BY(mu_);
  Event* newest_copy_ ABSL_GUARDED_BY(mu_) = nullptr;  // `filled` of the last copy queued
  const std::shared_ptr<CopyClock> clock_ = std::make_shared<CopyClock>();
  StallMeter meter_ ABSL_GUARDED_BY(mu_){device(), [](const MeasuredStall&) {}};
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_TRAINER_COPY_RING_H_
