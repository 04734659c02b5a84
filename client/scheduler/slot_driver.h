// SlotDriver: what the StreamScheduler asks of a ring, and nothing more. The
// scheduler decides which block goes into which slot and when; a driver
// carries the decisions out: over a client::Ring on the caller's compute
// stream (the daemon copies), or over nothing at all (RecordingSlotDriver,
// recording_slot_driver.h, for `blockswapctl plan` and tests).
//
// Block numbers. A `block` given to the driver is the index of the
// transformer block in the integration's block list (0..N-1, the same index
// the trainer passes to the scheduler's hooks), never a model-internal
// number: a model registered with only the streaming blocks numbers them by
// rank, so the driver maps (Placement::StreamingRank does that).
//
// Slot life cycle, as the scheduler drives it (generation g of docs/protocol.md):
//   Load(s, b)    compute is done with whatever the slot held before: release
//                 the slot if it is not released yet, then request b into it.
//   Wait(s)       before compute reads the slot: make the compute wait until
//                 the slot's most recent load is complete.
//   Release(s)    compute has finished with the slot's block (the reference
//                 records its `free` event here). The bytes stay: nothing can
//                 overwrite them before the next Load(s, ...).
//   Drain()       every load issued is complete (no request left in flight);
//                 re-preparing calls it after an aborted pass.
// Wait(s) may follow Release(s) with no Load in between: the scheduler keeps
// using a block that is still in a released slot (the forward/backward
// turn-around, a no-op rebind at re-prepare, the inference wrap-around). The
// slot then still holds that load's bytes, so the driver waits for that same
// load again (over a Ring: the stream waits on the slot's last `ready` record,
// which the daemon cannot re-record before the next request).
//
// Errors are absl::Status and reach the scheduler's caller unchanged. After a
// failed call the scheduler no longer trusts the slot's content (the request
// may or may not have gone out) and drains before reusing the ring.
#ifndef BLOCKSWAP_CLIENT_SCHEDULER_SLOT_DRIVER_H_
#define BLOCKSWAP_CLIENT_SCHEDULER_SLOT_DRIVER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace blockswap::client {

// What a Wait found, for the per-pass statistics.
struct WaitOutcome {
  // False when the load had not completed when the wait was issued (the
  // compute had to wait for the copy: a "not-ready" wait).
  bool was_ready = true;
  // Copy time of the driver's loads that it learnt of at this wait, each
  // load's copy reported once (not necessarily the waited load's: a ring
  // driver reports the copies its daemon saw complete since the previous
  // wait); unset when none.
  std::optional<absl::Duration> copy_time = std::nullopt;
  // Set when the driver measures how long the compute stream sits idle at
  // this wait: TakeStreamStalls reports it later under this ticket (the
  // stream reaches the wait after Wait returned: its caller runs ahead).
  std::optional<uint64_t> stall_ticket = std::nullopt;
};

// The compute stream's idle time at the wait of `ticket` (WaitOutcome).
struct StreamStall {
  uint64_t ticket = 0;
  absl::Duration idle = absl::ZeroDuration();
};

// Called by one thread at a time (the scheduler's caller); implementations
// need not be thread-safe.
class SlotDriver {
 public:
  virtual ~SlotDriver() = default;

  virtual absl::Status Load(uint32_t slot, uint32_t block) = 0;
  virtual absl::StatusOr<WaitOutcome> Wait(uint32_t slot) = 0;
  virtual absl::Status Release(uint32_t slot) = 0;
  virtual absl::Status Drain() = 0;
  // The stalls of the waits the compute stream has passed since the last
  // call, never blocking; with `wait_for_all`, blocks until it has passed
  // every wait issued so far, and a ticket not reported then never will be.
  // A driver that measures nothing reports nothing.
  virtual absl::StatusOr<std::vector<StreamStall>> TakeStreamStalls(bool wait_for_all) {
    (void)wait_for_all;
    return std::vector<StreamStall>{};
  }
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_SCHEDULER_SLOT_DRIVER_H_
