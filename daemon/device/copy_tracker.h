// CopyTracker: which copies on a device's copy stream have completed.
//
// The device worker records one completion event behind each batch of copies
// it issues, and queries the oldest batch's event from its own thread.
// Nothing but copies and event records goes on the copy stream: a host
// function there would hold every copy queued behind it for a callback's
// round trip. The events are the daemon's own and never exported, so no
// client can make a copy look complete.
//
// What a copy keeps alive (its master's mapping) is released here and only
// here, once the copy reading it has completed: an eviction can then never
// unmap or unpin a master under a queued copy.
//
// Thread-compatible: the device worker uses it under its rings mutex.
#ifndef BLOCKSWAP_DAEMON_DEVICE_COPY_TRACKER_H_
#define BLOCKSWAP_DAEMON_DEVICE_COPY_TRACKER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shared/backend/backend.h"

namespace blockswap::daemon {

class CopyTracker {
 public:
  // One copy issued on the copy stream.
  struct Copy {
    uint64_t ring_id = 0;
    uint32_t slot = 0;
    uint32_t generation = 0;
    uint32_t block = 0;
    uint64_t bytes = 0;
    std::shared_ptr<const void> keep_alive;  // what the copy reads stays mapped
    uint64_t issued_ns = 0;                  // CLOCK_MONOTONIC when it was issued
  };

  // `device` and `copy_stream` (one of its streams) must outlive the tracker.
  CopyTracker(Device& device, Stream& copy_stream) : device_(device), copy_stream_(copy_stream) {}

  // Records a completion event on the copy stream behind `copies`, which
  // were just issued on it. On error nothing is tracked and the copies'
  // keep-alives are kept until the tracker is destroyed (after the copy
  // stream was synchronised).
  absl::Status Track(std::vector<Copy> copies);
  // Records a completion event behind writes to `ring_id`'s ready words that
  // were just queued on the copy stream (RingProducer::TakeQueuedWordWrites),
  // so that InFlight(ring_id) holds until they have run. Not a copy: no
  // completion is reported for it and it adds nothing to busy().
  absl::Status TrackWordWrites(uint64_t ring_id);

  // Retires every batch whose event has completed, oldest first (the copy
  // stream runs in order), calling `completed` for each of its copies with
  // the time it was seen complete and its share of the copy stream's time
  // (the batch's busy time, counted as busy() counts it, shared among its
  // copies by bytes); then drops the copies' keep-alives.
  // Returns when to look again: about when the oldest batch left should
  // complete at the rate measured so far (InfiniteFuture: nothing left).
  absl::StatusOr<absl::Time> Retire(
      absl::FunctionRef<void(const Copy& copy, uint64_t completed_ns, absl::Duration stream_time)>
          completed);

  // Whether a copy into one of `ring_id`'s slots, or a write to its ready
  // words, may still be queued or running.
  bool InFlight(uint64_t ring_id) const;
  bool empty() const { return batches_.empty(); }
  // How long the copy stream was busy, overlapping batches counted once, as
  // far as the completions seen so far tell.
  absl::Duration busy() const { return busy_; }

 private:
  struct Batch {
    std::unique_ptr<Event> done;
    std::vector<Copy> copies;
    std::vector<uint64_t> word_rings;  // rings whose ready words were written
    absl::Time issued;
    uint64_t bytes = 0;
  };
  absl::StatusOr<std::unique_ptr<Event>> TakeEvent();
  absl::Time NextCheck(absl::Time now);

  Device& device_;
  Stream& copy_stream_;
  std::deque<Batch> batches_;                  // oldest first
  std::vector<std::unique_ptr<Event>> spare_;  // events of retired batches, reused
  absl::Time last_completed_ = absl::InfinitePast();
  absl::Duration busy_;
  uint64_t bytes_completed_ = 0;
  // Grows while the oldest batch is late, so that a stuck copy stream costs
  // the worker few wake-ups; reset by every completion.
  absl::Duration late_backoff_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_COPY_TRACKER_H_
