// The device backend: the one narrow interface through which the daemon and
// the client touch a device (docs/backends.md).
//
// Two implementations:
//   cuda  the real one (cuda_backend.cc), used whenever a GPU is present;
//   host  shared-memory "device memory" and worker-thread streams
//         (host_backend.cc), with CUDA's event semantics, so that the load
//         protocol's hazards are real without a GPU.
//
// Semantics every implementation keeps (they are CUDA's):
// - Work on one Stream runs in issue order, asynchronously to the caller.
// - Event::Query() is true once everything captured by the most recent
//   Record() has completed (and for an event never recorded).
// - Stream::Wait(event) binds to the record that exists WHEN THE WAIT IS
//   ISSUED; a later Record() does not affect it. This is why the protocol
//   orders records and waits on the host (load_protocol.h).
// Every object created by a Device must be destroyed before that Device.
#ifndef BLOCKSWAP_SHARED_BACKEND_BACKEND_H_
#define BLOCKSWAP_SHARED_BACKEND_BACKEND_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "shared/base/unique_fd.h"
#include "shared/os/shared_memory.h"

namespace blockswap {

// RegisterHostMemory pins a range in pieces of at most this size, piece k
// covering [data + k * kHostPinPieceBytes, ...) (very large single
// registrations fail or stall on some systems). A single copy must stay
// inside one piece: the driver looks a copy's host range up in ONE
// registration, and a copy that straddles two may be treated as pageable
// (staged through a bounce buffer, not one DMA). The model store places
// blocks so that none straddles a piece boundary.
inline constexpr uint64_t kHostPinPieceBytes = uint64_t{64} << 30;

enum class BackendKind { kHost, kCuda };
absl::string_view BackendKindName(BackendKind kind);

struct DeviceInfo {
  std::string uuid;  // "GPU-..." on cuda, "HOST-<n>" on host; never an ordinal
  std::string name;
  uint64_t total_memory_bytes = 0;
};

// What crosses a process boundary for exported device memory: a descriptor,
// sent over SCM_RIGHTS (fd_passing.h), since only a descriptor reaches a
// process of another uid (cuda: a VMM allocation's POSIX descriptor; host: a
// shared-memory object), and opaque bytes that the backend may add.
struct ExportedHandle {
  std::string blob;
  UniqueFd fd;
};

// An event of this process (cuda: CU_EVENT_DISABLE_TIMING). Events never
// cross processes: the driver lets only a process of the creator's uid open
// an IPC event, so signals between processes are memory words
// (docs/protocol.md, "Users").
class Event {
 public:
  virtual ~Event() = default;
  // True when the work captured by the most recent record has completed.
  virtual absl::StatusOr<bool> Query() = 0;
};

// Device memory: one allocation, or one imported from another process.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // The device address (cuda) or the host address (host).
  virtual std::byte* data() const = 0;
  virtual size_t size() const = 0;
  virtual absl::StatusOr<ExportedHandle> Export() const = 0;
};

// Host memory made visible to the device's copy engines (pinned); undone on
// destruction. The registered memory must outlive this object.
class HostRegistration {
 public:
  virtual ~HostRegistration() = default;
};

// Host memory that the device's driver allocates already pinned (cuda:
// cuMemAllocHost), so that it needs no host registration (RegisterHostMemory),
// which some devices and platforms refuse. Private to this process; freed on
// destruction, which must come after every copy issued from or to it has
// completed. Made by Device::AllocatePinnedHostBuffer.
class PinnedHostBuffer {
 public:
  virtual ~PinnedHostBuffer() = default;
  virtual std::byte* data() const = 0;
  virtual size_t size() const = 0;
};

// 32-bit words in host memory, shared between processes, that a stream can
// write once its earlier work is done (Stream::WriteWord) and wait on
// (Stream::WaitWord), and that any thread can write with a plain store: on
// cuda the driver's stream memory operations (cuStreamWriteValue32 /
// cuStreamWaitValue32) on memory registered for the device. A wait on a word
// is released by whoever writes it — unlike a wait on another process's
// event, which only that process can complete — so a client can release its
// own stream when the daemon that was to write the word died
// (docs/protocol.md, "A dead daemon"). Owns the mapping it was made of;
// work queued on a stream keeps it alive where the backend can (host).
class StreamWords {
 public:
  virtual ~StreamWords() = default;
  virtual size_t count() const = 0;
  // The host's view of word `index` (< count()).
  virtual std::atomic<uint32_t>& word(size_t index) const = 0;
};

// Whether `value` has reached `target` in serial-number order, as
// cuStreamWaitValue32's CU_STREAM_WAIT_VALUE_GEQ compares:
// (int32_t)(value - target) >= 0.
inline bool WordReached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

// How long a stream sat idle at one wait: from when the stream reached the
// wait until the event's record completed (the reference offloader's "GPU
// stall", measured on the stream, not on the thread that issued the wait).
struct WaitIdle {
  uint64_t began_ns = 0;  // CLOCK_MONOTONIC when the stream reached the wait
  absl::Duration idle = absl::ZeroDuration();
};

// Measures the stream's idle time at the waits issued with it
// (Stream::WaitTimed), one at a time: each timed wait replaces the previous
// measurement, so a timer is reused once its result has been read. Created by
// a Device, used with streams of that device; one thread issues and reads
// (the one that issues the stream's work). On cuda a pair of timing events
// around the wait; on host the stream worker's (or the waiting caller's)
// clock. May be destroyed with its wait still pending.
class WaitTimer {
 public:
  virtual ~WaitTimer() = default;
  // The last timed wait's idle time once the stream has passed the wait;
  // nullopt while it has not (or when no wait was timed yet). Never blocks.
  virtual absl::StatusOr<std::optional<WaitIdle>> Poll() = 0;
  // The same, blocking until the stream has passed the last timed wait.
  virtual absl::StatusOr<std::optional<WaitIdle>> Await() = 0;
};

// An in-order work queue. Not thread-safe: one thread issues work on a
// stream. Destroying a stream waits for the work already issued, except for
// waits on words nobody will write any more, which are abandoned.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual absl::Status CopyHostToDevice(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual absl::Status CopyDeviceToHost(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual absl::Status Record(Event& event) = 0;
  // Later work on this stream waits for `event`'s record as of NOW.
  virtual absl::Status Wait(Event& event) = 0;
  // Wait(event), measuring in `timer` how long this stream sits idle at it.
  // `timer` (of this stream's device) must not be reused before the stream
  // has passed this wait or its result has been read.
  virtual absl::Status WaitTimed(Event& event, WaitTimer& timer) = 0;
  // Once the work issued before it has completed, stores `value` in word
  // `index` of `words` (registered for this stream's device), with the
  // earlier work's writes visible before the word.
  virtual absl::Status WriteWord(StreamWords& words, size_t index, uint32_t value) = 0;
  // Later work on this stream waits until word `index` of `words` has reached
  // `target` (WordReached), whoever writes it; with `timer` (may be null)
  // measuring the idle time as WaitTimed does.
  virtual absl::Status WaitWord(StreamWords& words, size_t index, uint32_t target,
                                WaitTimer* timer) = 0;
  // Runs `fn` on a backend thread once all earlier work has completed; later
  // work waits for it. `fn` must not call into the backend.
  virtual absl::Status LaunchHostFunc(std::function<void()> fn) = 0;
  // Blocks the caller until all issued work has completed.
  virtual absl::Status Synchronize() = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;

  // Ring memory: `bytes` rounded up to the backend's export granularity.
  // Fails with memory_export_status() on a device that cannot export it.
  virtual absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) = 0;
  // Device memory only this process uses (a trainer's own ring, filled by
  // its own copies): cuda cuMemAlloc, which needs no virtual memory
  // management, so it works on every device; Export() fails.
  virtual absl::StatusOr<std::unique_ptr<DeviceMemory>> AllocatePrivate(size_t bytes) = 0;
  // OK where this device's memory can reach another process, of any uid, as
  // a descriptor; else FAILED_PRECONDITION saying why (cuda: naming the
  // device attribute it lacks: virtual memory management or POSIX
  // descriptors). Asked once, then remembered. Thread-safe.
  virtual absl::Status memory_export_status() = 0;
  // Bytes of device memory free now, for every process (cuda:
  // cudaMemGetInfo; host: the host's MemAvailable, since its "device
  // memory" is host memory). Advisory: others allocate too.
  virtual absl::StatusOr<uint64_t> FreeMemoryBytes() = 0;
  // Maps memory exported by another process, of any uid. `bytes` is what the
  // exporter announced; the import fails if the handle cannot back that many
  // (cuda: it must be the allocation's whole size). The mapping keeps the
  // memory alive after the exporter freed it or died.
  virtual absl::StatusOr<std::unique_ptr<DeviceMemory>> ImportMemory(ExportedHandle handle,
                                                                     size_t bytes) = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;
  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream() = 0;
  virtual absl::StatusOr<std::unique_ptr<WaitTimer>> CreateWaitTimer() = 0;
  // A non-owning view of the caller's own stream, so that the protocol's
  // records and waits are ordered against the caller's work: on cuda
  // `native` is a cudaStream_t (nullptr is the legacy default stream); on
  // host it must be nullptr and means "the calling thread": work runs inline,
  // a record completes at once, and a wait blocks the caller (at most
  // `wait_timeout`, then DEADLINE_EXCEEDED).
  virtual absl::StatusOr<std::unique_ptr<Stream>> WrapStream(
      void* native, absl::Duration wait_timeout = absl::Seconds(30)) = 0;
  // Makes the words of `mapping` (a read-write shared mapping, typically of
  // a memfd that another process maps too) usable by this device's streams
  // (WriteWord, WaitWord). FAILED_PRECONDITION, saying why, where the device
  // has no working stream memory operations (cuda: a real write-and-wait
  // round trip, probed at the first call on the device, failed): the ring
  // goes without ready words, and the client waits on the host instead.
  virtual absl::StatusOr<std::unique_ptr<StreamWords>> MapStreamWords(Mapping mapping) = 0;
  // What MapStreamWords has found out so far: OK while stream words work or
  // have not been tried on this device yet; otherwise its
  // FAILED_PRECONDITION. Thread-safe.
  virtual absl::Status stream_words_status() const = 0;
  // Pins [data, data + bytes) for copies to every device of the backend.
  // cuda: UNIMPLEMENTED, saying the device cannot register host memory, where
  // the driver refuses registration itself (CUDA_ERROR_NOT_SUPPORTED: the
  // device or platform has no host registration, whatever the locked-memory
  // limit); AllocatePinnedHostBuffer still works there.
  virtual absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHostMemory(void* data,
                                                                               size_t bytes) = 0;
  // Pins memory this process maps read-only (a client's view of the daemon's
  // masters) for copies from it, never to it (cuda:
  // CU_MEMHOSTREGISTER_READ_ONLY, which the driver needs to pin a read-only
  // mapping). One piece of at most kHostPinPieceBytes. UNIMPLEMENTED, saying
  // why, on a device without CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED
  // or one that cannot register host memory at all.
  virtual absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterReadOnlyHostMemory(
      const void* data, size_t bytes) = 0;
  // `bytes` (> 0) of host memory pinned by the driver for this device's
  // copies (cuda: cuMemAllocHost in this device's context; host: plain memory,
  // counted against pin_limit_bytes like a registration), touched so that the
  // first copy pays no page faults.
  virtual absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> AllocatePinnedHostBuffer(
      size_t bytes) = 0;
  // The sticky error that poisoned this device (OK while healthy): once a
  // device has failed, every later request for it fails with this error.
  virtual absl::Status health() const = 0;
  // Makes this device the calling thread's current device for good (cuda:
  // one cudaSetDevice, never undone; host: nothing), so that the backend's
  // scoped device switches on the thread switch nothing, on every call.
  // Only for a thread the caller owns and gives to this device (a daemon's
  // device worker), never for a trainer's thread, whose device is its own.
  virtual absl::Status UseOnThisThread() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // In a stable order; owned by the backend.
  virtual const std::vector<std::unique_ptr<Device>>& devices() const = 0;
  // The driver this backend runs on and the lowest it needs, for the daemon's
  // start line and Attach ("CUDA driver 12.4; blockswap needs 11.7 or
  // later"); empty for the host backend.
  virtual std::string driver() const { return ""; }

  // The device with this UUID, or FAILED_PRECONDITION naming the devices this
  // backend drives (no silent fallback to another device).
  absl::StatusOr<Device*> FindDevice(absl::string_view uuid) const;
};

enum class BackendChoice { kAuto, kHost, kCuda };
absl::StatusOr<BackendChoice> ParseBackendChoice(absl::string_view name);

struct HostBackendOptions {
  // Simulated devices, named HOST-0 .. HOST-<count-1>.
  int device_count = 1;
  // Scale of the random delay before each operation of a stream worker
  // (usually up to jitter_us, 1 in 16 times up to 21x that); zero disables
  // it. A test switch that shakes out ordering bugs.
  int64_t jitter_us = 0;
  // A test switch: each host-to-device copy of a stream worker takes at least
  // this long, so that a test can act while a copy is in flight.
  int64_t copy_delay_us = 0;
  // A test switch: the devices have no stream memory operations
  // (MapStreamWords fails), as some GPUs and drivers do.
  bool without_stream_words = false;
  // A test switch: each device pins at most this many bytes at once
  // (RegisterHostMemory and AllocatePinnedHostBuffer beyond it fail, as cudaHostRegister does under
  // a small RLIMIT_MEMLOCK or on a mapping the driver refuses), so that the daemon's fallback to
  // staged copies runs in CI. 0: no limit.
  uint64_t pin_limit_bytes = 0;
  // device_count from BLOCKSWAP_HOST_DEVICES, where set. In a build with test
  // hooks (shared/base/test_hooks.h) also jitter_us from
  // BLOCKSWAP_HOST_JITTER_US, copy_delay_us from BLOCKSWAP_HOST_COPY_DELAY_US,
  // without_stream_words from BLOCKSWAP_HOST_NO_STREAM_WORDS=1 and
  // pin_limit_bytes from BLOCKSWAP_HOST_PIN_LIMIT_BYTES; elsewhere these keep
  // their defaults.
  static HostBackendOptions FromEnvironment();
};

// kAuto: cuda when this build has it and a usable GPU exists; host on a
// machine with no GPU at all (gpu_presence.h); FAILED_PRECONDITION naming the
// GPU and the reason when one is present but cannot be driven.
// kCuda: FAILED_PRECONDITION with the reason when no GPU can be driven.
absl::StatusOr<std::unique_ptr<Backend>> OpenBackend(
    BackendChoice choice, const HostBackendOptions& host_options = HostBackendOptions());

std::unique_ptr<Backend> OpenHostBackend(const HostBackendOptions& options);
#if BLOCKSWAP_HAVE_CUDA
// The cuda backend over the GPUs this process sees; FAILED_PRECONDITION with
// the reason when there is none (no driver, no device).
absl::StatusOr<std::unique_ptr<Backend>> OpenCudaBackend();
#endif

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BACKEND_BACKEND_H_
