// A few threads for the slow work a gRPC reactor must not do itself
// (hashing and copying an upload, allocating a ring).
#ifndef BLOCKSWAP_DAEMON_SERVER_WORK_QUEUE_H_
#define BLOCKSWAP_DAEMON_SERVER_WORK_QUEUE_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace blockswap::daemon {

class WorkQueue {
 public:
  explicit WorkQueue(int threads);
  // Runs what was posted, then joins the threads.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Post(std::function<void()> work);

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_WORK_QUEUE_H_
