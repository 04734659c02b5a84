#include "client/core/stall_meter.h"

#include <optional>
#include <utility>

#include "shared/base/status.h"

namespace blockswap::client {

absl::StatusOr<WaitTimer*> StallMeter::Acquire() {
  if (idle_.empty()) BLOCKSWAP_RETURN_IF_ERROR(Collect(/*wait_for_all=*/false));
  if (!idle_.empty()) {
    acquired_ = std::move(idle_.back());
    idle_.pop_back();
  } else if (pending_.size() + 1 < kMaxTimers) {
    BLOCKSWAP_ASSIGN_OR_RETURN(acquired_, device_.CreateWaitTimer());
  } else {
    // Every timer times a wait the stream has not passed yet: measuring the
    // oldest is the only way to free one.
    BLOCKSWAP_RETURN_IF_ERROR(RetireOldest(/*wait=*/true).status());
    acquired_ = std::move(idle_.back());
    idle_.pop_back();
  }
  return acquired_.get();
}

uint64_t StallMeter::Issued(uint32_t slot, uint32_t generation) {
  pending_.push_back(Pending{std::move(acquired_), ++last_ticket_, slot, generation});
  return last_ticket_;
}

void StallMeter::Unused() {
  if (acquired_ != nullptr) idle_.push_back(std::move(acquired_));
}

absl::Status StallMeter::Collect(bool wait_for_all) {
  absl::Status first_error;
  while (!pending_.empty()) {
    absl::StatusOr<bool> retired = RetireOldest(wait_for_all);
    if (!retired.ok() && first_error.ok()) first_error = retired.status();
    if (retired.ok() && !*retired) break;  // the stream has not passed it yet
  }
  return first_error;
}

absl::StatusOr<bool> StallMeter::RetireOldest(bool wait) {
  Pending& oldest = pending_.front();
  absl::StatusOr<std::optional<WaitIdle>> idle =
      wait ? oldest.timer->Await() : oldest.timer->Poll();
  if (!wait && idle.ok() && !idle->has_value()) return false;
  // Retired either way: a failed timer measures nothing. (A timer whose
  // wait was never issued, in a mutation test that skips the stream's wait,
  // reports nothing or its previous result: statistics, not the protocol.)
  if (idle.ok() && idle->has_value()) {
    MeasuredStall stall{oldest.ticket, oldest.slot, oldest.generation, **idle};
    if (on_measured_) on_measured_(stall);
    if (collected_.size() == kMaxUntaken) collected_.erase(collected_.begin());
    collected_.push_back(stall);
  }
  idle_.push_back(std::move(oldest.timer));
  pending_.pop_front();
  if (!idle.ok()) return idle.status();
  return true;
}

}  // namespace blockswap::client
