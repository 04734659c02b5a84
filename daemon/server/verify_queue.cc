#include "daemon/server/verify_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {

VerifyQueue::VerifyQueue(const ModelStore& store, uint32_t max_per_uid)
    : store_(store), max_per_uid_(max_per_uid) {}

absl::Status VerifyQueue::Submit(uid_t uid, const std::string& model_id, Done done) {
  bool start = false;
  {
    absl::MutexLock lock(&mu_);
    uint32_t& calls = calls_by_uid_[uid];
    if (max_per_uid_ != 0 && calls >= max_per_uid_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "uid ", uid, " already has ", calls,
          " VerifyModel calls waiting or running (max_verifies_per_uid = ", max_per_uid_,
          "); retry when one has answered"));
    }
    ++calls;
    std::vector<Waiter>& waiters = waiting_[model_id];
    start = waiters.empty();
    waiters.push_back({uid, std::move(done)});
  }
  if (start) {
    worker_.Post(uid, Cancellation(), [this, model_id](const Cancellation& cancellation) {
      Run(model_id, cancellation);
    });
  }
  return absl::OkStatus();
}

uint64_t VerifyQueue::verifications() const {
  absl::MutexLock lock(&mu_);
  return verifications_;
}

void VerifyQueue::Run(const std::string& model_id, const Cancellation& cancellation) {
  std::vector<Waiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    auto node = waiting_.extract(model_id);
    if (node.empty()) return;
    // From here a new call for the model starts a verification of its own.
    waiters = std::move(node.mapped());
    ++verifications_;
  }
  absl::StatusOr<VerifyResult> result = store_.Verify(model_id, cancellation);
  for (const Waiter& waiter : waiters) waiter.done(result);
  // A call counts until it is answered.
  absl::MutexLock lock(&mu_);
  for (const Waiter& waiter : waiters) {
    auto it = calls_by_uid_.find(waiter.uid);
    if (--it->second == 0) calls_by_uid_.erase(it);
  }
}

}  // namespace blockswap::daemon
