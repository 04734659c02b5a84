#include "daemon/idle_exit.h"

#include <fcntl.h>
#include <sys/file.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

absl::StatusOr<IdleExit> IdleExit::Create(absl::Duration idle_exit, const std::string& lock_path) {
  UniqueFd lock;
  if (idle_exit > absl::ZeroDuration() && !lock_path.empty()) {
    lock.Reset(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!lock.valid()) {
      return ErrnoStatus(errno, absl::StrCat("opening the idle-exit lock ", lock_path));
    }
  }
  return IdleExit(idle_exit, std::move(lock), absl::Now());
}

absl::Duration IdleExit::poll_interval() const {
  return std::clamp(idle_exit_ / 4, absl::Milliseconds(50), absl::Seconds(1));
}

bool IdleExit::ShouldExit(absl::FunctionRef<size_t()> sessions, absl::Time now) {
  if (!enabled()) return false;
  if (sessions() > 0) {
    was_busy_ = true;
    return false;
  }
  if (was_busy_) {  // the last session just ended: the idle time starts now
    was_busy_ = false;
    idle_since_ = now;
  }
  if (now - idle_since_ < idle_exit_) return false;
  if (!lock_.valid()) return true;
  // A client attaching (shared) or starting a daemon (exclusive) holds it:
  // look again at the next poll, when its session counts.
  if (::flock(lock_.get(), LOCK_EX | LOCK_NB) != 0) return false;
  // One may have attached between the count above and the lock.
  if (sessions() > 0) {
    ::flock(lock_.get(), LOCK_UN);
    was_busy_ = true;
    return false;
  }
  return true;
}

}  // namespace blockswap::daemon
