// The host backend's streams (host_backend.cc): a queue drained by a worker
// thread with CUDA's stream semantics (in order, waits that snapshot the
// latest record, a sticky failure), a caller's stream run inline, and the
// shared words a stream writes and waits for. Private to the host backend.
#ifndef BLOCKSWAP_SHARED_BACKEND_HOST_STREAM_H_
#define BLOCKSWAP_SHARED_BACKEND_HOST_STREAM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "shared/backend/backend.h"
#include "shared/backend/host_lifetime.h"
#include "shared/backend/host_memory.h"
#include "shared/backend/host_timing.h"
#include "shared/base/monotonic_clock.h"
#include "shared/base/status.h"
#include "shared/os/futex.h"
#include "shared/os/shared_memory.h"

namespace blockswap::host_internal {

// How long a stream being destroyed still honours a wait before abandoning it
// (its peer may be dead and never record again).
inline constexpr absl::Duration kShutdownWaitGrace = absl::Milliseconds(200);

// Stream words over a shared mapping: a stream's write is a store and a
// futex wake on its worker; a wait blocks the worker until the word reaches
// its target. Unlike a wait on an event, it never watches the writer's
// process: as on a GPU, only a write releases it.
//
// Destroying the words is CUDA's cuMemHostUnregister of their page: a stream
// write that runs after it would write an unregistered page, which faults the
// context on a GPU. The mapping stays alive for the queued work, but such a
// write is reported (ReportLifetimeViolation) and not made.
class HostStreamWords final : public StreamWords {
 public:
  explicit HostStreamWords(Mapping mapping)
      : mapping_(std::make_shared<Mapping>(std::move(mapping))),
        unregistered_(std::make_shared<std::atomic<bool>>(false)) {}
  ~HostStreamWords() override { unregistered_->store(true, std::memory_order_release); }
  size_t count() const override { return mapping_->size() / sizeof(uint32_t); }
  std::atomic<uint32_t>& word(size_t index) const override {
    return static_cast<std::atomic<uint32_t>*>(mapping_->data())[index];
  }
  const std::shared_ptr<Mapping>& mapping() const { return mapping_; }
  // True once these words were destroyed ("unregistered").
  std::shared_ptr<const std::atomic<bool>> unregistered() const { return unregistered_; }

 private:
  std::shared_ptr<Mapping> mapping_;
  std::shared_ptr<std::atomic<bool>> unregistered_;
};

inline absl::StatusOr<HostStreamWords*> AsHostWords(StreamWords& words, size_t index) {
  auto* host_words = dynamic_cast<HostStreamWords*>(&words);
  if (host_words == nullptr) return absl::InvalidArgumentError("not host-backend stream words");
  if (index >= words.count()) {
    return absl::OutOfRangeError(
        absl::StrCat("stream word ", index, " out of range (", words.count(), " words)"));
  }
  return host_words;
}

// A failed stream (destroyed while a wait on a word was pending) behaves as a
// CUDA stream after a sticky error: the work queued behind the failure is
// skipped (it would read what the wait guarded), every later call returns
// the error, and only records and synchronisations still complete, so that
// nobody waits for ever on this stream.
class HostStream final : public Stream {
 public:
  HostStream(int64_t jitter_us, absl::Duration copy_delay)
      : jitter_us_(jitter_us),
        copy_delay_(copy_delay),
        rng_(std::random_device{}()),
        worker_([this] { Run(); }) {}

  ~HostStream() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    worker_.join();
  }

  absl::Status CopyHostToDevice(void* dst, const void* src, size_t bytes) override {
    return Enqueue([=, delay = copy_delay_] {
      if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
      std::memcpy(dst, src, bytes);
    });
  }
  absl::Status CopyDeviceToHost(void* dst, const void* src, size_t bytes) override {
    return Enqueue([=] { std::memcpy(dst, src, bytes); });
  }

  absl::Status WriteWord(StreamWords& words, size_t index, uint32_t value) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(HostStreamWords * host_words, AsHostWords(words, index));
    return Enqueue([word = &words.word(index), index, value, keep = host_words->mapping(),
                    unregistered = host_words->unregistered()] {
      if (unregistered->load(std::memory_order_acquire)) {
        host_lifetime::ReportLifetimeViolation(absl::FailedPreconditionError(absl::StrCat(
            "a stream wrote stream word ", index,
            " after its words were unregistered (destroyed) with the write still queued (the "
            "owner must wait for the writes queued on its words before destroying them)")));
        return;
      }
      word->store(value, std::memory_order_release);
      FutexWakeAll(word);
    });
  }

  absl::Status WaitWord(StreamWords& words, size_t index, uint32_t target,
                        WaitTimer* timer) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(HostStreamWords * host_words, AsHostWords(words, index));
    std::shared_ptr<HostWaitTimerState> timer_state;
    if (timer != nullptr) {
      BLOCKSWAP_ASSIGN_OR_RETURN(HostWaitTimer * host_timer, AsHostWaitTimer(*timer));
      timer_state = host_timer->state();
    }
    const std::atomic<uint32_t>* word = &words.word(index);
    return EnqueueTimed(
        [this, word, index, target, keep = host_words->mapping()] {
          absl::Time abandon_at = absl::InfiniteFuture();
          while (true) {
            const uint32_t seen = word->load(std::memory_order_acquire);
            if (WordReached(seen, target)) return;
            if (absl::Now() >= abandon_at) {
              // The work behind the wait must not run unguarded (nor outlive
              // what it uses): skipped, as behind a failure.
              Fail(absl::CancelledError(absl::StrCat(
                  "stream destroyed while waiting for stream word ", index, " to reach ", target)));
              return;
            }
            if (abandon_at == absl::InfiniteFuture() && Stopping()) {
              abandon_at = absl::Now() + kShutdownWaitGrace;
            }
            FutexWait(word, seen, absl::Milliseconds(20));
          }
        },
        std::move(timer_state));
  }

  absl::Status Record(Event& event) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(HostEvent * host_event, AsHostEvent(event));
    BLOCKSWAP_RETURN_IF_ERROR(failure());
    uint32_t seq = host_event->IssueRecord();
    return Enqueue(
        [state = host_event->shared_state(), seq] { HostEvent::CompleteRecord(state.get(), seq); },
        /*even_after_failure=*/true);
  }

  absl::Status Wait(Event& event) override { return EnqueueWait(event, nullptr); }

  // The worker measures its own idle time: from reaching the wait until the
  // record it binds to completed (the jitter before an op is not idling).
  absl::Status WaitTimed(Event& event, WaitTimer& timer) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(HostWaitTimer * host_timer, AsHostWaitTimer(timer));
    return EnqueueWait(event, host_timer->state());
  }

  absl::Status LaunchHostFunc(std::function<void()> fn) override { return Enqueue(std::move(fn)); }

  absl::Status Synchronize() override {
    auto done = std::make_shared<absl::Notification>();
    BLOCKSWAP_RETURN_IF_ERROR(Enqueue([done] { done->Notify(); }, /*even_after_failure=*/true));
    done->WaitForNotification();
    return failure();
  }

 private:
  struct Op {
    std::function<void()> fn;
    bool even_after_failure = false;
    std::function<void()> if_skipped;  // run instead of fn when skipped
  };

  absl::Status Enqueue(std::function<void()> fn, bool even_after_failure = false,
                       std::function<void()> if_skipped = nullptr) {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    queue_.push_back(Op{std::move(fn), even_after_failure, std::move(if_skipped)});
    return absl::OkStatus();
  }

  // `timer`, when set, gets the worker's idle time at the wait.
  absl::Status EnqueueWait(Event& event, std::shared_ptr<HostWaitTimerState> timer) {
    BLOCKSWAP_ASSIGN_OR_RETURN(HostEvent * host_event, AsHostEvent(event));
    // The snapshot is what makes an early wait bind to the previous record.
    uint32_t target = host_event->WaitTarget();
    return EnqueueTimed(
        [this, state = host_event->shared_state(), target] { AwaitRecord(state.get(), target); },
        std::move(timer));
  }

  // Queues `wait` (it blocks the worker until what it waits for happened);
  // `timer`, when set, gets the worker's idle time in it.
  absl::Status EnqueueTimed(std::function<void()> wait, std::shared_ptr<HostWaitTimerState> timer) {
    const uint64_t timed_wait = timer != nullptr ? timer->Issue() : 0;
    std::function<void()> if_skipped;
    if (timer != nullptr) {
      if_skipped = [timer, timed_wait] { timer->Complete(timed_wait, WaitIdle{MonotonicNanos()}); };
    }
    absl::Status queued = Enqueue(
        [wait = std::move(wait), timer, timed_wait] {
          const uint64_t began_ns = MonotonicNanos();
          wait();
          if (timer != nullptr) {
            timer->Complete(timed_wait,
                            WaitIdle{began_ns, absl::Nanoseconds(MonotonicNanos() - began_ns)});
          }
        },
        /*even_after_failure=*/false, if_skipped);
    if (!queued.ok() && if_skipped) if_skipped();
    return queued;
  }

  // On the worker: blocks until `target` of the event completed or the
  // stream is being destroyed.
  void AwaitRecord(HostEventState* state, uint32_t target) {
    absl::Time abandon_at = absl::InfiniteFuture();
    while (true) {
      uint32_t done = state->completed_count.load(std::memory_order_acquire);
      if (HostEvent::Reached(state, target)) return;
      if (absl::Now() >= abandon_at) return;
      if (abandon_at == absl::InfiniteFuture() && Stopping()) {
        abandon_at = absl::Now() + kShutdownWaitGrace;
      }
      FutexWait(&state->completed_count, done, absl::Milliseconds(20));
    }
  }

  absl::Status failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  void Fail(absl::Status error) {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = std::move(error);
  }

  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }

  // Mostly short delays, and now and then (1 in 16) a long one: a race whose
  // window is one side's whole queue only shows when the OTHER side stalls
  // for longer than that queue takes.
  void Jitter() {
    if (jitter_us_ <= 0) return;
    std::uniform_int_distribution<int64_t> delay(0, jitter_us_);
    int64_t us = delay(rng_);
    if ((rng_() & 15) == 0) us += 20 * delay(rng_);
    absl::SleepFor(absl::Microseconds(us));
  }

  void Run() {
    while (true) {
      Op op;
      bool failed;
      {
        absl::MutexLock lock(&mu_);
        auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !queue_.empty() || stopping_;
        };
        mu_.Await(absl::Condition(&has_work));
        if (queue_.empty()) return;  // stopping, and everything issued has run
        op = std::move(queue_.front());
        queue_.pop_front();
        failed = !failure_.ok();
      }
      if (failed && !op.even_after_failure) {
        if (op.if_skipped) op.if_skipped();
        continue;
      }
      Jitter();
      op.fn();
    }
  }

  const int64_t jitter_us_;
  const absl::Duration copy_delay_;
  std::mt19937_64 rng_;  // worker thread only
  absl::Mutex mu_;
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::thread worker_;  // last: starts once the members above exist
};

// The calling thread as a stream (Device::WrapStream(nullptr)): a host
// trainer computes synchronously, so its work is done by the time it records,
// and a wait must block it until the recorder's worker got there.
class InlineHostStream final : public Stream {
 public:
  explicit InlineHostStream(absl::Duration wait_timeout) : wait_timeout_(wait_timeout) {}

  absl::Status CopyHostToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyDeviceToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Record(Event& event) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(HostEvent * host_event, AsHostEvent(event));
    HostEvent::CompleteRecord(host_event->state(), host_event->IssueRecord());
    return absl::OkStatus();
  }
  // The calling thread is the stream: its idle time is the time it blocks.
  absl::Status WaitTimed(Event& event, WaitTimer& timer) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(HostWaitTimer * host_timer, AsHostWaitTimer(timer));
    const std::shared_ptr<HostWaitTimerState>& state = host_timer->state();
    const uint64_t timed_wait = state->Issue();
    const uint64_t began_ns = MonotonicNanos();
    absl::Status waited = Wait(event);
    state->Complete(timed_wait, WaitIdle{began_ns, absl::Nanoseconds(MonotonicNanos() - began_ns)});
    return waited;
  }
  absl::Status Wait(Event& event) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(HostEvent * host_event, AsHostEvent(event));
    const HostEventState* state = host_event->state();
    uint32_t target = host_event->WaitTarget();
    absl::Status waited =
        FutexAwait(&state->completed_count, wait_timeout_,
                   [&]() -> absl::StatusOr<bool> { return HostEvent::Reached(state, target); });
    if (absl::IsDeadlineExceeded(waited)) {
      return absl::DeadlineExceededError(
          absl::StrCat("event not completed within ", absl::FormatDuration(wait_timeout_)));
    }
    return waited;
  }
  absl::Status WriteWord(StreamWords& words, size_t index, uint32_t value) override {
    BLOCKSWAP_RETURN_IF_ERROR(AsHostWords(words, index).status());
    words.word(index).store(value, std::memory_order_release);
    FutexWakeAll(&words.word(index));
    return absl::OkStatus();
  }
  absl::Status WaitWord(StreamWords& words, size_t index, uint32_t target,
                        WaitTimer* timer) override {
    BLOCKSWAP_RETURN_IF_ERROR(AsHostWords(words, index).status());
    std::shared_ptr<HostWaitTimerState> timer_state;
    if (timer != nullptr) {
      BLOCKSWAP_ASSIGN_OR_RETURN(HostWaitTimer * host_timer, AsHostWaitTimer(*timer));
      timer_state = host_timer->state();
    }
    const uint64_t timed_wait = timer_state != nullptr ? timer_state->Issue() : 0;
    const uint64_t began_ns = MonotonicNanos();
    const std::atomic<uint32_t>& word = words.word(index);
    absl::Status waited = FutexAwait(&word, wait_timeout_, [&]() -> absl::StatusOr<bool> {
      return WordReached(word.load(std::memory_order_acquire), target);
    });
    if (timer_state != nullptr) {
      timer_state->Complete(timed_wait,
                            WaitIdle{began_ns, absl::Nanoseconds(MonotonicNanos() - began_ns)});
    }
    if (absl::IsDeadlineExceeded(waited)) {
      return absl::DeadlineExceededError(
          absl::StrCat("stream word ", index, " did not reach ", target, " within ",
                       absl::FormatDuration(wait_timeout_), " (its writer may be gone)"));
    }
    return waited;
  }
  absl::Status LaunchHostFunc(std::function<void()> fn) override {
    fn();
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

 private:
  const absl::Duration wait_timeout_;
};

}  // namespace blockswap::host_internal

#endif  // BLOCKSWAP_SHARED_BACKEND_HOST_STREAM_H_
