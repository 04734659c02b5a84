// WorkQueue: a few threads for the slow work a gRPC reactor must not do
// itself (reserving and hashing an upload, reading a model file, allocating
// a ring), shared fairly between uids.
//
// Fairness: each uid has its own first-in-first-out queue. A free thread
// takes the next item of the uid with the fewest items running, and among
// those of the uid served longest ago, so one uid's queued items delay
// another uid's request by at most one item: the first of its running items
// to end frees the thread the other uid gets next.
//
// Cancellation: an item carries its caller's Cancellation (the client left,
// its deadline passed); its work gets one that also reports the queue's
// stop. After Stop() the queued items run at once, each seeing the stop so
// that it answers its caller instead of working, and running work sees it at
// its next check. A work function asks its Cancellation first and returns
// at once when it is cancelled: a client that queued work and left costs
// nothing more.
//
// Thread-safe. Work runs on the queue's threads and must not Post and wait
// for what it posted.
#ifndef BLOCKSWAP_DAEMON_SERVER_WORK_QUEUE_H_
#define BLOCKSWAP_DAEMON_SERVER_WORK_QUEUE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "shared/base/cancellation.h"

namespace blockswap::daemon {

class WorkQueue {
 public:
  // Called once per item, on a queue thread.
  using Work = std::function<void(const Cancellation&)>;

  explicit WorkQueue(int threads);
  // Stops, runs what is queued (each item sees the stop) and joins the
  // threads. Nothing may Post once this has begun.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `work` for `uid`; `cancellation` says whether its caller still
  // wants it. Also after Stop (the work then sees the stop at once).
  void Post(uid_t uid, Cancellation cancellation, Work work);

  // From now on every Cancellation this queue hands to work reports
  // UNAVAILABLE ("blockswapd is shutting down"). Returns at once; idempotent.
  void Stop();

 private:
  struct Item {
    Cancellation cancellation;
    Work work;
  };
  struct UidQueue {
    std::deque<Item> items;
    int running = 0;
    uint64_t served = 0;  // turns_ when it last got a thread (0: never)
  };

  void Run();
  // The uid whose item runs next (fewest running, then served longest ago),
  // or end() when nothing is queued.
  std::map<uid_t, UidQueue>::iterator Next() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::atomic<bool> stopped_{false};  // read by the work's cancellation checks
  absl::Mutex mu_;
  // Every uid with items queued or running.
  std::map<uid_t, UidQueue> uids_ ABSL_GUARDED_BY(mu_);
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t turns_ ABSL_GUARDED_BY(mu_) = 0;    // items handed to threads so far
  bool exiting_ ABSL_GUARDED_BY(mu_) = false;  // the destructor runs
  std::vector<std::thread> threads_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_WORK_QUEUE_H_
