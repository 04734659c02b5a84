#include "shared/os/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace blockswap {

FutexWaitResult FutexWait(const std::atomic<uint32_t>* word, uint32_t expected,
                          absl::Duration timeout) {
  timespec ts = absl::ToTimespec(std::max(timeout, absl::ZeroDuration()));
  long rc = ::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected,
                      &ts, nullptr, 0);
  if (rc == 0) return FutexWaitResult::kWoken;
  switch (errno) {
    case EAGAIN:
      return FutexWaitResult::kValueChanged;
    case ETIMEDOUT:
      return FutexWaitResult::kTimedOut;
    default:
      return FutexWaitResult::kInterrupted;
  }
}

void FutexWakeAll(const std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr,
            nullptr, 0);
}

absl::Status FutexAwait(const std::atomic<uint32_t>* word, absl::Duration timeout,
                        const std::function<absl::StatusOr<bool>()>& ready,
                        absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    // Read the word BEFORE evaluating the condition: a publish between the
    // two then changes the word and the wait below returns at once.
    uint32_t seen = word->load(std::memory_order_acquire);
    absl::StatusOr<bool> done = ready();
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("timed out waiting on a shared-memory word");
    }
    FutexWait(word, seen, std::min(left, poll));
  }
}

}  // namespace blockswap
