// Makes Debian's abseil synchronisation visible to ThreadSanitizer.
//
// libabsl_synchronization.so is built without -fsanitize=thread, so TSan
// never sees absl::Mutex, CondVar or Notification synchronise anything, and
// would report every ABSL_GUARDED_BY field of ours that two threads touch
// under a mutex as a race. tests/sanitize/tsan.sh LD_PRELOADs this library:
// it interposes their entry points (by their mangled names in Debian's
// inline namespace absl::debian3), calls the real ones (dlsym RTLD_NEXT)
// and tells TSan the happens-before edges with __tsan_acquire/__tsan_release
// on the mutex's address. In a process without TSan the annotations are
// absent (weak) and this is a pass-through.
//
// Duration and Time are passed as the trivially copyable 16-byte structs
// they are (two integer registers), Condition by pointer.
//
// A Condition is evaluated inside the library, once it holds the lock and
// possibly by the thread that unlocks (for a waiter), before the calls
// below return: each Condition passed in is copied with its evaluator
// replaced by one that acquires the mutex before and releases it after, so
// that what the condition reads is ordered between the unlocks around it.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
__attribute__((weak)) void __tsan_acquire(void* addr);
__attribute__((weak)) void __tsan_release(void* addr);
}

namespace {

struct Duration {
  int64_t hi;
  uint32_t lo;
};
struct Time {
  Duration d;
};

void Acquire(void* addr) {
  if (__tsan_acquire != nullptr) __tsan_acquire(addr);
}
void Release(void* addr) {
  if (__tsan_release != nullptr) __tsan_release(addr);
}

template <typename F>
F Real(const char* name) {
  void* real = dlsym(RTLD_NEXT, name);
  if (real == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found\n", name);
    std::abort();
  }
  return reinterpret_cast<F>(real);
}

// absl::Condition of 20220623: {eval_, function_, method_ (16 bytes), arg_}.
constexpr size_t kConditionBytes = 40;
using Eval = bool (*)(const void* condition);

struct WrappedCondition {
  unsigned char condition[kConditionBytes];  // a copy, eval_ replaced
  Eval original;
  void* mu;
};

bool AcquireThenEval(const void* condition) {
  const auto* wrapped = static_cast<const WrappedCondition*>(condition);
  Acquire(wrapped->mu);
  // The original evaluator reads function_, method_ and arg_ at the same
  // offsets of the copy.
  const bool met = wrapped->original(condition);
  // The evaluation ran under the lock, which the library may release
  // without coming back here (the waiter sleeps): publish it now.
  Release(wrapped->mu);
  return met;
}

// Returns the condition to pass on: `cond` itself when it has no evaluator
// (always true), else `storage` filled as its wrapper.
const void* Wrap(const void* cond, void* mu, WrappedCondition& storage) {
  if (cond == nullptr) return cond;
  Eval original;
  std::memcpy(&original, cond, sizeof(original));
  // No evaluator, or already wrapped (the library calls its own entry
  // points, e.g. Notification -> LockWhen, through the shim too).
  if (original == nullptr || original == &AcquireThenEval) return cond;
  std::memcpy(storage.condition, cond, kConditionBytes);
  Eval replacement = &AcquireThenEval;
  std::memcpy(storage.condition, &replacement, sizeof(replacement));
  storage.original = original;
  storage.mu = mu;
  return &storage;
}

// A Notification is {Mutex mutex_; std::atomic<bool> notified_yet_;}: the
// inline HasBeenNotified() is an acquire load of notified_yet_, so the
// release goes on that address too.
void* NotifiedYet(void* notification) { return static_cast<char*>(notification) + sizeof(void*); }

}  // namespace

#define BLOCKSWAP_REAL(type, name) static const auto real = Real<type>(name)

extern "C" {

// Mutex: lock and unlock.
void _ZN4absl7debian35Mutex4LockEv(void* mu) {
  BLOCKSWAP_REAL(void (*)(void*), "_ZN4absl7debian35Mutex4LockEv");
  real(mu);
  Acquire(mu);
}
void _ZN4absl7debian35Mutex10ReaderLockEv(void* mu) {
  BLOCKSWAP_REAL(void (*)(void*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  real(mu);
  Acquire(mu);
}
bool _ZN4absl7debian35Mutex7TryLockEv(void* mu) {
  BLOCKSWAP_REAL(bool (*)(void*), "_ZN4absl7debian35Mutex7TryLockEv");
  bool locked = real(mu);
  if (locked) Acquire(mu);
  return locked;
}
bool _ZN4absl7debian35Mutex13ReaderTryLockEv(void* mu) {
  BLOCKSWAP_REAL(bool (*)(void*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  bool locked = real(mu);
  if (locked) Acquire(mu);
  return locked;
}
void _ZN4absl7debian35Mutex6UnlockEv(void* mu) {
  BLOCKSWAP_REAL(void (*)(void*), "_ZN4absl7debian35Mutex6UnlockEv");
  Release(mu);
  real(mu);
}
void _ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu) {
  BLOCKSWAP_REAL(void (*)(void*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Release(mu);
  real(mu);
}

// Mutex: lock when a condition holds (the lock is held on return).
void _ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(void* mu, const void* cond) {
  BLOCKSWAP_REAL(void (*)(void*, const void*), "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  WrappedCondition wrapped;
  real(mu, Wrap(cond, mu, wrapped));
  Acquire(mu);
}
void _ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(void* mu, const void* cond) {
  BLOCKSWAP_REAL(void (*)(void*, const void*),
                 "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  WrappedCondition wrapped;
  real(mu, Wrap(cond, mu, wrapped));
  Acquire(mu);
}
bool _ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    void* mu, const void* cond, Duration timeout) {
  BLOCKSWAP_REAL(bool (*)(void*, const void*, Duration),
                 "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  WrappedCondition wrapped;
  bool met = real(mu, Wrap(cond, mu, wrapped), timeout);
  Acquire(mu);
  return met;
}
bool _ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu,
                                                                               const void* cond,
                                                                               Time deadline) {
  BLOCKSWAP_REAL(bool (*)(void*, const void*, Time),
                 "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  WrappedCondition wrapped;
  bool met = real(mu, Wrap(cond, mu, wrapped), deadline);
  Acquire(mu);
  return met;
}

// Mutex: await (unlocks, waits, locks again).
void _ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(void* mu, const void* cond) {
  BLOCKSWAP_REAL(void (*)(void*, const void*), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Release(mu);
  WrappedCondition wrapped;
  real(mu, Wrap(cond, mu, wrapped));
  Acquire(mu);
}
bool _ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(void* mu,
                                                                               const void* cond,
                                                                               Duration timeout) {
  BLOCKSWAP_REAL(bool (*)(void*, const void*, Duration),
                 "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Release(mu);
  WrappedCondition wrapped;
  bool met = real(mu, Wrap(cond, mu, wrapped), timeout);
  Acquire(mu);
  return met;
}
bool _ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu,
                                                                            const void* cond,
                                                                            Time deadline) {
  BLOCKSWAP_REAL(bool (*)(void*, const void*, Time),
                 "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Release(mu);
  WrappedCondition wrapped;
  bool met = real(mu, Wrap(cond, mu, wrapped), deadline);
  Acquire(mu);
  return met;
}

// CondVar: waits unlock and relock the mutex.
void _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* cv, void* mu) {
  BLOCKSWAP_REAL(void (*)(void*, void*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(cv, mu);
  Acquire(mu);
}
bool _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(void* cv, void* mu,
                                                                           Duration timeout) {
  BLOCKSWAP_REAL(bool (*)(void*, void*, Duration),
                 "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  bool timed_out = real(cv, mu, timeout);
  Acquire(mu);
  return timed_out;
}
bool _ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(void* cv, void* mu,
                                                                        Time deadline) {
  BLOCKSWAP_REAL(bool (*)(void*, void*, Time),
                 "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  bool timed_out = real(cv, mu, deadline);
  Acquire(mu);
  return timed_out;
}

// Notification.
void _ZN4absl7debian312Notification6NotifyEv(void* n) {
  BLOCKSWAP_REAL(void (*)(void*), "_ZN4absl7debian312Notification6NotifyEv");
  Release(n);
  Release(NotifiedYet(n));
  real(n);
}
void _ZNK4absl7debian312Notification19WaitForNotificationEv(void* n) {
  BLOCKSWAP_REAL(void (*)(void*), "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(n);
  Acquire(n);
}
bool _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(
    void* n, Duration timeout) {
  BLOCKSWAP_REAL(bool (*)(void*, Duration),
                 "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  bool notified = real(n, timeout);
  if (notified) Acquire(n);
  return notified;
}
bool _ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(void* n,
                                                                                 Time deadline) {
  BLOCKSWAP_REAL(bool (*)(void*, Time),
                 "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  bool notified = real(n, deadline);
  if (notified) Acquire(n);
  return notified;
}

}  // extern "C"
