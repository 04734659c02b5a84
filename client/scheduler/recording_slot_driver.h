// RecordingSlotDriver: a SlotDriver (slot_driver.h) with no device behind
// it, for checking what a StreamScheduler asks of a ring.
#ifndef BLOCKSWAP_CLIENT_SCHEDULER_RECORDING_SLOT_DRIVER_H_
#define BLOCKSWAP_CLIENT_SCHEDULER_RECORDING_SLOT_DRIVER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/scheduler/slot_driver.h"

namespace blockswap::client {

// A SlotDriver with no device behind it: it records every call and keeps a
// model of the ring good enough to check a schedule — which block's bytes
// each slot holds, and which loads are still in flight. `blockswapctl plan`
// runs the scheduler on it; so do the tests, with its fault injection.
// Its model of time: a load completes when it is waited for, released over or
// drained; a wait that directly follows its own load counts as not ready.
class RecordingSlotDriver final : public SlotDriver {
 public:
  enum class CallKind : uint8_t { kLoad, kWait, kRelease, kDrain };
  struct Call {
    CallKind kind;
    uint32_t slot = 0;   // kDrain: 0
    uint32_t block = 0;  // kLoad only
    bool operator==(const Call&) const = default;
  };
  struct Options {
    // Reported once per load, at its first successful wait.
    absl::Duration copy_time = absl::ZeroDuration();
    // Slept in every successful wait, to give the host-wait statistics
    // something to measure.
    absl::Duration wait_delay = absl::ZeroDuration();
    // When set, the fake measures the compute stream's stall: every
    // successful wait gets a stall ticket, and the stream sat idle this long
    // at each not-ready wait (a copy still running), 0 at the others.
    std::optional<absl::Duration> not_ready_stream_stall = std::nullopt;
    // The stream runs behind its caller: the stalls are measured only once
    // TakeStreamStalls waits for all, never when it polls.
    bool stream_lags = false;
  };

  explicit RecordingSlotDriver(uint32_t slot_count) : RecordingSlotDriver(slot_count, Options()) {}
  RecordingSlotDriver(uint32_t slot_count, Options options);

  absl::Status Load(uint32_t slot, uint32_t block) override;
  absl::StatusOr<WaitOutcome> Wait(uint32_t slot) override;
  absl::Status Release(uint32_t slot) override;
  absl::Status Drain() override;
  absl::StatusOr<std::vector<StreamStall>> TakeStreamStalls(bool wait_for_all) override;

  // Fault injection: the call of `kind` after `skip` more successful calls of
  // that kind returns `error`. A failed load has still sent its request and
  // left the slot's bytes undefined — the worst case a client can see.
  void FailCall(CallKind kind, int skip, absl::Status error);

  const std::vector<Call>& calls() const { return calls_; }
  void ClearCalls() { calls_.clear(); }
  // The block whose bytes the slot holds once its loads complete; nullopt
  // when empty or undefined.
  std::optional<uint32_t> content(uint32_t slot) const;
  // Loads issued and not yet complete.
  int loads_in_flight() const;
  // Loads requested into a slot whose previous load was still in flight
  // (legal: the driver's release awaits it, but a schedule that waits for
  // what it loads and drains on re-prepare never does it).
  int loads_over_unawaited() const { return loads_over_unawaited_; }

 private:
  struct FakeSlot {
    bool ever_loaded = false;
    std::optional<uint32_t> block;  // nullopt: empty or undefined bytes
    bool in_flight = false;         // loaded, not yet waited for, released over or drained
    bool copy_reported = false;
  };
  absl::Status CheckSlot(uint32_t slot) const;
  // The injected error for the current call of `kind`, if any.
  std::optional<absl::Status> Injected(CallKind kind);

  const Options options_;
  std::vector<FakeSlot> slots_;
  std::vector<Call> calls_;
  struct Fault {
    CallKind kind;
    int skip;
    absl::Status error;
  };
  std::vector<Fault> faults_;
  int loads_over_unawaited_ = 0;
  uint64_t last_ticket_ = 0;
  std::vector<StreamStall> unreported_stalls_;
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_SCHEDULER_RECORDING_SLOT_DRIVER_H_
