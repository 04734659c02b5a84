#include "client/ring_slot_driver.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

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
      timing_(ring.shape().slot_count) {}

absl::Status RingSlotDriver::Load(uint32_t slot, uint32_t block) {
  if (slot >= timing_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("slot ", slot, " out of range (the ring has ", timing_.size(), ")"));
  }
  std::optional<uint32_t> model_block = map_(block);
  if (!model_block || *model_block >= model_.block_count()) {
    return absl::InvalidArgumentError(absl::StrCat("block ", block, " has no block in model ",
                                                   model_.id(), " (", model_.block_count(),
                                                   " blocks)"));
  }
  const absl::Time requested = absl::Now();
  absl::Status loaded = ring_.Load(slot, model_, *model_block, stream_);
  if (!loaded.ok()) return loaded;
  timing_[slot] = SlotTiming{.requested = requested, .reported = false};
  return absl::OkStatus();
}

absl::StatusOr<WaitOutcome> RingSlotDriver::Wait(uint32_t slot) {
  if (slot >= timing_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("slot ", slot, " out of range (the ring has ", timing_.size(), ")"));
  }
  WaitOutcome outcome;
  outcome.was_ready = ring_.Filled(slot);
  absl::Status waited = ring_.Wait(slot, stream_, options_.timeout);
  if (!waited.ok()) return waited;
  SlotTiming& timing = timing_[slot];
  if (!timing.reported) {
    timing.reported = true;
    if (!outcome.was_ready) outcome.copy_time = absl::Now() - timing.requested;
  }
  return outcome;
}

absl::Status RingSlotDriver::Release(uint32_t slot) { return ring_.Release(slot, stream_); }

absl::Status RingSlotDriver::Drain() { return ring_.Drain(options_.timeout); }

}  // namespace blockswap::client
