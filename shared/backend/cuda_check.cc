#include "shared/backend/cuda_check.h"

#include <cuda.h>

#include <map>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "shared/backend/cuda_driver.h"
#include "shared/base/status.h"

namespace blockswap::cuda_internal {

bool IsStickyCudaError(CUresult error) {
  switch (error) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_UNKNOWN:
      return true;
    default:
      break;
  }
  // Also sticky, named by number because older toolkits lack the names:
  // CUDA_ERROR_CONTAINED, CUDA_ERROR_TENSOR_MEMORY_LEAK,
  // CUDA_ERROR_MPS_CLIENT_TERMINATED, CUDA_ERROR_EXTERNAL_DEVICE.
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

absl::StatusCode CodeFor(CUresult error) {
  if (IsStickyCudaError(error)) return absl::StatusCode::kInternal;
  switch (error) {
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_TOO_MANY_PEERS:
      return absl::StatusCode::kResourceExhausted;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_CONTEXT:
      return absl::StatusCode::kInvalidArgument;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
      return absl::StatusCode::kAlreadyExists;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return absl::StatusCode::kFailedPrecondition;
    case CUDA_ERROR_NOT_SUPPORTED:
      return absl::StatusCode::kUnimplemented;
    case CUDA_ERROR_NOT_PERMITTED:
      return absl::StatusCode::kPermissionDenied;
    case CUDA_ERROR_TIMEOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case CUDA_ERROR_NOT_READY:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudaErrorStatus(CUresult error, const char* expr, const char* file, int line) {
  if (error == CUDA_SUCCESS) return absl::OkStatus();
  // The names come from the driver that raised the error; only a call made
  // through a loaded table can raise one.
  const char* name = nullptr;
  const char* text = nullptr;
  if (absl::StatusOr<const CudaDriverTable*> cu = LoadCudaDriver(); cu.ok()) {
    if ((*cu)->cuGetErrorName(error, &name) != CUDA_SUCCESS) name = nullptr;
    if ((*cu)->cuGetErrorString(error, &text) != CUDA_SUCCESS) text = nullptr;
  }
  return absl::Status(
      CodeFor(error),
      absl::StrCat(expr, " failed at ", file, ":", line, ": ",
                   name != nullptr ? name : absl::StrCat("CUresult ", static_cast<int>(error)),
                   " (", text != nullptr ? text : "no description from the driver", ")"));
}

absl::StatusOr<std::shared_ptr<const PrimaryContext>> PrimaryContext::Acquire(CUdevice device,
                                                                              int ordinal) {
  // Weak: the registry does not keep a context retained; its holders do.
  ABSL_CONST_INIT static absl::Mutex mu(absl::kConstInit);
  static auto* const retained = new std::map<CUdevice, std::weak_ptr<const PrimaryContext>>;
  BLOCKSWAP_ASSIGN_OR_RETURN(const CudaDriverTable* cu, LoadCudaDriver());
  absl::MutexLock lock(&mu);
  if (std::shared_ptr<const PrimaryContext> held = (*retained)[device].lock()) return held;
  CUcontext context = nullptr;
  absl::Status status =
      BLOCKSWAP_CUDA_STATUS(nullptr, cu->cuDevicePrimaryCtxRetain(&context, device));
  if (!status.ok()) {
    return Annotate(status, absl::StrCat("retaining the primary context of cuda:", ordinal));
  }
  std::shared_ptr<const PrimaryContext> held(new PrimaryContext(device, context));
  (*retained)[device] = held;
  return held;
}

PrimaryContext::~PrimaryContext() {
  // Loaded: this context was retained through it.
  const CudaDriverTable* cu = *LoadCudaDriver();
  (void)BLOCKSWAP_CUDA_STATUS(nullptr, cu->cuDevicePrimaryCtxRelease(device_));
}

absl::Status DeviceHealth::status() const {
  absl::MutexLock lock(&mu_);
  return sticky_;
}

absl::Status DeviceHealth::Check(CUresult error, const char* expr, const char* file, int line) {
  if (error == CUDA_SUCCESS) return absl::OkStatus();
  absl::Status status = CudaErrorStatus(error, expr, file, line);
  if (!IsStickyCudaError(error)) return Annotate(status, absl::StrCat("on ", label_));
  absl::MutexLock lock(&mu_);
  // The first sticky error is the cause; later ones are its echoes.
  if (sticky_.ok()) {
    sticky_ = Annotate(status, absl::StrCat(label_,
                                            " is unusable until this process restarts, "
                                            "after a sticky CUDA error"));
  }
  return sticky_;
}

absl::Status CheckCuda(DeviceHealth* health, CUresult error, const char* expr, const char* file,
                       int line) {
  if (health != nullptr) return health->Check(error, expr, file, line);
  return CudaErrorStatus(error, expr, file, line);
}

absl::StatusOr<ScopedContext> ScopedContext::Enter(DeviceHealth& health) {
  BLOCKSWAP_RETURN_IF_ERROR(health.status());
  const CudaDriverTable& cu = health.cu();
  CUcontext previous = nullptr;
  BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health, cu.cuCtxGetCurrent(&previous));
  if (previous == health.context()) return ScopedContext(nullptr, nullptr);
  BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health, cu.cuCtxSetCurrent(health.context()));
  return ScopedContext(&cu, previous);
}

ScopedContext ScopedContext::EnterForCleanup(DeviceHealth& health) {
  const CudaDriverTable& cu = health.cu();
  CUcontext previous = nullptr;
  if (cu.cuCtxGetCurrent(&previous) != CUDA_SUCCESS || previous == health.context() ||
      cu.cuCtxSetCurrent(health.context()) != CUDA_SUCCESS) {
    return ScopedContext(nullptr, nullptr);
  }
  return ScopedContext(&cu, previous);
}

ScopedContext::ScopedContext(ScopedContext&& other) noexcept
    : cu_(std::exchange(other.cu_, nullptr)), previous_(std::exchange(other.previous_, nullptr)) {}

ScopedContext::~ScopedContext() {
  if (cu_ == nullptr) return;
  // Restores exactly what was current, a null context included (the thread
  // had none). Nothing to report to: the caller's own next call will.
  (void)cu_->cuCtxSetCurrent(previous_);
}

}  // namespace blockswap::cuda_internal
