// The private plumbing of the cuda backend (cuda_backend.cc): turning a
// CUresult into an absl::Status, the per-device sticky error, each device's
// primary context and the scoped guard that makes it current. Built only with
// BLOCKSWAP_HAVE_CUDA; nothing outside the cuda backend and its tests
// includes it.
#ifndef BLOCKSWAP_SHARED_BACKEND_CUDA_CHECK_H_
#define BLOCKSWAP_SHARED_BACKEND_CUDA_CHECK_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "shared/backend/backend.h"
#include "shared/backend/cuda_driver.h"
#include "shared/base/status.h"

// The status of the driver call `expr` (a CUresult): OK on CUDA_SUCCESS,
// otherwise an error naming the expression, file:line, and the driver's
// cuGetErrorName and cuGetErrorString. `health` is the DeviceHealth* of the
// device the call acted on: a sticky error poisons it (see DeviceHealth).
// Pass nullptr for calls that act on no particular device (enumeration).
#define BLOCKSWAP_CUDA_STATUS(health, expr) \
  ::blockswap::cuda_internal::CheckCuda((health), (expr), #expr, __FILE__, __LINE__)

// Returns BLOCKSWAP_CUDA_STATUS(health, expr) from the enclosing function
// unless it is OK.
#define BLOCKSWAP_CUDA_RETURN_IF_ERROR(health, expr) \
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_CUDA_STATUS(health, expr))

namespace blockswap::cuda_internal {

// One cuMemHostRegister per piece of the backend's pinning piece size.
inline constexpr size_t kHostRegisterChunkBytes = kHostPinPieceBytes;

// True for the errors after which the device's context is unusable for the
// rest of the process: those the driver API documents as "the process must
// be terminated and relaunched" (illegal address, launch timeout, assert,
// hardware stack error, illegal instruction, misaligned address, invalid
// address space, invalid PC, launch failed, tensor memory leak, MPS client
// terminated, contained, external device), plus uncorrectable ECC/NVLink and
// unknown errors, where nothing else is safe to assume.
bool IsStickyCudaError(CUresult error);

// The status for `error` raised by `expr` at file:line (OK on CUDA_SUCCESS).
// The code follows the error: out of memory is RESOURCE_EXHAUSTED, a bad
// argument INVALID_ARGUMENT, no driver/device FAILED_PRECONDITION, sticky
// errors INTERNAL.
absl::Status CudaErrorStatus(CUresult error, const char* expr, const char* file, int line);

// The primary context of one device (the one PyTorch's runtime uses, so
// torch's streams and blockswap's events and memory live in one context):
// retained once per process per device while any holder lives, released with
// the last holder. Thread-safe.
class PrimaryContext {
 public:
  static absl::StatusOr<std::shared_ptr<const PrimaryContext>> Acquire(CUdevice device,
                                                                       int ordinal);
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  ~PrimaryContext();

  CUcontext get() const { return context_; }

 private:
  PrimaryContext(CUdevice device, CUcontext context) : device_(device), context_(context) {}
  const CUdevice device_;
  const CUcontext context_;
};

// The health of one device in this process: OK until a sticky error is seen
// on it, then that first sticky error for good. Every object the device
// creates holds a reference to it, checks it before each operation and
// reports errors through it. It also names the device's primary context,
// which ScopedContext makes current. Thread-safe.
class DeviceHealth {
 public:
  // `label` names the device in every error message ("cuda:0 (GPU-...)").
  DeviceHealth(int ordinal, std::string label, const CudaDriverTable& cu, CUcontext context)
      : ordinal_(ordinal), label_(std::move(label)), cu_(cu), context_(context) {}
  DeviceHealth(const DeviceHealth&) = delete;
  DeviceHealth& operator=(const DeviceHealth&) = delete;

  int ordinal() const { return ordinal_; }
  const std::string& label() const { return label_; }
  // The driver's entry points.
  const CudaDriverTable& cu() const { return cu_; }
  CUcontext context() const { return context_; }

  // OK while healthy, else the sticky error that poisoned the device.
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);

  // The status of `error` (see BLOCKSWAP_CUDA_STATUS), prefixed with the
  // device's label. A sticky error poisons the device; after that, the first
  // sticky error is returned, not `error`.
  absl::Status Check(CUresult error, const char* expr, const char* file, int line)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int ordinal_;
  const std::string label_;
  const CudaDriverTable& cu_;
  const CUcontext context_;
  mutable absl::Mutex mu_;
  absl::Status sticky_ ABSL_GUARDED_BY(mu_);
};

// What BLOCKSWAP_CUDA_STATUS expands to.
absl::Status CheckCuda(DeviceHealth* health, CUresult error, const char* expr, const char* file,
                       int line);

// Makes a device's primary context current on the calling thread for the
// guard's lifetime, then restores exactly the context that was current
// before — including none at all — so that the backend never changes the
// context under its caller (the client library runs inside a trainer that
// has chosen its own device) and no thread is left with a context on a
// device it did not ask for. Switches nothing when the context is already
// current. Move-only; use on one thread.
class ScopedContext {
 public:
  // Fails with the device's sticky error when it is poisoned, before touching
  // the device, or with the error of the switch.
  static absl::StatusOr<ScopedContext> Enter(DeviceHealth& health);
  // For destructors, which release their handle whatever happens: switches
  // when it can, ignores the device's health and any error.
  static ScopedContext EnterForCleanup(DeviceHealth& health);

  ScopedContext(ScopedContext&& other) noexcept;
  ScopedContext& operator=(ScopedContext&&) = delete;
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
  ~ScopedContext();

 private:
  ScopedContext(const CudaDriverTable* cu, CUcontext previous) : cu_(cu), previous_(previous) {}
  // Null when there is nothing to restore.
  const CudaDriverTable* cu_ = nullptr;
  CUcontext previous_ = nullptr;
};

}  // namespace blockswap::cuda_internal

#endif  // BLOCKSWAP_SHARED_BACKEND_CUDA_CHECK_H_
