// RingSlotDriver: the SlotDriver (client/scheduler/slot_driver.h) that carries a
// StreamScheduler's decisions out on a real ring: the daemon copies a block
// of a registered model into a slot, ordered against the caller's compute
// stream by the load protocol (docs/protocol.md).
#ifndef BLOCKSWAP_CLIENT_SCHEDULER_RING_SLOT_DRIVER_H_
#define BLOCKSWAP_CLIENT_SCHEDULER_RING_SLOT_DRIVER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.pb.h"
#include "client/core/model.h"
#include "client/core/ring.h"
#include "client/core/session_recovery.h"
#include "client/scheduler/slot_driver.h"
#include "client/scheduler/stream_scheduler.h"
#include "shared/backend/backend.h"

namespace blockswap::client {

// Maps a transformer block index (what the scheduler passes) to the block of
// the registered model that holds its bytes; nullopt for a block the model
// does not have.
using ModelBlockMap = std::function<std::optional<uint32_t>(uint32_t block)>;

// A model registered with only the streaming blocks, in rank order (what a
// trainer uploads: resident blocks never need a master). Copies `placement`.
ModelBlockMap MapByStreamingRank(const Placement& placement);
// A model registered with every transformer block.
ModelBlockMap MapIdentity();

// The scheduler's statistics as the daemon keeps them (ReportStats).
v1::PassStats PassStatsToProto(const PassStats& pass);

// Thread-compatible, like the scheduler that drives it. `ring`, `model` and
// `stream` must outlive it; `stream` is the caller's compute stream, on the
// ring's device.
class RingSlotDriver final : public SlotDriver {
 public:
  struct Options {
    // How long a Wait or Drain may block before failing DEADLINE_EXCEEDED.
    absl::Duration timeout = absl::Seconds(30);
    // When set (and enabled), a call that fails because the daemon was lost
    // brings the session back (SessionRecovery::Recover), reloads every
    // slot's last block into the new ring, waits for those reloads on the
    // stream, and runs the call again — the scheduler never notices. Must
    // outlive the driver and be over the same ring and model.
    SessionRecovery* recovery = nullptr;
    // Told each reload after a recovery (transformer block, slot): the slot's
    // address changed (Ring::slot), so an integration repoints its tensors.
    std::function<void(uint32_t block, uint32_t slot)> on_reload = nullptr;
  };

  RingSlotDriver(Ring& ring, const Model& model, Stream& stream, ModelBlockMap map)
      : RingSlotDriver(ring, model, stream, std::move(map), Options()) {}
  RingSlotDriver(Ring& ring, const Model& model, Stream& stream, ModelBlockMap map,
                 Options options);

  absl::Status Load(uint32_t slot, uint32_t block) override;
  // was_ready: the daemon had filled the slot before the wait (read from the
  // ring's filled_seq). copy_time: the copy-stream time, as the daemon
  // measured it (Ring::CopyTime), of the ring's copies it saw complete since
  // the previous wait, so each copy counts once, in the pass of the first
  // wait after its completion (a pass's last prefetches count in the next).
  absl::StatusOr<WaitOutcome> Wait(uint32_t slot) override;
  absl::Status Release(uint32_t slot) override;
  absl::Status Drain() override;
  // The compute stream's idle time at each Wait (Ring::WaitTimed).
  absl::StatusOr<std::vector<StreamStall>> TakeStreamStalls(bool wait_for_all) override;

 private:
  // Runs `call`; while it fails because the daemon was lost and recovery is
  // on, recovers (reloading every slot but `loading`, the slot the call
  // itself loads, if any) and runs it again.
  absl::Status WithRecovery(std::optional<uint32_t> loading,
                            const std::function<absl::Status()>& call);
  absl::Status Reload(std::optional<uint32_t> loading);

  Ring& ring_;
  const Model& model_;
  Stream& stream_;
  const ModelBlockMap map_;
  const Options options_;
  // Ring::CopyTime() when a wait last reported it.
  absl::Duration copy_time_reported_ = absl::ZeroDuration();
  // Per slot, the transformer block of its last successful load.
  std::vector<std::optional<uint32_t>> last_block_;
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_SCHEDULER_RING_SLOT_DRIVER_H_
