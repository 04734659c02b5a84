// The cuda backend's memory (cuda_backend.cc): device memory that crosses
// processes as a file descriptor or stays private, and host memory pinned by
// registration or allocated pinned. Each class owns its handle and releases
// it in its destructor, inside the device's context (cuda_backend.cc says
// why every object dies before its device). Private to the cuda backend.
#ifndef BLOCKSWAP_SHARED_BACKEND_CUDA_MEMORY_H_
#define BLOCKSWAP_SHARED_BACKEND_CUDA_MEMORY_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "shared/backend/backend.h"
#include "shared/backend/cuda_check.h"
#include "shared/backend/cuda_driver.h"
#include "shared/base/status.h"

namespace blockswap::cuda_internal {

// Device memory made through the driver's virtual memory management, so
// that it crosses processes — of any uid — as a file descriptor
// (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, sent over SCM_RIGHTS), never as
// a legacy IPC handle, whose opening across users CUDA does not document.
// Each process maps its own view: a physical allocation (the handle) mapped
// read-write for this device at a range reserved for it. Unmapping drops the
// view; the physical memory goes with the last mapping of any process
// (cuMemRelease), so an importer's view stays valid after its exporter let
// go or died.
class CudaDeviceMemory final : public DeviceMemory {
 public:
  // Maps `allocation` (owned from here on) for `device` at a new range of
  // `bytes` (the allocation's whole size, a multiple of the granularity).
  static absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> Map(
      DeviceHealth& health, CUdevice device, CUmemGenericAllocationHandle allocation, size_t bytes,
      bool exportable) {
    std::unique_ptr<CudaDeviceMemory> memory(
        new CudaDeviceMemory(health, allocation, bytes, exportable));
    const CudaDriverTable& cu = health.cu();
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health, cu.cuMemAddressReserve(&memory->data_, bytes, 0, 0, 0));
    memory->reserved_ = true;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health, cu.cuMemMap(memory->data_, bytes, 0, allocation, 0));
    memory->mapped_ = true;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health, cu.cuMemSetAccess(memory->data_, bytes, &access, 1));
    return memory;
  }
  CudaDeviceMemory(const CudaDeviceMemory&) = delete;
  CudaDeviceMemory& operator=(const CudaDeviceMemory&) = delete;

  // The owner of a ring destroys it only once nothing on its device can
  // still touch it (the copy stream has passed every copy into it).
  ~CudaDeviceMemory() override {
    ScopedContext guard = ScopedContext::EnterForCleanup(health_);
    const CudaDriverTable& cu = health_.cu();
    if (mapped_) (void)BLOCKSWAP_CUDA_STATUS(&health_, cu.cuMemUnmap(data_, size_));
    if (reserved_) (void)BLOCKSWAP_CUDA_STATUS(&health_, cu.cuMemAddressFree(data_, size_));
    (void)BLOCKSWAP_CUDA_STATUS(&health_, cu.cuMemRelease(allocation_));
  }

  std::byte* data() const override { return reinterpret_cast<std::byte*>(data_); }
  size_t size() const override { return size_; }

  // A new descriptor of the physical allocation; no blob.
  absl::StatusOr<ExportedHandle> Export() const override {
    if (!exportable_) {
      return absl::FailedPreconditionError(
          absl::StrCat("device memory imported from another process cannot be exported again (on ",
                       health_.label(), ")"));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    int fd = -1;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(
        &health_, health_.cu().cuMemExportToShareableHandle(
                      &fd, allocation_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    ExportedHandle exported;
    exported.fd = UniqueFd(fd);
    return exported;
  }

 private:
  CudaDeviceMemory(DeviceHealth& health, CUmemGenericAllocationHandle allocation, size_t size,
                   bool exportable)
      : health_(health), allocation_(allocation), size_(size), exportable_(exportable) {}

  DeviceHealth& health_;
  const CUmemGenericAllocationHandle allocation_;
  const size_t size_;
  const bool exportable_;
  CUdeviceptr data_ = 0;
  bool reserved_ = false;  // data_ is a reserved range
  bool mapped_ = false;    // the allocation is mapped there
};

// Device memory of this process alone (cuMemAlloc): a trainer's own ring,
// which its own copies fill. Works on a device without virtual memory
// management.
class CudaPrivateMemory final : public DeviceMemory {
 public:
  CudaPrivateMemory(DeviceHealth& health, CUdeviceptr data, size_t size)
      : health_(health), data_(data), size_(size) {}
  CudaPrivateMemory(const CudaPrivateMemory&) = delete;
  CudaPrivateMemory& operator=(const CudaPrivateMemory&) = delete;
  // After every stream that touched it has passed its last use.
  ~CudaPrivateMemory() override {
    ScopedContext guard = ScopedContext::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuMemFree(data_));
  }

  std::byte* data() const override { return reinterpret_cast<std::byte*>(data_); }
  size_t size() const override { return size_; }
  absl::StatusOr<ExportedHandle> Export() const override {
    return absl::FailedPreconditionError(absl::StrCat("private device memory of ", health_.label(),
                                                      " cannot be exported (it is not a ring's)"));
  }

 private:
  DeviceHealth& health_;
  const CUdeviceptr data_;
  const size_t size_;
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
    ScopedContext guard = ScopedContext::EnterForCleanup(health_);
    for (auto it = chunks_.rbegin(); it != chunks_.rend(); ++it) {
      (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuMemHostUnregister(*it));
    }
  }

  // Pins one piece; it is unpinned when this registration dies, also when a
  // later piece fails.
  // `flags` beyond CU_MEMHOSTREGISTER_PORTABLE (READ_ONLY).
  absl::Status Pin(void* chunk, size_t bytes, unsigned int flags = 0) {
    absl::Status status = BLOCKSWAP_CUDA_STATUS(
        &health_,
        health_.cu().cuMemHostRegister(chunk, bytes, CU_MEMHOSTREGISTER_PORTABLE | flags));
    if (status.code() == absl::StatusCode::kUnimplemented) {
      // CUDA_ERROR_NOT_SUPPORTED: the device or platform refuses registration
      // itself (CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED 0); no
      // locked-memory limit would help.
      return Annotate(status, absl::StrCat(health_.label(),
                                           " cannot register host memory (the device or "
                                           "platform does not support it, whatever the "
                                           "locked-memory limit)"));
    }
    BLOCKSWAP_RETURN_IF_ERROR(status);
    chunks_.push_back(chunk);
    return absl::OkStatus();
  }

 private:
  DeviceHealth& health_;
  std::vector<void*> chunks_;
};

// Host memory from cuMemAllocHost: pinned by the driver, no registration.
class CudaPinnedHostBuffer final : public PinnedHostBuffer {
 public:
  CudaPinnedHostBuffer(DeviceHealth& health, void* data, size_t bytes)
      : health_(health), data_(static_cast<std::byte*>(data)), size_(bytes) {}
  CudaPinnedHostBuffer(const CudaPinnedHostBuffer&) = delete;
  CudaPinnedHostBuffer& operator=(const CudaPinnedHostBuffer&) = delete;

  ~CudaPinnedHostBuffer() override {
    ScopedContext guard = ScopedContext::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuMemFreeHost(data_));
  }

  std::byte* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  DeviceHealth& health_;
  std::byte* const data_;
  const size_t size_;
};

}  // namespace blockswap::cuda_internal

#endif  // BLOCKSWAP_SHARED_BACKEND_CUDA_MEMORY_H_
