#include "daemon/device/copy_tracker.h"

#include <algorithm>
#include <utility>

#include "shared/base/status.h"
#include "shared/protocol/trace_log.h"

namespace blockswap::daemon {
namespace {

// While the oldest batch is later than the measured rate predicts, the
// worker looks again after this, doubling up to kLateCheckMax.
constexpr absl::Duration kLateCheckMin = absl::Microseconds(20);
constexpr absl::Duration kLateCheckMax = absl::Milliseconds(1);
// Before any rate is known, and the longest a prediction may push a look.
constexpr absl::Duration kFirstCheck = absl::Microseconds(50);
constexpr absl::Duration kPredictedCheckMax = absl::Milliseconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<Event>> CopyTracker::TakeEvent() {
  if (!spare_.empty()) {
    std::unique_ptr<Event> event = std::move(spare_.back());
    spare_.pop_back();
    return event;
  }
  // Never exported: only the daemon records it.
  return device_.CreateEvent();
}

absl::Status CopyTracker::Track(std::vector<Copy> copies) {
  if (copies.empty()) return absl::OkStatus();
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<Event> done, TakeEvent());
  BLOCKSWAP_RETURN_IF_ERROR(copy_stream_.Record(*done));
  Batch batch;
  batch.done = std::move(done);
  batch.issued = absl::Now();
  for (const Copy& copy : copies) batch.bytes += copy.bytes;
  batch.copies = std::move(copies);
  batches_.push_back(std::move(batch));
  return absl::OkStatus();
}

absl::Status CopyTracker::TrackWordWrites(uint64_t ring_id) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<Event> done, TakeEvent());
  BLOCKSWAP_RETURN_IF_ERROR(copy_stream_.Record(*done));
  Batch batch;
  batch.done = std::move(done);
  batch.issued = absl::Now();
  batch.word_rings.push_back(ring_id);
  batches_.push_back(std::move(batch));
  return absl::OkStatus();
}

absl::StatusOr<absl::Time> CopyTracker::Retire(
    absl::FunctionRef<void(const Copy& copy, uint64_t completed_ns, absl::Duration stream_time)>
        completed) {
  while (!batches_.empty()) {
    Batch& oldest = batches_.front();
    BLOCKSWAP_ASSIGN_OR_RETURN(bool done, oldest.done->Query());
    if (!done) break;
    if (oldest.copies.empty()) {
      // Word writes only: no copy to report or to time.
      spare_.push_back(std::move(oldest.done));
      batches_.pop_front();
      continue;
    }
    const absl::Time now = absl::Now();
    const absl::Duration batch_busy = now - std::max(oldest.issued, last_completed_);
    busy_ += batch_busy;
    last_completed_ = now;
    bytes_completed_ += oldest.bytes;
    late_backoff_ = absl::ZeroDuration();
    const uint64_t completed_ns = MonotonicNanos();
    for (const Copy& copy : oldest.copies) {
      const double share = oldest.bytes > 0 ? static_cast<double>(copy.bytes) / oldest.bytes
                                            : 1.0 / oldest.copies.size();
      completed(copy, completed_ns, batch_busy * share);
    }
    spare_.push_back(std::move(oldest.done));
    batches_.pop_front();  // the keep-alives go here
  }
  return NextCheck(absl::Now());
}

absl::Time CopyTracker::NextCheck(absl::Time now) {
  if (batches_.empty()) return absl::InfiniteFuture();
  if (bytes_completed_ == 0 || busy_ <= absl::ZeroDuration()) return now + kFirstCheck;
  const Batch& oldest = batches_.front();
  // The oldest batch starts once it was issued and the previous one is done.
  const absl::Time predicted =
      std::max(oldest.issued, last_completed_) +
      busy_ * (static_cast<double>(oldest.bytes) / static_cast<double>(bytes_completed_));
  if (predicted > now) return std::min(predicted, now + kPredictedCheckMax);
  late_backoff_ = std::clamp(late_backoff_ * 2, kLateCheckMin, kLateCheckMax);
  return now + late_backoff_;
}

bool CopyTracker::InFlight(uint64_t ring_id) const {
  for (const Batch& batch : batches_) {
    for (const Copy& copy : batch.copies) {
      if (copy.ring_id == ring_id) return true;
    }
    if (std::find(batch.word_rings.begin(), batch.word_rings.end(), ring_id) !=
        batch.word_rings.end()) {
      return true;
    }
  }
  return false;
}

}  // namespace blockswap::daemon
