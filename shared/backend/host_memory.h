// The host backend's memory (host_backend.cc): "device" memory is a shared
// mapping whose first page records who imports it (host_lifetime.h), so that
// a free under a live importer is caught as on a GPU; a registration, a pinned
// buffer and private memory are plain host memory. Private to the host
// backend.
#ifndef BLOCKSWAP_SHARED_BACKEND_HOST_MEMORY_H_
#define BLOCKSWAP_SHARED_BACKEND_HOST_MEMORY_H_

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "shared/backend/backend.h"
#include "shared/backend/host_lifetime.h"
#include "shared/base/status.h"
#include "shared/os/shared_memory.h"

namespace blockswap::host_internal {

using host_lifetime::ImportClaim;
using host_lifetime::ImportLedger;

inline constexpr absl::string_view kMemoryBlob = "blockswap-host-memory-v1";

// The first page of a host "device memory" object, before its bytes: who
// holds an import of it (host_lifetime.h).
struct HostMemoryHeader {
  uint32_t magic;
  uint32_t reserved;
  ImportLedger ledger;
};
inline constexpr uint32_t kMemoryMagic = 0x42534d45;  // "BSME"
// What device memory freed under a live importer reads as.
inline constexpr int kFreedMemoryPoison = 0xdb;
inline constexpr size_t kMemoryHeaderBytes = 4096;
static_assert(sizeof(HostMemoryHeader) <= kMemoryHeaderBytes);

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

}  // namespace blockswap::host_internal

#endif  // BLOCKSWAP_SHARED_BACKEND_HOST_MEMORY_H_
