// The private plumbing of the cuda backend (cuda_backend.cc): turning a
// cudaError_t into an absl::Status, the per-device sticky error, and the
// scoped device switch. Built only with BLOCKSWAP_HAVE_CUDA; it includes
// cuda_runtime.h, so nothing outside the cuda backend and its tests includes
// it.
#ifndef BLOCKSWAP_SHARED_BACKEND_CUDA_CHECK_H_
#define BLOCKSWAP_SHARED_BACKEND_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "shared/backend/backend.h"
#include "shared/base/status.h"

// The status of the CUDA runtime call `expr`: OK on cudaSuccess, otherwise an
// error naming the expression, file:line, cudaGetErrorName and
// cudaGetErrorString. `health` is the DeviceHealth* of the device the call
// acted on: a sticky error poisons it (see DeviceHealth). Pass nullptr for
// calls that act on no particular device (enumeration).
#define BLOCKSWAP_CUDA_STATUS(health, expr) \
  ::blockswap::cuda_internal::CheckCuda((health), (expr), #expr, __FILE__, __LINE__)

// Returns BLOCKSWAP_CUDA_STATUS(health, expr) from the enclosing function
// unless it is OK.
#define BLOCKSWAP_CUDA_RETURN_IF_ERROR(health, expr) \
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_CUDA_STATUS(health, expr))

namespace blockswap::cuda_internal {

// Device memory is allocated in multiples of this. IPC mappings are made in
// units of the device's large page, so a rounded size is exactly what the
// importer's mapping backs, and an announced size can be checked against it.
inline constexpr size_t kAllocationGranularityBytes = size_t{2} << 20;

// One cudaHostRegister per piece of the backend's pinning piece size.
inline constexpr size_t kHostRegisterChunkBytes = kHostPinPieceBytes;

// True for the errors after which the CUDA context of the device is unusable
// for the rest of the process (the runtime documents them as "the process
// must be terminated and relaunched", plus uncorrectable ECC/NVLink and
// unknown errors, where nothing else is safe to assume).
bool IsStickyCudaError(cudaError_t error);

// The status for `error` raised by `expr` at file:line (OK on cudaSuccess).
// The code follows the error: out of memory is RESOURCE_EXHAUSTED, a bad
// argument INVALID_ARGUMENT, no driver/device FAILED_PRECONDITION, sticky
// errors INTERNAL.
absl::Status CudaErrorStatus(cudaError_t error, const char* expr, const char* file, int line);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lowercase, as nvidia-smi prints
// a GPU's UUID. It is the same in every process whatever CUDA_VISIBLE_DEVICES
// says, which is why devices are named by it on the wire. (A MIG instance is
// printed with the same "GPU-" prefix, not nvidia-smi's "MIG-": the runtime
// API cannot tell them apart; daemon and client agree either way.)
std::string FormatGpuUuid(const cudaUUID_t& uuid);

// The health of one device in this process: OK until a sticky error is seen
// on it, then that first sticky error for good. Every object the device
// creates holds a pointer to it, checks it before each operation and reports
// errors through it. Thread-safe.
class DeviceHealth {
 public:
  // `label` names the device in every error message ("cuda:0 (GPU-...)").
  DeviceHealth(int ordinal, std::string label) : ordinal_(ordinal), label_(std::move(label)) {}
  DeviceHealth(const DeviceHealth&) = delete;
  DeviceHealth& operator=(const DeviceHealth&) = delete;

  int ordinal() const { return ordinal_; }
  const std::string& label() const { return label_; }

  // OK while healthy, else the sticky error that poisoned the device.
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);

  // The status of `error` (see BLOCKSWAP_CUDA_STATUS), prefixed with the
  // device's label. A sticky error poisons the device; after that, the first
  // sticky error is returned, not `error`. A non-sticky error is also cleared
  // from the runtime's per-thread "last error", so that code sharing the
  // process (PyTorch checks cudaGetLastError after its launches) does not
  // mistake it for its own.
  absl::Status Check(cudaError_t error, const char* expr, const char* file, int line)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int ordinal_;
  const std::string label_;
  mutable absl::Mutex mu_;
  absl::Status sticky_ ABSL_GUARDED_BY(mu_);
};

// What BLOCKSWAP_CUDA_STATUS expands to.
absl::Status CheckCuda(DeviceHealth* health, cudaError_t error, const char* expr, const char* file,
                       int line);

// Makes a device current on the calling thread for the guard's lifetime and
// then restores the thread's previous device, so that the backend never
// changes the current device under its caller (the client library runs inside
// a trainer that has chosen its own device). Switches nothing when the device
// is already current. Move-only; use on one thread.
//
// Caveat: since CUDA 12 cudaSetDevice initialises the device's primary
// context. A thread that never chose a device reports device 0, so a guard
// used on such a thread restores device 0 and thereby creates a context
// (hundreds of MiB) on GPU 0. Threads that call the backend should first make
// their own device current; then no guard switches anything. A thread given
// to one device (the daemon's device worker) does that once at its start
// with Device::UseOnThisThread.
class ScopedDevice {
 public:
  // Fails with the device's sticky error when it is poisoned, before touching
  // the device, or with the error of the switch.
  static absl::StatusOr<ScopedDevice> Enter(DeviceHealth& health);
  // For destructors, which release their handle whatever happens: switches
  // when it can, ignores the device's health and any error.
  static ScopedDevice EnterForCleanup(DeviceHealth& health);

  ScopedDevice(ScopedDevice&& other) noexcept;
  ScopedDevice& operator=(ScopedDevice&&) = delete;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice();

 private:
  static constexpr int kNothingToRestore = -1;
  explicit ScopedDevice(int restore) : restore_(restore) {}
  int restore_ = kNothingToRestore;
};

}  // namespace blockswap::cuda_internal

#endif  // BLOCKSWAP_SHARED_BACKEND_CUDA_CHECK_H_
