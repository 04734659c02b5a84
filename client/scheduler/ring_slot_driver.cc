#include "client/scheduler/ring_slot_driver.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "shared/base/status.h"

namespace blockswap::client {

ModelBlockMap MapByStreamingRank(const Placement& placement) {
  return [placement](uint32_t block) { return placement.StreamingRank(block); };
}

ModelBlockMap MapIdentity() {
  return [](uint32_t block) { return std::optional<uint32_t>(block); };
}

v1::PassStats PassStatsToProto(const PassStats& pass) {
  v1::PassStats proto;
  proto.set_direction(std::string(DirectionName(pass.direction)));
  proto.set_stall_seconds(absl::ToDoubleSeconds(pass.stall));
  proto.set_host_wait_seconds(absl::ToDoubleSeconds(pass.host_wait));
  proto.set_copy_seconds(absl::ToDoubleSeconds(pass.copy_time));
  proto.set_waits(pass.waits);
  proto.set_not_ready_waits(pass.not_ready_waits);
  proto.set_self_heals(pass.self_heals);
  proto.set_loads(pass.loads);
  return proto;
}

RingSlotDriver::RingSlotDriver(Ring& ring, const Model& model, Stream& stream, ModelBlockMap map,
                               Options options)
    : ring_(ring),
      model_(model),
      stream_(stream),
      map_(std::move(map)),
      options_(options),
      copy_time_reported_(ring.CopyTime().value_or(absl::ZeroDuration())),
      last_block_(ring.shape().slot_count) {}

namespace {

// Recoveries in one call before giving up: a daemon that dies again right
// after each restart is not coming back usefully.
constexpr int kMaxRecoveriesPerCall = 3;

}  // namespace

absl::Status RingSlotDriver::WithRecovery(std::optional<uint32_t> loading,
                                          const std::function<absl::Status()>& call) {
  absl::Status result = call();
  SessionRecovery* recovery = options_.recovery;
  for (int attempt = 0; attempt < kMaxRecoveriesPerCall && !result.ok() &&
                        recovery != nullptr && recovery->enabled() &&
                        SessionRecovery::IsDaemonLost(result);
       ++attempt) {
    // Recover() has used its whole timeout when it fails: that is the answer.
    BLOCKSWAP_RETURN_IF_ERROR(recovery->Recover(result));
    if (absl::Status reloaded = Reload(loading); !reloaded.ok()) {
      if (!SessionRecovery::IsDaemonLost(reloaded)) return reloaded;
      result = reloaded;  // lost again while reloading: recover once more
      continue;
    }
    // The session is back, but riding on would hide that work already
    // queued read a slot the lost daemon never finished copying: the pass
    // fails (the scheduler's next pass is whole). The first call to reach
    // the ring after the loss says it, which can be in the pass after the
    // one that read the slot.
    if (absl::Status released = ring_.TakeUnfinishedWaits(); !released.ok()) {
      return Annotate(released,
                      "this pass is void, and so is the one before if the daemon was lost after "
                      "that one's last wait (the session is back and the next pass is whole)");
    }
    result = call();
  }
  return result;
}

absl::Status RingSlotDriver::Reload(std::optional<uint32_t> loading) {
  std::vector<uint32_t> reloaded;
  for (uint32_t slot = 0; slot < last_block_.size(); ++slot) {
    if (!last_block_[slot] || slot == loading) continue;
    std::optional<uint32_t> model_block = map_(*last_block_[slot]);
    BLOCKSWAP_RETURN_IF_ERROR(ring_.Load(slot, model_, *model_block, stream_));
    reloaded.push_back(slot);
  }
  // The scheduler may read a slot it saw loaded without another wait (a
  // block kept for the turn-around): every reload is complete, as seen by
  // the stream, before the call runs again.
  for (uint32_t slot : reloaded) {
    BLOCKSWAP_RETURN_IF_ERROR(ring_.Wait(slot, stream_, options_.timeout));
    if (options_.on_reload) options_.on_reload(*last_block_[slot], slot);
  }
  return absl::OkStatus();
}

absl::Status RingSlotDriver::Load(uint32_t slot, uint32_t block) {
  if (slot >= last_block_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("slot ", slot, " out of range (the ring has ", last_block_.size(), ")"));
  }
  std::optional<uint32_t> model_block = map_(block);
  if (!model_block || *model_block >= model_.block_count()) {
    return absl::InvalidArgumentError(absl::StrCat("block ", block, " has no block in model ",
                                                   model_.id(), " (", model_.block_count(),
                                                   " blocks)"));
  }
  absl::Status loaded =
      WithRecovery(slot, [&] { return ring_.Load(slot, model_, *model_block, stream_); });
  if (!loaded.ok()) return loaded;
  last_block_[slot] = block;
  return absl::OkStatus();
}

absl::StatusOr<WaitOutcome> RingSlotDriver::Wait(uint32_t slot) {
  if (slot >= last_block_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("slot ", slot, " out of range (the ring has ", last_block_.size(), ")"));
  }
  WaitOutcome outcome;
  absl::Status waited = WithRecovery(std::nullopt, [&] {
    outcome.was_ready = ring_.Filled(slot);
    absl::StatusOr<std::optional<uint64_t>> ticket =
        ring_.WaitTimed(slot, stream_, options_.timeout);
    if (!ticket.ok()) return ticket.status();
    outcome.stall_ticket = *ticket;
    return absl::OkStatus();
  });
  if (!waited.ok()) return waited;
  if (std::optional<absl::Duration> copy_time = ring_.CopyTime()) {
    if (*copy_time > copy_time_reported_) outcome.copy_time = *copy_time - copy_time_reported_;
    copy_time_reported_ = *copy_time;
  }
  return outcome;
}

absl::StatusOr<std::vector<StreamStall>> RingSlotDriver::TakeStreamStalls(bool wait_for_all) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<MeasuredStall> measured,
                             ring_.TakeMeasuredStalls(wait_for_all));
  std::vector<StreamStall> stalls;
  stalls.reserve(measured.size());
  for (const MeasuredStall& stall : measured) stalls.push_back({stall.ticket, stall.idle.idle});
  return stalls;
}

absl::Status RingSlotDriver::Release(uint32_t slot) {
  return WithRecovery(std::nullopt, [&] { return ring_.Release(slot, stream_); });
}

absl::Status RingSlotDriver::Drain() {
  return WithRecovery(std::nullopt, [&] { return ring_.Drain(options_.timeout); });
}

}  // namespace blockswap::client
