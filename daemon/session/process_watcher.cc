#include "daemon/session/process_watcher.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

ProcessWatcher::ProcessWatcher(ExitCallback on_exit)
    : on_exit_(std::move(on_exit)),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      stop_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!epoll_.valid()) {
    broken_ = ErrnoStatus(errno, "creating the epoll instance that watches client processes");
  } else if (!stop_.valid()) {
    broken_ = ErrnoStatus(errno, "creating the eventfd that stops the process watcher");
  } else {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = kStopKey;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, stop_.get(), &event) != 0) {
      broken_ = ErrnoStatus(errno, "watching the process watcher's eventfd");
    }
  }
  // Not started when broken: nothing would ever stop it.
  if (broken_.ok()) thread_ = std::thread([this] { Loop(); });
}

ProcessWatcher::~ProcessWatcher() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  (void)::write(stop_.get(), &one, sizeof(one));
  thread_.join();
}

absl::Status ProcessWatcher::Watch(uint64_t key, UniqueFd pidfd) {
  BLOCKSWAP_RETURN_IF_ERROR(broken_);
  if (key == kStopKey) {
    return absl::InvalidArgumentError(absl::StrCat("process watch key ", key, " is reserved"));
  }
  absl::MutexLock lock(&mu_);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = key;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, pidfd.get(), &event) != 0) {
    return ErrnoStatus(errno, "watching the client process");
  }
  pidfds_[key] = std::move(pidfd);
  return absl::OkStatus();
}

void ProcessWatcher::Unwatch(uint64_t key) { Forget(key); }

size_t ProcessWatcher::watched() const {
  absl::MutexLock lock(&mu_);
  return pidfds_.size();
}

bool ProcessWatcher::Forget(uint64_t key) {
  absl::MutexLock lock(&mu_);
  auto it = pidfds_.find(key);
  if (it == pidfds_.end()) return false;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.get(), nullptr);
  pidfds_.erase(it);
  return true;
}

void ProcessWatcher::Loop() {
  while (true) {
    epoll_event events[16];
    int count = ::epoll_wait(epoll_.get(), events, 16, -1);
    if (count < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < count; ++i) {
      if (events[i].data.u64 == kStopKey) return;
      // Readable: the process has exited. The pidfd stays readable, so the
      // watch ends before the report; a key Unwatch removed meanwhile is not
      // reported.
      if (Forget(events[i].data.u64)) on_exit_(events[i].data.u64);
    }
  }
}

}  // namespace blockswap::daemon
