// The stand-in driver's machinery: settings, reports, stream workers, event
// completion. See standin.h for the model.
#include "tests/standin_driver/standin.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

namespace blockswap::standin {
namespace {

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  long long parsed = std::strtoll(value, &end, 10);
  if (end == value || *end != '\0' || parsed < 0) {
    std::fprintf(stderr, "stand-in CUDA driver: ignoring %s=\"%s\" (not a number >= 0)\n", name,
                 value);
    return fallback;
  }
  return parsed;
}

Settings ReadSettings() {
  Settings settings;
  settings.device_count = static_cast<int>(EnvInt("BLOCKSWAP_STANDIN_DEVICES", 1));
  settings.driver_version =
      static_cast<int>(EnvInt("BLOCKSWAP_STANDIN_DRIVER_VERSION", CUDA_VERSION));
  settings.jitter_us = EnvInt("BLOCKSWAP_STANDIN_JITTER_US", 0);
  settings.copy_delay_us = EnvInt("BLOCKSWAP_STANDIN_COPY_DELAY_US", 0);
  settings.memory_bytes = static_cast<uint64_t>(
      EnvInt("BLOCKSWAP_STANDIN_MEMORY_BYTES", static_cast<int64_t>(settings.memory_bytes)));
  settings.host_register = EnvInt("BLOCKSWAP_STANDIN_HOST_REGISTER", 1) != 0;
  settings.stream_mem_ops = EnvInt("BLOCKSWAP_STANDIN_STREAM_MEM_OPS", 1) != 0;
  settings.ipc_mem_any_uid = EnvInt("BLOCKSWAP_STANDIN_IPC_MEM_ANY_UID", 0) != 0;
  settings.vmm = EnvInt("BLOCKSWAP_STANDIN_VMM", 1) != 0;
  settings.vmm_same_uid_only = EnvInt("BLOCKSWAP_STANDIN_VMM_SAME_UID_ONLY", 0) != 0;
  const char* violations = std::getenv("BLOCKSWAP_STANDIN_VIOLATIONS");
  settings.abort_on_violation = violations != nullptr && std::strcmp(violations, "abort") == 0;
  if (const char* sticky = std::getenv("BLOCKSWAP_STANDIN_STICKY_AT"); sticky != nullptr) {
    int device = -1;
    long long at = 0;
    if (std::sscanf(sticky, "%d:%lld", &device, &at) == 2 && device >= 0 && at > 0) {
      settings.sticky_device = device;
      settings.sticky_at_copy = at;
    } else {
      std::fprintf(stderr,
                   "stand-in CUDA driver: ignoring BLOCKSWAP_STANDIN_STICKY_AT=\"%s\" "
                   "(expected DEVICE:N, N >= 1)\n",
                   sticky);
    }
  }
  return settings;
}

thread_local bool in_host_function = false;

long Futex(const std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Shared (no FUTEX_PRIVATE_FLAG): the word may live in another process's
  // mapping of the same file.
  return ::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), op, value, timeout,
                   nullptr, 0);
}

bool SeqAtLeast(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) >= 0; }

void WorkerLoop(CUstream_st* stream) {
  while (true) {
    std::function<void()> op;
    {
      std::unique_lock<std::mutex> lock(stream->mu);
      stream->cv.wait(lock, [&] { return !stream->queue.empty() || stream->destroyed; });
      if (stream->queue.empty()) return;  // destroyed, and everything issued has run
      op = std::move(stream->queue.front());
      stream->queue.pop_front();
    }
    // A context poisoned by a sticky error runs nothing more (its work
    // "fails"); the stream still drains, so that a synchronize returns the error.
    if (stream->ctx->sticky.load(std::memory_order_acquire) == CUDA_SUCCESS) {
      Jitter();
      op();
    }
    {
      std::lock_guard<std::mutex> lock(stream->mu);
      ++stream->completed;
    }
    stream->cv.notify_all();
  }
}

// An operation that holds its stream until `other` has run the work issued
// on it before `count`.
std::function<void()> AwaitStream(CUstream_st* other, uint64_t count) {
  return [other, count] {
    std::unique_lock<std::mutex> lock(other->mu);
    other->cv.wait(lock, [&] { return other->completed >= count; });
  };
}

}  // namespace

const Settings& GetSettings() {
  static const Settings* settings = new Settings(ReadSettings());
  return *settings;
}

namespace {
std::mutex violation_mu;
int violation_count = 0;        // guarded by violation_mu
std::string* last_violation = new std::string;  // guarded by violation_mu
}  // namespace

void ReportViolation(const std::string& what) {
  const bool abort = GetSettings().abort_on_violation;
  std::fprintf(stderr, "stand-in CUDA driver (pid %d): CUDA rule broken: %s%s\n",
               static_cast<int>(::getpid()), what.c_str(),
               abort ? " (BLOCKSWAP_STANDIN_VIOLATIONS=abort: aborting)" : "");
  std::fflush(stderr);
  {
    std::lock_guard<std::mutex> lock(violation_mu);
    ++violation_count;
    *last_violation = what;
  }
  if (abort) std::abort();
}

int ViolationCount() {
  std::lock_guard<std::mutex> lock(violation_mu);
  return violation_count;
}

std::string LastViolation() {
  std::lock_guard<std::mutex> lock(violation_mu);
  return *last_violation;
}

Driver& GetDriver() {
  static Driver* driver = new Driver;
  return *driver;
}

bool InHostFunction() { return in_host_function; }
void SetInHostFunction(bool value) { in_host_function = value; }

uint64_t MonotonicNs() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);
}

// Mostly short delays, and now and then (1 in 16) a long one, as the host
// backend's: a race whose window is one side's whole queue only shows when
// the other side stalls for longer than that queue takes.
void Jitter() {
  const int64_t jitter_us = GetSettings().jitter_us;
  if (jitter_us <= 0) return;
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> delay(0, jitter_us);
  int64_t us = delay(rng);
  if ((rng() & 15) == 0) us += 20 * delay(rng);
  ::usleep(static_cast<useconds_t>(us));
}

CUstream_st* CreateStream(Context* ctx, bool non_blocking, bool legacy) {
  auto* stream = new CUstream_st;
  stream->ctx = ctx;
  stream->non_blocking = non_blocking;
  stream->legacy = legacy;
  stream->worker = std::thread(WorkerLoop, stream);
  stream->worker.detach();
  if (!legacy) {
    std::lock_guard<std::mutex> lock(GetDriver().mu);
    ctx->streams.push_back(stream);
  }
  return stream;
}

void Enqueue(CUstream_st* stream, std::function<void()> op) {
  // CUDA's legacy NULL stream: its work waits for the work issued before on
  // every blocking stream of the context, and a blocking stream's work waits
  // for the NULL stream's earlier work. Non-blocking streams do neither.
  std::vector<std::function<void()>> before;
  if (stream->legacy) {
    std::lock_guard<std::mutex> lock(GetDriver().mu);
    for (CUstream_st* other : stream->ctx->streams) {
      if (other->non_blocking) continue;
      std::lock_guard<std::mutex> other_lock(other->mu);
      if (other->completed < other->issued) before.push_back(AwaitStream(other, other->issued));
    }
  } else if (!stream->non_blocking) {
    CUstream_st* legacy = stream->ctx->legacy_stream;
    std::lock_guard<std::mutex> lock(legacy->mu);
    if (legacy->completed < legacy->issued) before.push_back(AwaitStream(legacy, legacy->issued));
  }
  {
    std::lock_guard<std::mutex> lock(stream->mu);
    for (auto& wait : before) {
      stream->queue.push_back(std::move(wait));
      ++stream->issued;
    }
    stream->queue.push_back(std::move(op));
    ++stream->issued;
  }
  stream->cv.notify_all();
}

void Synchronize(CUstream_st* stream) {
  std::unique_lock<std::mutex> lock(stream->mu);
  const uint64_t target = stream->issued;
  stream->cv.wait(lock, [&] { return stream->completed >= target; });
}

bool Idle(CUstream_st* stream) {
  std::lock_guard<std::mutex> lock(stream->mu);
  return stream->completed >= stream->issued;
}

void ReleaseStream(CUstream_st* stream) {
  {
    std::lock_guard<std::mutex> lock(GetDriver().mu);
    auto& streams = stream->ctx->streams;
    for (auto it = streams.begin(); it != streams.end(); ++it) {
      if (*it == stream) {
        streams.erase(it);
        break;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(stream->mu);
    stream->destroyed = true;
  }
  stream->cv.notify_all();
  // The stream object itself is never freed: work queued on other streams
  // may still wait for it (AwaitStream), and its worker drains it
  // asynchronously, as cuStreamDestroy lets the device finish.
}

void SynchronizeContext(Context* ctx) {
  std::vector<CUstream_st*> streams;
  {
    std::lock_guard<std::mutex> lock(GetDriver().mu);
    streams = ctx->streams;
  }
  streams.push_back(ctx->legacy_stream);
  for (CUstream_st* stream : streams) Synchronize(stream);
}

bool EventComplete(const EventState& state) {
  return SeqAtLeast(state.completed.load(std::memory_order_acquire),
                    state.records.load(std::memory_order_acquire));
}

void CompleteRecord(EventState& state, uint32_t generation) {
  state.completed_ns.store(MonotonicNs(), std::memory_order_relaxed);
  uint32_t current = state.completed.load(std::memory_order_relaxed);
  while (!SeqAtLeast(current, generation) &&
         !state.completed.compare_exchange_weak(current, generation, std::memory_order_acq_rel)) {
  }
  Futex(&state.completed, FUTEX_WAKE, INT32_MAX, nullptr);
}

void AwaitRecord(const EventState& state, uint32_t target) {
  bool reported = false;
  while (true) {
    const uint32_t current = state.completed.load(std::memory_order_acquire);
    if (SeqAtLeast(current, target)) return;
    // A record issued by a process that has exited never completes: on a GPU
    // this stream would wait for ever (nobody else can record that event's
    // pending record). Said once; the wait goes on, as on a GPU.
    const uint64_t recorder = state.last_recorder.load(std::memory_order_acquire);
    if (!reported && recorder != 0 && !host_lifetime::Alive(recorder)) {
      reported = true;
      ReportViolation("a stream waits on an event record issued by pid " +
                      std::to_string(static_cast<uint32_t>(recorder)) +
                      ", which has exited before the record completed: the wait never ends");
    }
    timespec timeout{0, 5 * 1000 * 1000};
    Futex(&state.completed, FUTEX_WAIT, current, &timeout);
  }
}

Allocation::~Allocation() {
  claim.reset();  // clears this import's ledger entry, which lives in the mapping
  if (mapping != nullptr) ::munmap(mapping, mapping_size);
}

PhysicalMemory::~PhysicalMemory() {
  if (charged != nullptr) charged->allocated_bytes.fetch_sub(size);
  if (fd >= 0) ::close(fd);
}

EventMemory::~EventMemory() {
  if (mapping != nullptr) {
    ::munmap(mapping, mapping_size);
  } else {
    delete state;
  }
}

}  // namespace blockswap::standin
