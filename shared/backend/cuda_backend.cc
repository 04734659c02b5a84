// The cuda backend: the Backend interface (backend.h) over the CUDA runtime
// API, and the plumbing of cuda_check.h.
//
// Only the runtime is used, linked statically (CUDA::cudart_static), which
// dlopen()s libcuda.so.1 on first use: a binary built with CUDA still starts on
// a machine without a driver, where OpenCudaBackend says so and the host
// backend serves. No driver API (cu*) function is called, so nothing links
// libcuda.
//
// Ownership: each class below owns one CUDA handle (or, for a host
// registration, one set of pinned ranges) and releases it in its destructor.
// They are handed out only through the unique_ptrs of backend.h, so they are
// neither copyable nor movable themselves. Each holds a reference to its
// device's DeviceHealth, which the CudaDevice owns: that is why every object
// must be destroyed before its Device (backend.h). Every operation fails first
// with the device's sticky error, if any, and reports its own errors through
// it; every runtime call that acts on a device runs inside a ScopedDevice.

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "shared/backend/backend.h"
#include "shared/backend/cuda_check.h"
#include "shared/base/monotonic_clock.h"
#include "shared/os/shared_memory.h"
#include "shared/base/status.h"

namespace blockswap {
namespace cuda_internal {

bool IsStickyCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorUnknown:
      return true;
    default:
      break;
  }
  // Also sticky, named by number because older toolkits lack the names:
  // cudaErrorContained, cudaErrorTensorMemoryLeak, cudaErrorMpsClientTerminated,
  // cudaErrorExternalDevice.
  switch (static_cast<int>(error)) {
    case 226:
    case 721:
    case 810:
    case 911:
      return true;
    default:
      return false;
  }
}

namespace {

absl::StatusCode CodeFor(cudaError_t error) {
  if (IsStickyCudaError(error)) return absl::StatusCode::kInternal;
  switch (error) {
    case cudaErrorMemoryAllocation:
    case cudaErrorTooManyPeers:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidHostPointer:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidResourceHandle:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorHostMemoryAlreadyRegistered:
      return absl::StatusCode::kAlreadyExists;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemNotReady:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
    case cudaErrorHostMemoryNotRegistered:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorNotSupported:
      return absl::StatusCode::kUnimplemented;
    case cudaErrorNotPermitted:
      return absl::StatusCode::kPermissionDenied;
    case cudaErrorTimeout:
      return absl::StatusCode::kDeadlineExceeded;
    case cudaErrorNotReady:
    case cudaErrorCudartUnloading:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudaErrorStatus(cudaError_t error, const char* expr, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::Status(CodeFor(error),
                      absl::StrCat(expr, " failed at ", file, ":", line, ": ",
                                   cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

std::string FormatGpuUuid(const cudaUUID_t& uuid) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    auto byte = static_cast<unsigned char>(uuid.bytes[i]);
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xf]);
  }
  return out;
}

absl::Status DeviceHealth::status() const {
  absl::MutexLock lock(&mu_);
  return sticky_;
}

absl::Status DeviceHealth::Check(cudaError_t error, const char* expr, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  absl::Status status = CudaErrorStatus(error, expr, file, line);
  if (!IsStickyCudaError(error)) {
    (void)cudaGetLastError();
    return Annotate(status, absl::StrCat("on ", label_));
  }
  absl::MutexLock lock(&mu_);
  // The first sticky error is the cause; later ones are its echoes.
  if (sticky_.ok()) {
    sticky_ = Annotate(status, absl::StrCat(label_,
                                            " is unusable until this process restarts, "
                                            "after a sticky CUDA error"));
  }
  return sticky_;
}

absl::Status CheckCuda(DeviceHealth* health, cudaError_t error, const char* expr, const char* file,
                       int line) {
  if (health != nullptr) return health->Check(error, expr, file, line);
  if (error != cudaSuccess && !IsStickyCudaError(error)) (void)cudaGetLastError();
  return CudaErrorStatus(error, expr, file, line);
}

absl::StatusOr<ScopedDevice> ScopedDevice::Enter(DeviceHealth& health) {
  BLOCKSWAP_RETURN_IF_ERROR(health.status());
  int previous = 0;
  BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health, cudaGetDevice(&previous));
  if (previous == health.ordinal()) return ScopedDevice(kNothingToRestore);
  BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health, cudaSetDevice(health.ordinal()));
  return ScopedDevice(previous);
}

ScopedDevice ScopedDevice::EnterForCleanup(DeviceHealth& health) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) {
    (void)cudaGetLastError();
    return ScopedDevice(kNothingToRestore);
  }
  if (previous == health.ordinal()) return ScopedDevice(kNothingToRestore);
  if (cudaSetDevice(health.ordinal()) != cudaSuccess) {
    (void)cudaGetLastError();
    return ScopedDevice(kNothingToRestore);
  }
  return ScopedDevice(previous);
}

ScopedDevice::ScopedDevice(ScopedDevice&& other) noexcept
    : restore_(std::exchange(other.restore_, kNothingToRestore)) {}

ScopedDevice::~ScopedDevice() {
  if (restore_ == kNothingToRestore) return;
  // Nothing to report to: the caller's own next call on that device will.
  if (cudaSetDevice(restore_) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace cuda_internal

namespace {

using cuda_internal::DeviceHealth;
using cuda_internal::ScopedDevice;

// Pointers in messages, as printf's %p would print them.
std::string AddressString(const void* address) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(address)));
}

// What every CUDA IPC handle is on the wire: its raw bytes, no descriptor.
template <typename Handle>
ExportedHandle ExportBytes(const Handle& handle) {
  ExportedHandle exported;
  exported.blob.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return exported;
}

template <typename Handle>
absl::StatusOr<Handle> ParseHandle(const ExportedHandle& exported, const char* what) {
  Handle handle;
  if (exported.blob.size() != sizeof(handle)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " handle has ", exported.blob.size(),
                                                   " bytes; a CUDA IPC handle has ",
                                                   sizeof(handle)));
  }
  std::memcpy(&handle, exported.blob.data(), sizeof(handle));
  return handle;
}

// Device memory allocated here (exportable) or imported from another process.
class CudaDeviceMemory final : public DeviceMemory {
 public:
  enum class Origin { kAllocated, kImported };

  CudaDeviceMemory(DeviceHealth& health, void* data, size_t size, Origin origin)
      : health_(health), data_(static_cast<std::byte*>(data)), size_(size), origin_(origin) {}
  CudaDeviceMemory(const CudaDeviceMemory&) = delete;
  CudaDeviceMemory& operator=(const CudaDeviceMemory&) = delete;

  // Freeing memory that another process still has mapped is undefined
  // (cudaIpcOpenMemHandle); the owner of a ring destroys it only once every
  // importer has closed it or died.
  ~CudaDeviceMemory() override {
    ScopedDevice guard = ScopedDevice::EnterForCleanup(health_);
    if (origin_ == Origin::kAllocated) {
      (void)BLOCKSWAP_CUDA_STATUS(&health_, cudaFree(data_));
    } else {
      (void)BLOCKSWAP_CUDA_STATUS(&health_, cudaIpcCloseMemHandle(data_));
    }
  }

  std::byte* data() const override { return data_; }
  size_t size() const override { return size_; }

  absl::StatusOr<ExportedHandle> Export() const override {
    if (origin_ == Origin::kImported) {
      return absl::FailedPreconditionError(
          absl::StrCat("device memory imported from another process cannot be exported again (on ",
                       health_.label(), ")"));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    cudaIpcMemHandle_t handle;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaIpcGetMemHandle(&handle, data_));
    return ExportBytes(handle);
  }

 private:
  DeviceHealth& health_;
  std::byte* const data_;
  const size_t size_;
  const Origin origin_;
};

// An interprocess event created here (exportable) or imported.
class CudaEvent final : public Event {
 public:
  CudaEvent(DeviceHealth& health, cudaEvent_t event, bool exportable)
      : health_(health), event_(event), exportable_(exportable) {}
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  ~CudaEvent() override {
    ScopedDevice guard = ScopedDevice::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, cudaEventDestroy(event_));
  }

  absl::StatusOr<bool> Query() override {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    cudaError_t error = cudaEventQuery(event_);
    if (error == cudaErrorNotReady) {
      // "Not yet" is an answer, not an error; keep it out of the thread's
      // last-error slot, where PyTorch would find it.
      (void)cudaGetLastError();
      return false;
    }
    BLOCKSWAP_RETURN_IF_ERROR(health_.Check(error, "cudaEventQuery(event_)", __FILE__, __LINE__));
    return true;
  }

  absl::StatusOr<ExportedHandle> Export() const override {
    if (!exportable_) {
      return absl::FailedPreconditionError(
          absl::StrCat("an event imported from another process cannot be exported again (on ",
                       health_.label(), ")"));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    cudaIpcEventHandle_t handle;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaIpcGetEventHandle(&handle, event_));
    return ExportBytes(handle);
  }

  cudaEvent_t get() const { return event_; }
  const DeviceHealth& health() const { return health_; }

 private:
  DeviceHealth& health_;
  const cudaEvent_t event_;
  const bool exportable_;
};

absl::StatusOr<CudaEvent*> AsCudaEvent(Event& event) {
  auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
  if (cuda_event == nullptr) {
    return absl::InvalidArgumentError(
        "the event does not belong to the cuda backend (events of another backend cannot "
        "be used on a cuda stream)");
  }
  return cuda_event;
}

// Places a completed timing event of one device on CLOCK_MONOTONIC: an
// anchor event, recorded on a private idle stream and synchronised, is read
// against the host clock right after; an event's host time is the anchor's
// plus cudaEventElapsedTime between them. Re-anchored every few seconds, as
// the elapsed time is a float of milliseconds (its resolution coarsens with
// distance) and the two clocks drift. Thread-safe; owned by its CudaDevice.
class CudaClockAnchor {
 public:
  static absl::StatusOr<std::unique_ptr<CudaClockAnchor>> Create(DeviceHealth& health) {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health));
    cudaStream_t stream = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health,
                                   cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t event = nullptr;
    absl::Status created = BLOCKSWAP_CUDA_STATUS(&health, cudaEventCreate(&event));
    if (!created.ok()) {
      (void)BLOCKSWAP_CUDA_STATUS(&health, cudaStreamDestroy(stream));
      return created;
    }
    return std::unique_ptr<CudaClockAnchor>(new CudaClockAnchor(health, stream, event));
  }
  CudaClockAnchor(const CudaClockAnchor&) = delete;
  CudaClockAnchor& operator=(const CudaClockAnchor&) = delete;

  ~CudaClockAnchor() {
    ScopedDevice guard = ScopedDevice::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, cudaEventDestroy(event_));
    (void)BLOCKSWAP_CUDA_STATUS(&health_, cudaStreamDestroy(stream_));
  }

  // CLOCK_MONOTONIC when `completed` (a completed timing event of this
  // device) completed. The caller is inside a ScopedDevice of the device.
  absl::StatusOr<uint64_t> HostNanosOf(cudaEvent_t completed) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (anchored_ns_ == 0 || MonotonicNanos() - anchored_ns_ > kReanchorNanos) {
      BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaEventRecord(event_, stream_));
      BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaEventSynchronize(event_));
      anchored_ns_ = MonotonicNanos();
    }
    float ms = 0;  // negative for an event that completed before the anchor
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaEventElapsedTime(&ms, event_, completed));
    return static_cast<uint64_t>(static_cast<int64_t>(anchored_ns_) +
                                 static_cast<int64_t>(static_cast<double>(ms) * 1e6));
  }

 private:
  static constexpr uint64_t kReanchorNanos = uint64_t{5} * 1000000000u;

  CudaClockAnchor(DeviceHealth& health, cudaStream_t stream, cudaEvent_t event)
      : health_(health), stream_(stream), event_(event) {}

  DeviceHealth& health_;
  const cudaStream_t stream_;
  const cudaEvent_t event_;
  absl::Mutex mu_;
  uint64_t anchored_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

// Two timing events (cudaEventCreate's default flags: timing on) recorded
// just before and just after the stream's wait: the time between their
// completions is how long the stream sat at the wait, exactly as the
// reference offloader measures its compute stream's stall.
class CudaWaitTimer final : public WaitTimer {
 public:
  static absl::StatusOr<std::unique_ptr<CudaWaitTimer>> Create(DeviceHealth& health,
                                                               CudaClockAnchor& anchor) {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health));
    cudaEvent_t start = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health, cudaEventCreate(&start));
    cudaEvent_t end = nullptr;
    absl::Status created = BLOCKSWAP_CUDA_STATUS(&health, cudaEventCreate(&end));
    if (!created.ok()) {
      (void)BLOCKSWAP_CUDA_STATUS(&health, cudaEventDestroy(start));
      return created;
    }
    return std::unique_ptr<CudaWaitTimer>(new CudaWaitTimer(health, anchor, start, end));
  }
  CudaWaitTimer(const CudaWaitTimer&) = delete;
  CudaWaitTimer& operator=(const CudaWaitTimer&) = delete;

  // CUDA releases an event whose record is pending once the record is done.
  ~CudaWaitTimer() override {
    ScopedDevice guard = ScopedDevice::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, cudaEventDestroy(start_));
    (void)BLOCKSWAP_CUDA_STATUS(&health_, cudaEventDestroy(end_));
  }

  absl::StatusOr<std::optional<WaitIdle>> Poll() override {
    if (!issued_) return std::nullopt;
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    cudaError_t error = cudaEventQuery(end_);
    if (error == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not yet" is an answer (as in CudaEvent::Query)
      return std::nullopt;
    }
    BLOCKSWAP_RETURN_IF_ERROR(health_.Check(error, "cudaEventQuery(end_)", __FILE__, __LINE__));
    return Measured();
  }

  absl::StatusOr<std::optional<WaitIdle>> Await() override {
    if (!issued_) return std::nullopt;
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaEventSynchronize(end_));
    return Measured();
  }

  // The wait itself, between the two records (on the stream's device, as
  // the caller's ScopedDevice has it).
  absl::Status RecordAround(cudaStream_t stream, cudaEvent_t awaited) {
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaEventRecord(start_, stream));
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaStreamWaitEvent(stream, awaited, 0));
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaEventRecord(end_, stream));
    issued_ = true;
    return absl::OkStatus();
  }

  const DeviceHealth& health() const { return health_; }

 private:
  CudaWaitTimer(DeviceHealth& health, CudaClockAnchor& anchor, cudaEvent_t start, cudaEvent_t end)
      : health_(health), anchor_(anchor), start_(start), end_(end) {}

  // Both events have completed (the stream runs in order).
  absl::StatusOr<std::optional<WaitIdle>> Measured() {
    float ms = 0;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaEventElapsedTime(&ms, start_, end_));
    BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t began_ns, anchor_.HostNanosOf(start_));
    return WaitIdle{began_ns, absl::Nanoseconds(static_cast<int64_t>(ms * 1e6))};
  }

  DeviceHealth& health_;
  CudaClockAnchor& anchor_;
  const cudaEvent_t start_;
  const cudaEvent_t end_;
  bool issued_ = false;  // a wait was timed: the events have records
};

// Runs on a CUDA runtime thread. noexcept: an exception must not unwind into
// the runtime's C frames; it terminates here instead.
void CUDART_CB RunHostFunction(void* user_data) noexcept {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(user_data));
  (*fn)();
}

class CudaStream final : public Stream {
 public:
  // `owned`: this object created the stream and destroys it; a wrapped
  // caller's stream (Device::WrapStream) is neither synchronized nor
  // destroyed here.
  CudaStream(DeviceHealth& health, cudaStream_t stream, bool owned = true)
      : health_(health), stream_(stream), owned_(owned) {}
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  // Destroying a stream with work in flight would let that work outlive the
  // memory and events it uses (the caller frees them next), so wait first.
  // On a poisoned device both calls return at once with the sticky error.
  ~CudaStream() override {
    if (!owned_) return;
    ScopedDevice guard = ScopedDevice::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, cudaStreamSynchronize(stream_));
    (void)BLOCKSWAP_CUDA_STATUS(&health_, cudaStreamDestroy(stream_));
  }

  absl::Status CopyHostToDevice(void* device_dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(
        &health_, cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  }

  absl::Status CopyDeviceToHost(void* host_dst, const void* device_src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(
        &health_, cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
  }

  absl::Status Record(Event& event) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(CudaEvent * cuda_event, AsCudaEvent(event));
    // cudaEventRecord needs the event and the stream in one context; say so
    // instead of passing on cudaErrorInvalidResourceHandle.
    if (&cuda_event->health() != &health_) {
      return absl::InvalidArgumentError(absl::StrCat("cannot record an event of ",
                                                     cuda_event->health().label(),
                                                     " on a stream of ", health_.label()));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(&health_, cudaEventRecord(cuda_event->get(), stream_));
  }

  // The event may belong to another device: cudaStreamWaitEvent allows it.
  absl::Status Wait(Event& event) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(CudaEvent * cuda_event, AsCudaEvent(event));
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(&health_, cudaStreamWaitEvent(stream_, cuda_event->get(), 0));
  }

  absl::Status WaitTimed(Event& event, WaitTimer& timer) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(CudaEvent * cuda_event, AsCudaEvent(event));
    auto* cuda_timer = dynamic_cast<CudaWaitTimer*>(&timer);
    if (cuda_timer == nullptr || &cuda_timer->health() != &health_) {
      return absl::InvalidArgumentError(absl::StrCat("a wait on a stream of ", health_.label(),
                                                     " can only be timed by a timer of ",
                                                     health_.label()));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    return cuda_timer->RecordAround(stream_, cuda_event->get());
  }

  // The function is owned by the runtime from a successful launch on and
  // freed after it ran. The runtime does not call host functions once the
  // device's context has failed, so on a poisoned device a pending function
  // (and what it captured) is leaked rather than run.
  absl::Status LaunchHostFunc(std::function<void()> fn) override {
    if (!fn) return absl::InvalidArgumentError("LaunchHostFunc needs a function to run");
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    auto owned = std::make_unique<std::function<void()>>(std::move(fn));
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_,
                                   cudaLaunchHostFunc(stream_, &RunHostFunction, owned.get()));
    (void)owned.release();  // RunHostFunction owns it now
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(&health_, cudaStreamSynchronize(stream_));
  }

 private:
  DeviceHealth& health_;
  const cudaStream_t stream_;
  const bool owned_;
};

// One or more pinned pieces of one host range (kHostRegisterChunkBytes).
class CudaHostRegistration final : public HostRegistration {
 public:
  CudaHostRegistration(DeviceHealth& health, size_t chunk_count) : health_(health) {
    // Reserved up front so that recording a piece that is already pinned
    // cannot fail and leak it.
    chunks_.reserve(chunk_count);
  }
  CudaHostRegistration(const CudaHostRegistration&) = delete;
  CudaHostRegistration& operator=(const CudaHostRegistration&) = delete;

  ~CudaHostRegistration() override {
    if (chunks_.empty()) return;
    ScopedDevice guard = ScopedDevice::EnterForCleanup(health_);
    for (auto it = chunks_.rbegin(); it != chunks_.rend(); ++it) {
      (void)BLOCKSWAP_CUDA_STATUS(&health_, cudaHostUnregister(*it));
    }
  }

  // Pins one piece; it is unpinned when this registration dies, also when a
  // later piece fails.
  absl::Status Pin(void* chunk, size_t bytes) {
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_,
                                   cudaHostRegister(chunk, bytes, cudaHostRegisterPortable));
    chunks_.push_back(chunk);
    return absl::OkStatus();
  }

 private:
  DeviceHealth& health_;
  std::vector<void*> chunks_;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, DeviceInfo info)
      : info_(std::move(info)),
        health_(ordinal, absl::StrCat("cuda:", ordinal, " (", info_.uuid, ")")) {}
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  const DeviceInfo& info() const override { return info_; }
  absl::Status health() const override { return health_.status(); }

  // Not a ScopedDevice: the thread keeps the device, so that every guard on
  // it finds the device current and switches nothing (nor creates a context
  // on GPU 0 by restoring the device 0 a fresh thread reports).
  absl::Status UseOnThisThread() override {
    BLOCKSWAP_RETURN_IF_ERROR(health_.status());
    return BLOCKSWAP_CUDA_STATUS(&health_, cudaSetDevice(health_.ordinal()));
  }

  // A plain cudaMalloc per ring: memory from a pool or a sub-allocator could
  // not be exported on its own (cudaIpcGetMemHandle takes an allocation's
  // base).
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    constexpr size_t kGranularity = cuda_internal::kAllocationGranularityBytes;
    if (bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot allocate 0 bytes of device memory on ", health_.label()));
    }
    if (bytes > SIZE_MAX - kGranularity) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot allocate ", bytes, " bytes of device memory on ", health_.label(),
                       ": the size overflows when rounded up to ", kGranularity));
    }
    size_t rounded = RoundUp(bytes, kGranularity);
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    void* data = nullptr;
    absl::Status status = BLOCKSWAP_CUDA_STATUS(&health_, cudaMalloc(&data, rounded));
    if (!status.ok()) {
      return Annotate(status, absl::StrCat("allocating ", rounded, " bytes (", bytes,
                                           " rounded up to ", kGranularity, ")"));
    }
    return std::make_unique<CudaDeviceMemory>(health_, data, rounded,
                                              CudaDeviceMemory::Origin::kAllocated);
  }

  absl::StatusOr<uint64_t> FreeMemoryBytes() override {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    size_t free_bytes = 0, total_bytes = 0;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<uint64_t>(free_bytes);
  }

  // Mapped on this device; memory of another device is reached through peer
  // access, enabled on demand (cudaIpcMemLazyEnablePeerAccess). The handle
  // cannot be opened in the process that exported it.
  absl::StatusOr<std::unique_ptr<DeviceMemory>> ImportMemory(ExportedHandle handle,
                                                             size_t bytes) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(auto ipc_handle,
                               ParseHandle<cudaIpcMemHandle_t>(handle, "device memory"));
    if (bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot import 0 bytes of device memory on ", health_.label()));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    void* data = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(
        &health_, cudaIpcOpenMemHandle(&data, ipc_handle, cudaIpcMemLazyEnablePeerAccess));
    // Owned from here on: closed again if the size check fails.
    auto memory = std::make_unique<CudaDeviceMemory>(health_, data, bytes,
                                                     CudaDeviceMemory::Origin::kImported);
    BLOCKSWAP_RETURN_IF_ERROR(CheckBacked(data, bytes));
    return memory;
  }

  absl::StatusOr<std::unique_ptr<Event>> CreateInterprocessEvent() override {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    cudaEvent_t event = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(
        &health_, cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming));
    return std::make_unique<CudaEvent>(health_, event, /*exportable=*/true);
  }

  // The importer must stop using the event before its creator destroys it
  // (or dies): that is undefined in CUDA. Hence the daemon creates every
  // event and never imports one (DESIGN §2).
  absl::StatusOr<std::unique_ptr<Event>> ImportEvent(ExportedHandle handle) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(auto ipc_handle, ParseHandle<cudaIpcEventHandle_t>(handle, "event"));
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    cudaEvent_t event = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cudaIpcOpenEventHandle(&event, ipc_handle));
    return std::make_unique<CudaEvent>(health_, event, /*exportable=*/false);
  }

  // Non-blocking: the legacy default stream, which PyTorch and others use,
  // must not serialise with the backend's copies.
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    cudaStream_t stream = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_,
                                   cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return std::make_unique<CudaStream>(health_, stream);
  }

  absl::StatusOr<std::unique_ptr<WaitTimer>> CreateWaitTimer() override {
    CudaClockAnchor* anchor = nullptr;
    {
      absl::MutexLock lock(&anchor_mu_);
      if (clock_anchor_ == nullptr) {
        BLOCKSWAP_ASSIGN_OR_RETURN(clock_anchor_, CudaClockAnchor::Create(health_));
      }
      anchor = clock_anchor_.get();
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(auto timer, CudaWaitTimer::Create(health_, *anchor));
    return std::unique_ptr<WaitTimer>(std::move(timer));
  }

  absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void* native, absl::Duration) override {
    BLOCKSWAP_RETURN_IF_ERROR(health_.status());
    return std::make_unique<CudaStream>(health_, static_cast<cudaStream_t>(native),
                                        /*owned=*/false);
  }

  // cudaHostRegisterPortable pins the range for every device of the process,
  // so one registration through any device serves them all; registering the
  // same range again (through another device) fails with ALREADY_EXISTS. The
  // range is pinned in pieces of kHostRegisterChunkBytes, and one copy must
  // not span two pieces (cuda_check.h). A range of more than one piece must
  // start on a page boundary, so that no page belongs to two pieces.
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHostMemory(void* data,
                                                                       size_t bytes) override {
    constexpr size_t kChunk = cuda_internal::kHostRegisterChunkBytes;
    if (data == nullptr || bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot pin ", bytes, " bytes at ",
                                                     AddressString(data), " (an empty range)"));
    }
    if (bytes > kChunk) {
      auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
      if (reinterpret_cast<uintptr_t>(data) % page != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot pin ", bytes, " bytes at ", AddressString(data), ": a range of more than ",
            kChunk, " bytes is pinned in pieces and must start on a ", page,
            "-byte page boundary"));
      }
    }
    size_t chunk_count = (bytes - 1) / kChunk + 1;
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedDevice guard, ScopedDevice::Enter(health_));
    auto registration = std::make_unique<CudaHostRegistration>(health_, chunk_count);
    auto* base = static_cast<std::byte*>(data);
    for (size_t offset = 0; offset < bytes; offset += kChunk) {
      size_t length = std::min(kChunk, bytes - offset);
      absl::Status status = registration->Pin(base + offset, length);
      if (!status.ok()) {
        return Annotate(status, absl::StrCat("pinning bytes [", offset, ", ", offset + length,
                                             ") of ", bytes, " at ", AddressString(data)));
      }
    }
    return registration;
  }

 private:
  // The runtime API cannot tell how much an IPC mapping spans, so this checks
  // what it can: that the last announced byte lies in device memory. It
  // catches an announcement longer than the exporter's allocation unless
  // another device mapping happens to follow it directly.
  absl::Status CheckBacked(void* data, size_t bytes) {
    const void* last = static_cast<const std::byte*>(data) + (bytes - 1);
    cudaPointerAttributes attributes{};
    cudaError_t error = cudaPointerGetAttributes(&attributes, last);
    if (error == cudaErrorInvalidValue) {
      (void)cudaGetLastError();  // an address CUDA does not know: not backed
    } else {
      BLOCKSWAP_RETURN_IF_ERROR(
          health_.Check(error, "cudaPointerGetAttributes(&attributes, last)", __FILE__, __LINE__));
    }
    if (error != cudaSuccess || attributes.type != cudaMemoryTypeDevice) {
      return absl::InvalidArgumentError(
          absl::StrCat("the imported device memory does not span the announced ", bytes,
                       " bytes (on ", health_.label(), ")"));
    }
    return absl::OkStatus();
  }

  const DeviceInfo info_;
  DeviceHealth health_;
  // Shared by the device's wait timers, created with the first of them.
  absl::Mutex anchor_mu_;
  std::unique_ptr<CudaClockAnchor> clock_anchor_ ABSL_GUARDED_BY(anchor_mu_);
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::vector<std::unique_ptr<Device>> devices)
      : devices_(std::move(devices)) {}

  BackendKind kind() const override { return BackendKind::kCuda; }
  const std::vector<std::unique_ptr<Device>>& devices() const override { return devices_; }

 private:
  const std::vector<std::unique_ptr<Device>> devices_;
};

// "13.0" for 13000.
std::string CudaVersionString(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

// Why cudaGetDeviceCount found nothing to drive, as FAILED_PRECONDITION when
// this machine simply has no usable GPU (the host backend may serve), else the
// error itself.
absl::Status NoDeviceStatus(cudaError_t error) {
  absl::Status status =
      cuda_internal::CheckCuda(nullptr, error, "cudaGetDeviceCount(&count)", __FILE__, __LINE__);
  if (error == cudaErrorNoDevice) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device visible",
        visible != nullptr ? absl::StrCat(" (CUDA_VISIBLE_DEVICES=\"", visible, "\")") : "", ": ",
        status.message()));
  }
  if (error == cudaErrorInsufficientDriver) {
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) (void)cudaGetLastError();
    if (driver == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("no CUDA driver (libcuda.so.1 could not be loaded): ", status.message()));
    }
    int runtime = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA driver supports CUDA ", CudaVersionString(driver),
                     ", older than the runtime blockswap was built with (",
                     CudaVersionString(runtime), "): ", status.message()));
  }
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> OpenCudaBackend() {
  // Left untouched when the call fails, hence initialised (DESIGN §6).
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return NoDeviceStatus(error);
  if (count == 0) return absl::FailedPreconditionError("CUDA reports 0 devices");

  std::vector<std::unique_ptr<Device>> devices;
  devices.reserve(static_cast<size_t>(count));
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    cudaDeviceProp prop{};
    absl::Status status = BLOCKSWAP_CUDA_STATUS(nullptr, cudaGetDeviceProperties(&prop, ordinal));
    if (!status.ok()) {
      return Annotate(status, absl::StrCat("reading the properties of cuda:", ordinal));
    }
    DeviceInfo info;
    info.uuid = cuda_internal::FormatGpuUuid(prop.uuid);
    info.name = std::string(prop.name, strnlen(prop.name, sizeof(prop.name)));
    info.total_memory_bytes = prop.totalGlobalMem;
    // Devices are found by UUID on the wire; two with one UUID would make
    // that ambiguous.
    for (const auto& other : devices) {
      if (other->info().uuid == info.uuid) {
        return absl::FailedPreconditionError(
            absl::StrCat("cuda:", ordinal, " reports the UUID ", info.uuid,
                         " of an earlier device; devices could not be told apart"));
      }
    }
    devices.push_back(std::make_unique<CudaDevice>(ordinal, std::move(info)));
  }
  return std::make_unique<CudaBackend>(std::move(devices));
}

}  // namespace blockswap
