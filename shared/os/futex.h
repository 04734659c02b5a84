// Cross-process wait/wake on a 32-bit word in shared memory.
//
// These are raw futexes WITHOUT FUTEX_PRIVATE_FLAG: libstdc++'s
// std::atomic::wait uses private futexes, whose wake never reaches a waiter in
// another process (docs/rules.md, "Shared futexes, no locks in shared memory").
#ifndef BLOCKSWAP_SHARED_OS_FUTEX_H_
#define BLOCKSWAP_SHARED_OS_FUTEX_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace blockswap {

static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain lock-free 32-bit atomics");

enum class FutexWaitResult {
  kWoken,         // a wake arrived (or a spurious wakeup: re-check the word)
  kValueChanged,  // the word no longer held `expected` when the wait began
  kTimedOut,
  kInterrupted,   // a signal arrived
};

// Sleeps while `*word == expected`, at most `timeout`. Works on read-only
// mappings too (the waiter never writes the word).
FutexWaitResult FutexWait(const std::atomic<uint32_t>* word, uint32_t expected,
                          absl::Duration timeout);

// Wakes every process and thread waiting on `word`.
void FutexWakeAll(const std::atomic<uint32_t>* word);

// Waits until `ready()` holds, re-evaluating it after each wake of `word` and
// at least every `poll` (so conditions outside the word, such as a peer's
// heartbeat, are noticed). Returns DEADLINE_EXCEEDED when `timeout` passes.
absl::Status FutexAwait(const std::atomic<uint32_t>* word, absl::Duration timeout,
                        const std::function<absl::StatusOr<bool>()>& ready,
                        absl::Duration poll = absl::Milliseconds(50));

// Generation counters are 32-bit (futex words) and wrap: compare them in
// serial-number arithmetic. True when `a` is at or after `b`.
inline bool SeqAtLeast(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) >= 0;
}

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_OS_FUTEX_H_
