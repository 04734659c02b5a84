// The host backend's events and timing (host_backend.cc): an event is a
// pair of counters with CUDA's record-and-wait semantics, and a wait timer
// measures how long a stream's worker sat at a wait. Private to the host
// backend.
#ifndef BLOCKSWAP_SHARED_BACKEND_HOST_TIMING_H_
#define BLOCKSWAP_SHARED_BACKEND_HOST_TIMING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shared/backend/backend.h"
#include "shared/base/monotonic_clock.h"
#include "shared/base/status.h"
#include "shared/os/futex.h"

namespace blockswap::host_internal {

// An event's state. record_count is bumped when a record is ISSUED,
// completed_count set when the recording stream's worker REACHES it, so a
// wait issued now snapshots "the most recent record" exactly as CUDA does.
// Events never leave their process (backend.h), so the state is plain memory;
// the counters are still futex words (shared: a stream worker sleeps on them).
struct HostEventState {
  std::atomic<uint32_t> record_count{0};
  std::atomic<uint32_t> completed_count{0};
};

class HostEvent final : public Event {
 public:
  absl::StatusOr<bool> Query() override { return Reached(state(), WaitTarget()); }

  // Record, as issued: the new record's sequence number.
  uint32_t IssueRecord() {
    return state()->record_count.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  // Record, as reached by the recording stream: complete up to `seq`.
  static void CompleteRecord(HostEventState* state, uint32_t seq) {
    uint32_t done = state->completed_count.load(std::memory_order_relaxed);
    if (!SeqAtLeast(done, seq)) state->completed_count.store(seq, std::memory_order_release);
    FutexWakeAll(&state->completed_count);
  }
  // A wait, as issued: the record it binds to (the most recent one now).
  uint32_t WaitTarget() const { return state()->record_count.load(std::memory_order_acquire); }
  static bool Reached(const HostEventState* state, uint32_t target) {
    return SeqAtLeast(state->completed_count.load(std::memory_order_acquire), target);
  }

  // Pending stream work keeps the state alive past the event's destruction,
  // as CUDA keeps an event's resources until its work is done.
  const std::shared_ptr<HostEventState>& shared_state() const { return state_; }
  HostEventState* state() const { return state_.get(); }

 private:
  std::shared_ptr<HostEventState> state_ = std::make_shared<HostEventState>();
};

inline absl::StatusOr<HostEvent*> AsHostEvent(Event& event) {
  auto* host_event = dynamic_cast<HostEvent*>(&event);
  if (host_event == nullptr) return absl::InvalidArgumentError("not a host-backend event");
  return host_event;
}

// A timer's result, shared with the stream worker that measures it (the
// timer may be destroyed while its wait is still queued). `issued` counts
// timed waits issued, `measured` the ones whose result is in `last`.
struct HostWaitTimerState {
  absl::Mutex mu;
  uint64_t issued ABSL_GUARDED_BY(mu) = 0;
  uint64_t measured ABSL_GUARDED_BY(mu) = 0;
  WaitIdle last ABSL_GUARDED_BY(mu);

  uint64_t Issue() {
    absl::MutexLock lock(&mu);
    return ++issued;
  }
  // A wait that was skipped (a failed stream) still completes its
  // measurement, as zero idle, so that Await never blocks for ever.
  void Complete(uint64_t wait, WaitIdle idle) {
    absl::MutexLock lock(&mu);
    if (wait < measured) return;
    measured = wait;
    last = idle;
  }
};

class HostWaitTimer final : public WaitTimer {
 public:
  absl::StatusOr<std::optional<WaitIdle>> Poll() override {
    absl::MutexLock lock(&state_->mu);
    return Result();
  }
  absl::StatusOr<std::optional<WaitIdle>> Await() override {
    absl::MutexLock lock(&state_->mu);
    auto passed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
      return state_->measured == state_->issued;
    };
    state_->mu.Await(absl::Condition(&passed));
    return Result();
  }
  const std::shared_ptr<HostWaitTimerState>& state() const { return state_; }

 private:
  std::optional<WaitIdle> Result() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    if (state_->issued == 0 || state_->measured != state_->issued) return std::nullopt;
    return state_->last;
  }
  const std::shared_ptr<HostWaitTimerState> state_ = std::make_shared<HostWaitTimerState>();
};

inline absl::StatusOr<HostWaitTimer*> AsHostWaitTimer(WaitTimer& timer) {
  auto* host_timer = dynamic_cast<HostWaitTimer*>(&timer);
  if (host_timer == nullptr) return absl::InvalidArgumentError("not a host-backend wait timer");
  return host_timer;
}

}  // namespace blockswap::host_internal

#endif  // BLOCKSWAP_SHARED_BACKEND_HOST_TIMING_H_
