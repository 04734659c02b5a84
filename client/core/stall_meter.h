// StallMeter: the compute stream's idle time at each timed wait of one ring
// (the reference offloader's "GPU stall"), measured by the stream itself
// through a WaitTimer (shared/backend/backend.h) and collected without
// blocking the wait: a stream passes its wait only later (its caller runs
// ahead), so each wait gets a timer from a small reusable pool, and
// Harvest() picks up the timers whose stream has passed the wait.
// Thread-compatible: client::Ring calls it under its mutex.
#ifndef BLOCKSWAP_CLIENT_CORE_STALL_METER_H_
#define BLOCKSWAP_CLIENT_CORE_STALL_METER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "shared/backend/backend.h"

namespace blockswap::client {

// One timed wait's result. `ticket` numbers the ring's timed waits from 1 in
// issue order (Ring::WaitTimed returns it).
struct MeasuredStall {
  uint64_t ticket = 0;
  uint32_t slot = 0;
  uint32_t generation = 0;
  WaitIdle idle;
};

class StallMeter {
 public:
  // `device` (the ring's) must outlive the meter. `on_measured` is told
  // each result as it is collected (the ring traces it), on the caller's
  // thread, inside the meter's calls.
  StallMeter(Device& device, std::function<void(const MeasuredStall&)> on_measured)
      : device_(device), on_measured_(std::move(on_measured)) {}

  // A timer for the next wait: an idle one, else a new one, else (the pool
  // is full of waits the stream has not passed) the oldest, once it passed.
  absl::StatusOr<WaitTimer*> Acquire();
  // The timer of the last Acquire now times the wait for (slot,
  // generation); returns that wait's ticket.
  uint64_t Issued(uint32_t slot, uint32_t generation);
  // The ticket the next timed wait will get.
  uint64_t next_ticket() const { return last_ticket_ + 1; }
  // The timer of the last Acquire timed nothing (the wait failed first).
  void Unused();

  // Collects the results of the waits the stream has passed, in ticket
  // order; with `wait_for_all`, blocks until every wait issued so far is
  // measured. A timer that failed is dropped (its wait is never reported),
  // so after a collection that waited for all, every wait issued before it
  // was either reported or never will be.
  absl::Status Collect(bool wait_for_all);
  // The results collected since the last call, oldest first (at most
  // kMaxUntaken: older ones are dropped when nobody takes them).
  std::vector<MeasuredStall> TakeCollected() { return std::exchange(collected_, {}); }

 private:
  // Pending waits at most: the caller runs ahead of its stream by a few
  // blocks at most (the protocol's releases wait for fills).
  static constexpr size_t kMaxTimers = 64;
  static constexpr size_t kMaxUntaken = 4096;
  struct Pending {
    std::unique_ptr<WaitTimer> timer;
    uint64_t ticket = 0;
    uint32_t slot = 0;
    uint32_t generation = 0;
  };

  // Retires the oldest pending timer when its stream has passed the wait
  // (`wait`: blocks until it has) and reports its result; false when not
  // passed yet.
  absl::StatusOr<bool> RetireOldest(bool wait);

  Device& device_;
  const std::function<void(const MeasuredStall&)> on_measured_;
  std::vector<std::unique_ptr<WaitTimer>> idle_;
  std::unique_ptr<WaitTimer> acquired_;  // between Acquire and Issued/Unused
  std::deque<Pending> pending_;          // in ticket order
  uint64_t last_ticket_ = 0;
  std::vector<MeasuredStall> collected_;
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_STALL_METER_H_
