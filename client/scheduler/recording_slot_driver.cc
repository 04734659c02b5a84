#include "client/scheduler/recording_slot_driver.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "shared/base/status.h"

namespace blockswap::client {

RecordingSlotDriver::RecordingSlotDriver(uint32_t slot_count, Options options)
    : options_(options), slots_(slot_count) {}

absl::Status RecordingSlotDriver::CheckSlot(uint32_t slot) const {
  if (slot >= slots_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("slot ", slot, " out of range (ring has ", slots_.size(), " slots)"));
  }
  return absl::OkStatus();
}

std::optional<absl::Status> RecordingSlotDriver::Injected(CallKind kind) {
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (it->kind != kind) continue;
    if (it->skip-- > 0) continue;
    absl::Status error = std::move(it->error);
    faults_.erase(it);
    return error;
  }
  return std::nullopt;
}

void RecordingSlotDriver::FailCall(CallKind kind, int skip, absl::Status error) {
  faults_.push_back({kind, skip, std::move(error)});
}

absl::Status RecordingSlotDriver::Load(uint32_t slot, uint32_t block) {
  BLOCKSWAP_RETURN_IF_ERROR(CheckSlot(slot));
  calls_.push_back({CallKind::kLoad, slot, block});
  FakeSlot& state = slots_[slot];
  if (state.in_flight) ++loads_over_unawaited_;
  state.ever_loaded = true;
  state.in_flight = true;
  state.copy_reported = false;
  if (std::optional<absl::Status> error = Injected(CallKind::kLoad)) {
    state.block.reset();  // the request went out; what lands is undefined
    return *error;
  }
  state.block = block;
  return absl::OkStatus();
}

absl::StatusOr<WaitOutcome> RecordingSlotDriver::Wait(uint32_t slot) {
  BLOCKSWAP_RETURN_IF_ERROR(CheckSlot(slot));
  // A copy is still running if nothing happened since it was requested.
  const bool follows_own_load =
      !calls_.empty() && calls_.back().kind == CallKind::kLoad && calls_.back().slot == slot;
  calls_.push_back({CallKind::kWait, slot});
  FakeSlot& state = slots_[slot];
  if (!state.ever_loaded) {
    return absl::FailedPreconditionError(
        absl::StrCat("slot ", slot, " was never loaded (load it before waiting)"));
  }
  if (std::optional<absl::Status> error = Injected(CallKind::kWait)) return *error;
  if (options_.wait_delay > absl::ZeroDuration()) absl::SleepFor(options_.wait_delay);
  WaitOutcome outcome{.was_ready = !(state.in_flight && follows_own_load)};
  state.in_flight = false;
  if (options_.not_ready_stream_stall) {
    outcome.stall_ticket = ++last_ticket_;
    unreported_stalls_.push_back(
        StreamStall{*outcome.stall_ticket,
                    outcome.was_ready ? absl::ZeroDuration() : *options_.not_ready_stream_stall});
  }
  if (!state.copy_reported && options_.copy_time > absl::ZeroDuration()) {
    outcome.copy_time = options_.copy_time;
  }
  state.copy_reported = true;
  return outcome;
}

absl::Status RecordingSlotDriver::Release(uint32_t slot) {
  BLOCKSWAP_RETURN_IF_ERROR(CheckSlot(slot));
  calls_.push_back({CallKind::kRelease, slot});
  if (std::optional<absl::Status> error = Injected(CallKind::kRelease)) return *error;
  // Releasing awaits the slot's outstanding load (docs/protocol.md, "What must hold").
  slots_[slot].in_flight = false;
  return absl::OkStatus();
}

absl::Status RecordingSlotDriver::Drain() {
  calls_.push_back({CallKind::kDrain});
  if (std::optional<absl::Status> error = Injected(CallKind::kDrain)) return *error;
  for (FakeSlot& state : slots_) state.in_flight = false;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StreamStall>> RecordingSlotDriver::TakeStreamStalls(bool wait_for_all) {
  if (options_.stream_lags && !wait_for_all) return std::vector<StreamStall>{};
  return std::exchange(unreported_stalls_, {});
}

std::optional<uint32_t> RecordingSlotDriver::content(uint32_t slot) const {
  if (slot >= slots_.size()) return std::nullopt;
  return slots_[slot].block;
}

int RecordingSlotDriver::loads_in_flight() const {
  return static_cast<int>(
      std::count_if(slots_.begin(), slots_.end(), [](const FakeSlot& s) { return s.in_flight; }));
}

}  // namespace blockswap::client
