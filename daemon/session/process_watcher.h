// ProcessWatcher: tells its owner when a client process exits, from a
// thread of its own that waits on the processes' pidfds (a pidfd becomes
// readable once its process has exited; a pid could be reused, a pidfd
// cannot).
//
// Each watch reports at most once: the watcher forgets a process before it
// reports it, and a key that Unwatch has removed is never reported.
#ifndef BLOCKSWAP_DAEMON_SESSION_PROCESS_WATCHER_H_
#define BLOCKSWAP_DAEMON_SESSION_PROCESS_WATCHER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

// Thread-safe. `on_exit` runs on the watcher's thread with none of the
// watcher's locks held, so it may call Watch and Unwatch (a caller may hold
// its own lock around them that `on_exit` also takes); it must not destroy
// the watcher.
class ProcessWatcher {
 public:
  using ExitCallback = std::function<void(uint64_t key)>;

  // Starts the thread. Everything `on_exit` uses must outlive the watcher.
  // Where the kernel refuses the epoll instance or the eventfd, every Watch
  // fails with that error.
  explicit ProcessWatcher(ExitCallback on_exit);
  // Stops the thread, after a report in progress has returned; nothing is
  // reported from then on.
  ~ProcessWatcher();
  ProcessWatcher(const ProcessWatcher&) = delete;
  ProcessWatcher& operator=(const ProcessWatcher&) = delete;

  // Watches the process of `pidfd` (kept until the watch ends) under `key`,
  // which must not be watched already. INVALID_ARGUMENT for kStopKey.
  absl::Status Watch(uint64_t key, UniqueFd pidfd);
  // Ends the watch of `key`, if any.
  void Unwatch(uint64_t key);
  size_t watched() const;

  // Reserved: the epoll key of the eventfd that stops the thread.
  static constexpr uint64_t kStopKey = UINT64_MAX;

 private:
  void Loop();
  // Forgets `key`; whether it was watched.
  bool Forget(uint64_t key) ABSL_LOCKS_EXCLUDED(mu_);

  const ExitCallback on_exit_;
  absl::Status broken_;  // set once, in the constructor
  UniqueFd epoll_;
  UniqueFd stop_;  // eventfd
  mutable absl::Mutex mu_;
  std::map<uint64_t, UniqueFd> pidfds_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_PROCESS_WATCHER_H_
