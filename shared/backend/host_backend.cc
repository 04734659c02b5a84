// The host backend: device memory is a shared-memory mapping, a stream is a
// queue drained by a worker thread, and an event is a pair of counters — with
// CUDA's semantics (backend.h), so that every hazard of
// the load protocol exists here too and CI can catch it without a GPU.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "shared/backend/backend.h"
#include "shared/backend/host_lifetime.h"
#include "shared/base/monotonic_clock.h"
#include "shared/base/status.h"
#include "shared/os/futex.h"
#include "shared/os/shared_memory.h"

namespace blockswap {
namespace {

using host_lifetime::ImportClaim;
using host_lifetime::ImportLedger;

constexpr absl::string_view kMemoryBlob = "blockswap-host-memory-v1";
// How long a stream being destroyed still honours a wait before abandoning it
// (its peer may be dead and never record again).
constexpr absl::Duration kShutdownWaitGrace = absl::Milliseconds(200);

// An event's state. record_count is bumped when a record is ISSUED,
// completed_count set when the recording stream's worker REACHES it, so a
// wait issued now snapshots "the most recent record" exactly as CUDA does.
// Events never leave their process (backend.h), so the state is plain memory;
// the counters are still futex words (shared: a stream worker sleeps on them).
struct HostEventState {
  std::atomic<uint32_t> record_count{0};
  std::atomic<uint32_t> completed_count{0};
};

class HostEvent final : public Event {
 public:
  absl::StatusOr<bool> Query() override { return Reached(state(), WaitTarget()); }

  // Record, as issued: the new record's sequence number.
  uint32_t IssueRecord() {
    return state()->record_count.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  // Record, as reached by the recording stream: complete up to `seq`.
  static void CompleteRecord(HostEventState* state, uint32_t seq) {
    uint32_t done = state->completed_count.load(std::memory_order_relaxed);
    if (!SeqAtLeast(done, seq)) state->completed_count.store(seq, std::memory_order_release);
    FutexWakeAll(&state->completed_count);
  }
  // A wait, as issued: the record it binds to (the most recent one now).
  uint32_t WaitTarget() const { return state()->record_count.load(std::memory_order_acquire); }
  static bool Reached(const HostEventState* state, uint32_t target) {
    return SeqAtLeast(state->completed_count.load(std::memory_order_acquire), target);
  }

  // Pending stream work keeps the state alive past the event's destruction,
  // as CUDA keeps an event's resources until its work is done.
  const std::shared_ptr<HostEventState>& shared_state() const { return state_; }
  HostEventState* state() const { return state_.get(); }

 private:
  std::shared_ptr<HostEventState> state_ = std::make_shared<HostEventState>();
};

absl::StatusOr<HostEvent*> AsHostEvent(Event& event) {
  auto* host_event = dynamic_cast<HostEvent*>(&event);
  if (host_event == nullptr) return absl::InvalidArgumentError("not a host-backend event");
  return host_event;
}

// A timer's result, shared with the stream worker that measures it (the
// timer may be destroyed while its wait is still queued). `issued` counts
// timed waits issued, `measured` the ones whose result is in `last`.
struct HostWaitTimerState {
  absl::Mutex mu;
  uint64_t issued ABSL_GUARDED_BY(mu) = 0;
  uint64_t measured ABSL_GUARDED_BY(mu) = 0;
  WaitIdle last ABSL_GUARDED_BY(mu);

  uint64_t Issue() {
    absl::MutexLock lock(&mu);
    return ++issued;
  }
  // A wait that was skipped (a failed stream) still completes its
  // measurement, as zero idle, so that Await never blocks for ever.
  void Complete(uint64_t wait, WaitIdle idle) {
    absl::MutexLock lock(&mu);
    if (wait < measured) return;
    measured = wait;
    last = idle;
  }
};

class HostWaitTimer final : public WaitTimer {
 public:
  absl::StatusOr<std::optional<WaitIdle>> Poll() override {
    absl::MutexLock lock(&state_->mu);
    return Result();
  }
  absl::StatusOr<std::optional<WaitIdle>> Await() override {
    absl::MutexLock lock(&state_->mu);
    auto passed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
      return state_->measured == state_->issued;
    };
    state_->mu.Await(absl::Condition(&passed));
    return Result();
  }
  const std::shared_ptr<HostWaitTimerState>& state() const { return state_; }

 private:
  std::optional<WaitIdle> Result() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    if (state_->issued == 0 || state_->measured != state_->issued) return std::nullopt;
    return state_->last;
  }
  const std::shared_ptr<HostWaitTimerState> state_ = std::make_shared<HostWaitTimerState>();
};

absl::StatusOr<HostWaitTimer*> AsHostWaitTimer(WaitTimer& timer) {
  auto* host_timer = dynamic_cast<HostWaitTimer*>(&timer);
  if (host_timer == nullptr) return absl::InvalidArgumentError("not a host-backend wait timer");
  return host_timer;
}

// The first page of a host "device memory" object, before its bytes: who
// holds an import of it (host_lifetime.h).
struct HostMemoryHeader {
  uint32_t magic;
  uint32_t reserved;
  ImportLedger ledger;
};
constexpr uint32_t kMemoryMagic = 0x42534d45;  // "BSME"
// What device memory freed under a live importer reads as.
constexpr int kFreedMemoryPoison = 0xdb;
constexpr size_t kMemoryHeaderBytes = 4096;
static_assert(sizeof(HostMemoryHeader) <= kMemoryHeaderBytes);

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

absl::StatusOr<HostStreamWords*> AsHostWords(StreamWords& words, size_t index) {
  auto* host_words = dynamic_cast<HostStreamWords*>(&words);
  if (host_words == nullptr) return absl::InvalidArgumentError("not host-backend stream words");
  if (index >= words.count()) {
    return absl::OutOfRangeError(
        absl::StrCat("stream word ", index, " out of range (", words.count(), " words)"));
  }
  return host_words;
}

class HostMemory final : public DeviceMemory {
 public:
  // `mapping` covers the header and `size` bytes after it. `claim` is held
  // by an import, empty for the allocation itself.
  HostMemory(SharedMemory shm, Mapping mapping, size_t size, ImportClaim claim)
      : shm_(std::move(shm)), mapping_(std::move(mapping)), size_(size), claim_(std::move(claim)) {}

  // The exporter's free (cudaFree) must come after every importer's close
  // (cudaIpcCloseMemHandle). When it does not, the breach is reported, and
  // the bytes are overwritten with kFreedMemoryPoison, so that an importer
  // that still uses its mapping reads garbage, as it may on a GPU, instead of
  // memory that is quietly still there (the object's size is sealed, so it
  // cannot be cut off to make the access fault).
  ~HostMemory() override {
    if (claim_.held()) return;
    if (std::string holders = host_lifetime::MarkFreed(header().ledger); !holders.empty()) {
      host_lifetime::ReportLifetimeViolation(absl::FailedPreconditionError(
          absl::StrCat("exported device memory (", size_, " bytes) was freed while ", holders,
                       " still mapped it (the importer must close its mapping first)")));
      std::memset(data(), kFreedMemoryPoison, size_);
    }
  }

  std::byte* data() const override {
    return static_cast<std::byte*>(mapping_.data()) + kMemoryHeaderBytes;
  }
  size_t size() const override { return size_; }
  absl::StatusOr<ExportedHandle> Export() const override {
    BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd fd, shm_.fd().Duplicate());
    return ExportedHandle{std::string(kMemoryBlob), std::move(fd)};
  }

 private:
  HostMemoryHeader& header() const { return *static_cast<HostMemoryHeader*>(mapping_.data()); }

  SharedMemory shm_;
  Mapping mapping_;
  size_t size_;
  ImportClaim claim_;  // after mapping_ (its ledger): cleared first
};

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
    return Enqueue([state = host_event->shared_state(),
                    seq] { HostEvent::CompleteRecord(state.get(), seq); },
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
    return EnqueueTimed([this, state = host_event->shared_state(),
                         target] { AwaitRecord(state.get(), target); },
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
        FutexAwait(&state->completed_count, wait_timeout_, [&]() -> absl::StatusOr<bool> {
          return HostEvent::Reached(state, target);
        });
    if (absl::IsDeadlineExceeded(waited)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "event not completed within ", absl::FormatDuration(wait_timeout_)));
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

// Host memory is already "device" memory: a registration only counts its
// bytes against the device's test pin limit (HostBackendOptions).
class CountedRegistration final : public HostRegistration {
 public:
  CountedRegistration(std::shared_ptr<std::atomic<uint64_t>> pinned, uint64_t bytes)
      : pinned_(std::move(pinned)), bytes_(bytes) {}
  ~CountedRegistration() override { pinned_->fetch_sub(bytes_, std::memory_order_relaxed); }

 private:
  const std::shared_ptr<std::atomic<uint64_t>> pinned_;
  const uint64_t bytes_;
};

// Plain memory standing in for the driver's pinned memory, charged to the
// device's pin limit as a registration of its size is. The memory is freed
// before the charge is returned.
class HostPinnedBuffer final : public PinnedHostBuffer {
 public:
  HostPinnedBuffer(std::unique_ptr<HostRegistration> charge, void* data, size_t bytes)
      : charge_(std::move(charge)), data_(static_cast<std::byte*>(data)), size_(bytes) {}
  HostPinnedBuffer(const HostPinnedBuffer&) = delete;
  HostPinnedBuffer& operator=(const HostPinnedBuffer&) = delete;
  ~HostPinnedBuffer() override { ::munmap(data_, size_); }

  std::byte* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  const std::unique_ptr<HostRegistration> charge_;
  std::byte* const data_;
  const size_t size_;
};

// A trainer's own ring on the host backend: plain memory of this process.
class HostPrivateMemory final : public DeviceMemory {
 public:
  HostPrivateMemory(void* data, size_t size) : data_(static_cast<std::byte*>(data)), size_(size) {}
  HostPrivateMemory(const HostPrivateMemory&) = delete;
  HostPrivateMemory& operator=(const HostPrivateMemory&) = delete;
  ~HostPrivateMemory() override { ::munmap(data_, size_); }

  std::byte* data() const override { return data_; }
  size_t size() const override { return size_; }
  absl::StatusOr<ExportedHandle> Export() const override {
    return absl::FailedPreconditionError("private device memory cannot be exported");
  }

 private:
  std::byte* const data_;
  const size_t size_;
};

class HostDevice final : public Device {
 public:
  HostDevice(int index, const HostBackendOptions& options)
      : jitter_us_(options.jitter_us),
        copy_delay_(absl::Microseconds(options.copy_delay_us)),
        without_stream_words_(options.without_stream_words),
        pin_limit_bytes_(options.pin_limit_bytes) {
    info_.uuid = absl::StrCat("HOST-", index);
    info_.name = absl::StrCat("blockswap host device ", index);
    info_.total_memory_bytes =
        static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  }

  const DeviceInfo& info() const override { return info_; }

  // The host's memory is this device's memory.
  absl::StatusOr<uint64_t> FreeMemoryBytes() override {
    std::ifstream meminfo("/proc/meminfo");
    std::string line;
    uint64_t kib = 0;
    while (std::getline(meminfo, line)) {
      if (std::sscanf(line.c_str(), "MemAvailable: %" SCNu64 " kB", &kib) == 1) return kib * 1024;
    }
    return absl::UnavailableError("/proc/meminfo has no MemAvailable line");
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    size_t size = RoundUp(bytes, static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
    BLOCKSWAP_ASSIGN_OR_RETURN(
        SharedMemory shm,
        SharedMemory::Create(absl::StrCat(info_.uuid, "-ring"), kMemoryHeaderBytes + size));
    // Pre-faulted, as device memory is committed when allocated: otherwise
    // the first copy into each page pays a fault and the page's zeroing on
    // the copy path (measured by tests/bench: about a quarter of the copy
    // worker's CPU time while a fresh 128 MiB ring fills).
    BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, shm.Map(Access::kReadWrite, /*populate=*/true));
    auto* header = static_cast<HostMemoryHeader*>(mapping.data());
    header->magic = kMemoryMagic;
    host_lifetime::InitializeLedger(header->ledger);
    return std::make_unique<HostMemory>(std::move(shm), std::move(mapping), size, ImportClaim());
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> AllocatePrivate(size_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes of device memory");
    // Pre-faulted, as Allocate's.
    void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (data == MAP_FAILED) {
      return ErrnoStatus(errno,
                         absl::StrCat("allocating ", bytes, " bytes of device memory on ", info_.uuid));
    }
    return std::make_unique<HostPrivateMemory>(data, bytes);
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> ImportMemory(ExportedHandle handle,
                                                             size_t bytes) override {
    if (handle.blob != kMemoryBlob || !handle.fd.valid()) {
      return absl::InvalidArgumentError("not a host-backend memory handle");
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(
        SharedMemory shm, SharedMemory::Adopt(std::move(handle.fd), kMemoryHeaderBytes + bytes));
    BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, shm.Map(Access::kReadWrite));
    auto* header = static_cast<HostMemoryHeader*>(mapping.data());
    if (header->magic != kMemoryMagic) {
      return absl::InvalidArgumentError("host-backend memory handle has a bad magic number");
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ImportClaim claim,
                               ImportClaim::Claim(header->ledger, "device memory"));
    return std::make_unique<HostMemory>(std::move(shm), std::move(mapping), bytes,
                                        std::move(claim));
  }

  absl::Status memory_export_status() override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return std::make_unique<HostEvent>();
  }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return std::make_unique<HostStream>(jitter_us_, copy_delay_);
  }
  absl::StatusOr<std::unique_ptr<WaitTimer>> CreateWaitTimer() override {
    return std::make_unique<HostWaitTimer>();
  }
  absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void* native,
                                                     absl::Duration wait_timeout) override {
    if (native != nullptr) {
      return absl::InvalidArgumentError(
          "the host backend has no native streams: pass a null stream (the calling thread)");
    }
    return std::make_unique<InlineHostStream>(wait_timeout);
  }
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHostMemory(void*,
                                                                       size_t bytes) override {
    uint64_t held = pinned_->load(std::memory_order_relaxed);
    do {
      if (pin_limit_bytes_ != 0 && (bytes > pin_limit_bytes_ || held > pin_limit_bytes_ - bytes)) {
        return absl::ResourceExhaustedError(absl::StrCat(
            info_.uuid, " refused to pin ", bytes, " bytes: ", held, " of ", pin_limit_bytes_,
            " are pinned (its test pin limit, as a small RLIMIT_MEMLOCK)"));
      }
    } while (!pinned_->compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
    return std::make_unique<CountedRegistration>(pinned_, bytes);
  }
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterReadOnlyHostMemory(
      const void*, size_t bytes) override {
    return RegisterHostMemory(nullptr, bytes);
  }
  absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> AllocatePinnedHostBuffer(
      size_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes of pinned memory");
    BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<HostRegistration> charge,
                               RegisterHostMemory(nullptr, bytes));
    void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (data == MAP_FAILED) {
      return ErrnoStatus(
          errno, absl::StrCat("allocating ", bytes, " bytes of pinned memory on ", info_.uuid));
    }
    return std::make_unique<HostPinnedBuffer>(std::move(charge), data, bytes);
  }
  absl::StatusOr<std::unique_ptr<StreamWords>> MapStreamWords(Mapping mapping) override {
    if (without_stream_words_) {
      return absl::FailedPreconditionError(absl::StrCat(
          info_.uuid, " has no stream memory operations (a test device without stream words)"));
    }
    if (mapping.data() == nullptr || mapping.size() < sizeof(uint32_t)) {
      return absl::InvalidArgumentError("stream words need a mapping of at least one word");
    }
    return std::make_unique<HostStreamWords>(std::move(mapping));
  }

  absl::Status stream_words_status() const override {
    if (!without_stream_words_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(info_.uuid, " has no stream words (a test device without them)"));
  }
  absl::Status health() const override { return absl::OkStatus(); }
  absl::Status UseOnThisThread() override { return absl::OkStatus(); }  // one address space

 private:
  DeviceInfo info_;
  const int64_t jitter_us_;
  const absl::Duration copy_delay_;
  const bool without_stream_words_;
  const uint64_t pin_limit_bytes_;
  // Bytes registered now; shared with the registrations, which may outlive
  // the device in a test.
  const std::shared_ptr<std::atomic<uint64_t>> pinned_ = std::make_shared<std::atomic<uint64_t>>(0);
};

class HostBackend final : public Backend {
 public:
  explicit HostBackend(const HostBackendOptions& options) {
    for (int i = 0; i < options.device_count; ++i) {
      devices_.push_back(std::make_unique<HostDevice>(i, options));
    }
  }
  BackendKind kind() const override { return BackendKind::kHost; }
  const std::vector<std::unique_ptr<Device>>& devices() const override { return devices_; }

 private:
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace

std::unique_ptr<Backend> OpenHostBackend(const HostBackendOptions& options) {
  return std::make_unique<HostBackend>(options);
}

}  // namespace blockswap
