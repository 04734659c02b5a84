#include "tests/gpu/device_compute.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "shared/backend/cuda_driver.h"
#include "shared/base/status.h"
#include "tests/gpu/gpu_kernels.h"
#include "tests/standin_driver/standin_hooks.h"

// The status of the CUDA runtime call `expr`: the test clients' compute
// (kernels, their buffers and streams) uses the runtime, as a trainer's torch
// does; the product itself reaches CUDA only through the driver table.
#define BLOCKSWAP_CUDART_STATUS(expr) \
  ::blockswap::gpu_testing::RuntimeStatus((expr), #expr, __FILE__, __LINE__)

namespace blockswap::gpu_testing {
namespace {

absl::Status RuntimeStatus(cudaError_t error, const char* expr, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return absl::InternalError(absl::StrCat(expr, " failed at ", file, ":", line, ": ",
                                          cudaGetErrorName(error), " (", cudaGetErrorString(error),
                                          ")"));
}

// --- cuda -------------------------------------------------------------------

absl::StatusOr<int> CudaOrdinal(absl::string_view uuid) {
  int count = 0;
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_CUDART_STATUS(cudaGetDeviceCount(&count)));
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    cudaDeviceProp prop{};
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_CUDART_STATUS(cudaGetDeviceProperties(&prop, ordinal)));
    if (cuda_internal::FormatGpuUuid(prop.uuid) == uuid) return ordinal;
  }
  return absl::NotFoundError(absl::StrCat("no visible GPU has UUID ", uuid));
}

// Device memory owned by this test process.
struct CudaFree {
  void operator()(void* p) const { (void)cudaFree(p); }
};
using DeviceBuffer = std::unique_ptr<void, CudaFree>;

absl::StatusOr<DeviceBuffer> DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_CUDART_STATUS(cudaMalloc(&p, bytes)));
  return DeviceBuffer(p);
}

class CudaCompute final : public DeviceCompute {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceCompute>> Create(Device& device, size_t checks) {
    BLOCKSWAP_ASSIGN_OR_RETURN(int ordinal, CudaOrdinal(device.info().uuid));
    // A test client drives one device: make it this thread's for good.
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_CUDART_STATUS(cudaSetDevice(ordinal)));
    auto compute = std::unique_ptr<CudaCompute>(new CudaCompute());
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_CUDART_STATUS(
        cudaStreamCreateWithFlags(&compute->native_, cudaStreamNonBlocking)));
    BLOCKSWAP_ASSIGN_OR_RETURN(compute->stream_, device.WrapStream(compute->native_));
    const size_t flag_bytes = std::max<size_t>(checks, 1) * sizeof(unsigned int);
    BLOCKSWAP_ASSIGN_OR_RETURN(compute->flags_, DeviceAlloc(flag_bytes));
    BLOCKSWAP_RETURN_IF_ERROR(
        BLOCKSWAP_CUDART_STATUS(cudaMemset(compute->flags_.get(), 0, flag_bytes)));
    compute->checks_ = checks;
    return compute;
  }

  ~CudaCompute() override {
    if (native_ == nullptr) return;
    (void)cudaStreamSynchronize(native_);
    stream_.reset();
    (void)cudaStreamDestroy(native_);
  }

  Stream& stream() override { return *stream_; }

  absl::StatusOr<const void*> Keep(const std::vector<std::byte>& bytes) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(DeviceBuffer copy, DeviceAlloc(std::max<size_t>(bytes.size(), 1)));
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_CUDART_STATUS(
        cudaMemcpy(copy.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice)));
    kept_.push_back(std::move(copy));
    return kept_.back().get();
  }

  absl::Status Spin(absl::Duration duration) override {
    return BLOCKSWAP_CUDART_STATUS(
        LaunchSpin(native_, static_cast<uint64_t>(absl::ToInt64Nanoseconds(duration))));
  }

  absl::Status Compare(const void* slot, const void* kept, size_t bytes, size_t check) override {
    if (check >= checks_)
      return absl::OutOfRangeError(absl::StrCat("check ", check, " >= ", checks_));
    auto* flags = static_cast<unsigned int*>(flags_.get());
    return BLOCKSWAP_CUDART_STATUS(LaunchCompare(native_, slot, kept, bytes, flags + check));
  }

  absl::StatusOr<uint64_t> CountMismatches() override {
    BLOCKSWAP_RETURN_IF_ERROR(Synchronize());
    std::vector<unsigned int> flags(checks_);
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_CUDART_STATUS(cudaMemcpy(
        flags.data(), flags_.get(), checks_ * sizeof(unsigned int), cudaMemcpyDeviceToHost)));
    uint64_t mismatches = 0;
    for (unsigned int flag : flags) mismatches += flag != 0;
    return mismatches;
  }

  absl::Status Synchronize() override {
    return BLOCKSWAP_CUDART_STATUS(cudaStreamSynchronize(native_));
  }

 private:
  CudaCompute() = default;
  cudaStream_t native_ = nullptr;
  std::unique_ptr<Stream> stream_;  // wraps native_; destroyed before it
  DeviceBuffer flags_;
  size_t checks_ = 0;
  std::vector<DeviceBuffer> kept_;
};

// --- host functions: the host backend (dry run), the stand-in driver, and
// the runtime-free reads -----------------------------------------------------

// The compute as host functions on a backend stream: a spin sleeps, and the
// comparisons, each a host function queued after what the stream waited for,
// set their flags. Subclasses say how a comparison reads the slot.
class HostFunctionCompute : public DeviceCompute {
 public:
  Stream& stream() override { return *stream_; }

  absl::Status Spin(absl::Duration duration) override {
    return stream_->LaunchHostFunc([duration] { absl::SleepFor(duration); });
  }

  absl::StatusOr<uint64_t> CountMismatches() override {
    BLOCKSWAP_RETURN_IF_ERROR(Synchronize());
    uint64_t mismatches = 0;
    for (uint8_t flag : flags_) mismatches += flag;
    return mismatches;
  }

  absl::Status Synchronize() override { return stream_->Synchronize(); }

 protected:
  explicit HostFunctionCompute(size_t checks) : flags_(checks, 0) {}

  absl::Status CreateStream(Device& device) {
    BLOCKSWAP_ASSIGN_OR_RETURN(stream_, device.CreateStream());
    return absl::OkStatus();
  }
  absl::Status CheckIndex(size_t check) const {
    if (check < flags_.size()) return absl::OkStatus();
    return absl::OutOfRangeError(absl::StrCat("check ", check, " >= ", flags_.size()));
  }
  // Queues the comparison of `a` and `b` (host memory once the stream
  // reaches it), setting flag `check` when they differ.
  absl::Status CompareOnStream(const void* a, const void* b, size_t bytes, size_t check) {
    return stream_->LaunchHostFunc([this, a, b, bytes, check] {
      if (std::memcmp(a, b, bytes) != 0) flags_[check] = 1;
    });
  }
  // Subclasses destroy it first (their destructor), before what its host
  // functions use.
  void DestroyStream() { stream_.reset(); }

 private:
  std::vector<uint8_t> flags_;  // written by the stream's thread, read after Synchronize
  std::unique_ptr<Stream> stream_;
};

// The host backend, and the stand-in CUDA driver (tests/standin_driver/)
// where kernels are asked for: it runs none. On the host backend a device
// pointer is a host address; over the stand-in it is the cuda backend's
// device memory, read where the stand-in keeps its bytes (`host_address`,
// looked up before any host function runs: they must not call the driver).
class HostCompute final : public HostFunctionCompute {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceCompute>> Create(
      Device& device, size_t checks, BlockswapStandinHostAddressFn host_address = nullptr) {
    auto compute = std::unique_ptr<HostCompute>(new HostCompute(device, checks, host_address));
    BLOCKSWAP_RETURN_IF_ERROR(compute->CreateStream(device));
    return compute;
  }
  ~HostCompute() override { DestroyStream(); }

  absl::StatusOr<const void*> Keep(const std::vector<std::byte>& bytes) override {
    if (host_address_ == nullptr) {
      kept_.push_back(std::make_unique<std::vector<std::byte>>(bytes));
      return kept_.back()->data();
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<DeviceMemory> copy,
                               device_.Allocate(std::max<size_t>(bytes.size(), 1)));
    BLOCKSWAP_RETURN_IF_ERROR(stream().CopyHostToDevice(copy->data(), bytes.data(), bytes.size()));
    BLOCKSWAP_RETURN_IF_ERROR(stream().Synchronize());
    kept_on_device_.push_back(std::move(copy));
    return kept_on_device_.back()->data();
  }

  absl::Status Compare(const void* slot, const void* kept, size_t bytes, size_t check) override {
    BLOCKSWAP_RETURN_IF_ERROR(CheckIndex(check));
    // Read through the stream, as a device kernel would: after its waits.
    return CompareOnStream(HostView(slot), HostView(kept), bytes, check);
  }

 private:
  HostCompute(Device& device, size_t checks, BlockswapStandinHostAddressFn host_address)
      : HostFunctionCompute(checks), device_(device), host_address_(host_address) {}

  const void* HostView(const void* device_pointer) const {
    if (host_address_ == nullptr) return device_pointer;
    return host_address_(reinterpret_cast<CUdeviceptr>(device_pointer));
  }

  Device& device_;
  const BlockswapStandinHostAddressFn host_address_;  // null on the host backend
  std::vector<std::unique_ptr<std::vector<std::byte>>> kept_;
  std::vector<std::unique_ptr<DeviceMemory>> kept_on_device_;
};

// ComputeKind::kHostCopies, on any backend: each comparison copies the slot
// into pinned host memory on the stream (after its waits, as a kernel would
// read it) and compares it there with the kept bytes, which stay on the
// host. One buffer serves every comparison: the stream runs a copy only
// after the comparison before it.
class CopyCompute final : public HostFunctionCompute {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceCompute>> Create(Device& device, size_t checks) {
    auto compute = std::unique_ptr<CopyCompute>(new CopyCompute(device, checks));
    BLOCKSWAP_RETURN_IF_ERROR(compute->CreateStream(device));
    return compute;
  }
  ~CopyCompute() override { DestroyStream(); }

  absl::StatusOr<const void*> Keep(const std::vector<std::byte>& bytes) override {
    kept_.push_back(std::make_unique<std::vector<std::byte>>(bytes));
    return kept_.back()->data();
  }

  absl::Status Compare(const void* slot, const void* kept, size_t bytes, size_t check) override {
    BLOCKSWAP_RETURN_IF_ERROR(CheckIndex(check));
    if (buffers_.empty() || buffers_.back()->size() < bytes) {
      // A larger one; the smaller stays alive for what the stream still
      // queues on it.
      BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<PinnedHostBuffer> buffer,
                                 device_.AllocatePinnedHostBuffer(std::max<size_t>(bytes, 1)));
      buffers_.push_back(std::move(buffer));
    }
    std::byte* read = buffers_.back()->data();
    BLOCKSWAP_RETURN_IF_ERROR(stream().CopyDeviceToHost(read, slot, bytes));
    return CompareOnStream(read, kept, bytes, check);
  }

 private:
  CopyCompute(Device& device, size_t checks) : HostFunctionCompute(checks), device_(device) {}

  Device& device_;
  std::vector<std::unique_ptr<std::vector<std::byte>>> kept_;
  std::vector<std::unique_ptr<PinnedHostBuffer>> buffers_;
};

}  // namespace

absl::Status DeviceCompute::SynchronizeWithin(absl::Duration timeout) {
  // A marker behind everything queued; it runs only once the stream drained.
  auto drained = std::make_shared<absl::Notification>();
  BLOCKSWAP_RETURN_IF_ERROR(stream().LaunchHostFunc([drained] { drained->Notify(); }));
  if (!drained->WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the stream had not drained ", absl::FormatDuration(timeout), " later"));
  }
  return Synchronize();
}

absl::StatusOr<std::unique_ptr<DeviceCompute>> DeviceCompute::Create(BackendKind kind,
                                                                     Device& device, size_t checks,
                                                                     ComputeKind compute) {
  if (compute == ComputeKind::kHostCopies) return CopyCompute::Create(device, checks);
  if (kind == BackendKind::kCuda) {
    if (BlockswapStandinHostAddressFn host_address = LoadedStandinHostAddress();
        host_address != nullptr) {
      return HostCompute::Create(device, checks, host_address);
    }
    return CudaCompute::Create(device, checks);
  }
  return HostCompute::Create(device, checks);
}

}  // namespace blockswap::gpu_testing
