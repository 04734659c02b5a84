// VerifyQueue: Admin.VerifyModel's own worker. Re-hashing a model's masters
// takes seconds for a large model, so it never shares the WorkQueue that ring
// creations, uploads and file registrations use: no number of verifies delays
// a trainer's start.
//
// A call for a model that already has a verification waiting to start joins
// it and gets its answer (one that is already running is not joined: it may
// have hashed a block before the caller asked). Each uid may have at most
// `max_per_uid` calls waiting or running (0: unlimited); more are
// RESOURCE_EXHAUSTED at once, naming the limit. Verifications of different
// uids take turns (WorkQueue's fairness, by the uid of the call that started
// each). A verification may answer several callers, so only Stop cancels it.
#ifndef BLOCKSWAP_DAEMON_SERVER_VERIFY_QUEUE_H_
#define BLOCKSWAP_DAEMON_SERVER_VERIFY_QUEUE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/server/work_queue.h"
#include "daemon/store/model_store.h"

namespace blockswap::daemon {

class VerifyQueue {
 public:
  using Done = std::function<void(const absl::StatusOr<VerifyResult>&)>;

  // `store` must outlive the queue.
  VerifyQueue(const ModelStore& store, uint32_t max_per_uid);
  // Answers every call already submitted (UNAVAILABLE for those not
  // verified yet), then joins the thread.
  ~VerifyQueue() = default;

  // Verifies `model_id` for `uid` and calls `done` once with the result, on
  // the queue's thread; or returns RESOURCE_EXHAUSTED (and never calls
  // `done`) when `uid` has max_per_uid calls waiting or running.
  absl::Status Submit(uid_t uid, const std::string& model_id, Done done);

  // Verifications started since construction (merged calls share one).
  uint64_t verifications() const;

  // Answers the calls waiting with UNAVAILABLE and stops the running
  // verification at its next block (graceful stop). Returns at once.
  void Stop() { worker_.Stop(); }

 private:
  struct Waiter {
    uid_t uid;
    Done done;
  };
  void Run(const std::string& model_id, const Cancellation& cancellation);

  const ModelStore& store_;
  const uint32_t max_per_uid_;
  mutable absl::Mutex mu_;
  // Calls of verifications not started yet, by model id.
  std::map<std::string, std::vector<Waiter>> waiting_ ABSL_GUARDED_BY(mu_);
  std::map<uid_t, uint32_t> calls_by_uid_ ABSL_GUARDED_BY(mu_);  // waiting or running
  uint64_t verifications_ ABSL_GUARDED_BY(mu_) = 0;
  WorkQueue worker_{1};  // last: destroyed (drained and joined) first
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_VERIFY_QUEUE_H_
