// The stand-in CUDA driver's entry points for virtual memory management
// (cuMemCreate, cuMemMap and the rest; a TEST DOUBLE, README.md). Physical
// memory is a memfd (PhysicalMemory), its shareable handle a descriptor of
// it; a reservation is a PROT_NONE host range whose addresses, with
// kDeviceAddressBit set, are the device addresses; a mapping maps the memfd
// there and is an Allocation like any other device memory, which work may
// touch once cuMemSetAccess allowed it (DeviceTouch).
#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/standin_driver/entry_points.h"
#include "tests/standin_driver/standin.h"

namespace blockswap::standin {
namespace {

// Both granularities (minimum and recommended): sizes, offsets and
// addresses that are not a multiple of it are CUDA_ERROR_INVALID_VALUE.
constexpr size_t kGranularity = size_t{2} << 20;
bool Aligned(uint64_t n) { return n % kGranularity == 0; }

// The properties cuMemCreate takes: pinned memory on a device of this driver,
// shareable as a descriptor or not at all.
CUresult CheckProperties(const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      prop->win32HandleMetaData != nullptr) {  // "In all other cases ... required to be zero"
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prop->location.id < 0 || prop->location.id >= static_cast<int>(GetDriver().contexts.size())) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  if ((prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0) {
    return CUDA_ERROR_NOT_SUPPORTED;  // the stand-in's devices share memory as descriptors only
  }
  return CUDA_SUCCESS;
}

// A new handle of this process to `physical`.
CUmemGenericAllocationHandle AddHandle(std::shared_ptr<PhysicalMemory> physical) {
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  const CUmemGenericAllocationHandle handle = driver.next_vmm_handle++;
  driver.vmm_handles[handle] = std::move(physical);
  return handle;
}

std::shared_ptr<PhysicalMemory> FindHandle(CUmemGenericAllocationHandle handle) {
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  auto it = driver.vmm_handles.find(handle);
  return it == driver.vmm_handles.end() ? nullptr : it->second;
}

// The memfd of a new allocation: header, then `size` bytes of 0xcd (not
// zeroed, as cuMemAlloc's).
CUresult CreateMemoryFile(PhysicalMemory& physical) {
  physical.fd = ::memfd_create("cuda-standin.vmm", MFD_CLOEXEC);
  if (physical.fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t page = PageSize();
  const VmmHeader header{VmmHeader::kMagic, static_cast<uint32_t>(physical.device), EffectiveUid(),
                         physical.handle_types, physical.size};
  if (::ftruncate(physical.fd, static_cast<off_t>(page + physical.size)) != 0 ||
      ::pwrite(physical.fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* data = ::mmap(nullptr, physical.size, PROT_READ | PROT_WRITE, MAP_SHARED, physical.fd,
                      static_cast<off_t>(page));
  if (data == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(data, 0xcd, physical.size);
  ::munmap(data, physical.size);
  return CUDA_SUCCESS;
}

// The reservation holding all of [host, host + size) (Driver::mu held).
bool Reserved(uintptr_t host, size_t size) {
  const auto& reservations = GetDriver().reservations;
  auto it = reservations.upper_bound(host);
  if (it == reservations.begin()) return false;
  --it;
  return host + size <= it->first + it->second;
}

// The mappings that cover [host, host + size) exactly, whole and without a
// gap, in order (Driver::mu held); empty where the range is anything else
// (cuMemUnmap: "cannot unmap a sub-range of an address range mapped";
// cuMemSetAccess: "a fully mapped address range containing all allocations").
std::vector<std::shared_ptr<Allocation>> WholeMappings(uintptr_t host, size_t size) {
  std::vector<std::shared_ptr<Allocation>> mappings;
  const auto& allocations = GetDriver().allocations;
  uintptr_t next = host;
  for (auto it = allocations.find(host); it != allocations.end() && next < host + size; ++it) {
    const Allocation& a = *it->second;
    if (it->first != next || !a.physical || next + a.size > host + size) return {};
    mappings.push_back(it->second);
    next += a.size;
  }
  if (next != host + size) return {};
  return mappings;
}

// A device address range as this driver checks one: aligned, non-empty.
bool DeviceRange(CUdeviceptr ptr, size_t size, uintptr_t* host) {
  *host = reinterpret_cast<uintptr_t>(HostAddressOf(ptr));
  return (static_cast<uintptr_t>(ptr) & kDeviceAddressBit) != 0 && size != 0 && Aligned(*host) &&
         Aligned(size);
}

}  // namespace
}  // namespace blockswap::standin

using namespace blockswap::standin;  // NOLINT: the entry points below are C

extern "C" {

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  BLOCKSWAP_STANDIN_ENTER();
  if (granularity == nullptr || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                 option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CheckProperties(prop));
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  BLOCKSWAP_STANDIN_ENTER();
  if (!GetSettings().vmm) return CUDA_ERROR_NOT_SUPPORTED;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CheckProperties(prop));
  // "must be a multiple of the value given via cuMemGetAllocationGranularity".
  if (handle == nullptr || flags != 0 || size == 0 || !Aligned(size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Context* ctx = GetDriver().contexts[static_cast<size_t>(prop->location.id)].get();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ctx->sticky.load());
  if (ctx->allocated_bytes.load() + size > GetSettings().memory_bytes) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto physical = std::make_shared<PhysicalMemory>();
  physical->device = ctx->ordinal;
  physical->size = size;
  physical->handle_types = prop->requestedHandleTypes;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CreateMemoryFile(*physical));
  ctx->allocated_bytes.fetch_add(size);
  physical->charged = ctx;
  *handle = AddHandle(std::move(physical));
  return CUDA_SUCCESS;
}

// The memory stays while mappings of it remain ("The generic memory handle
// can be freed when there are still outstanding mappings").
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  BLOCKSWAP_STANDIN_ENTER();
  Driver& driver = GetDriver();
  std::shared_ptr<PhysicalMemory> released;  // freed, if at all, outside the lock
  std::lock_guard<std::mutex> lock(driver.mu);
  auto it = driver.vmm_handles.find(handle);
  if (it == driver.vmm_handles.end()) {
    // "If handle is not a valid handle the behavior is undefined."
    ReportViolation("cuMemRelease of handle " + std::to_string(handle) +
                    ", which this process does not hold (released already, or never created)");
    return CUDA_ERROR_INVALID_VALUE;
  }
  released = std::move(it->second);
  driver.vmm_handles.erase(it);
  return CUDA_SUCCESS;
}

// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR "(int)": a new descriptor the
// caller owns, for a handle type its cuMemCreate requested.
CUresult CUDAAPI cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType type,
                                              unsigned long long flags) {
  BLOCKSWAP_STANDIN_ENTER();
  std::shared_ptr<PhysicalMemory> physical = FindHandle(handle);
  if (shareable == nullptr || flags != 0 || physical == nullptr ||
      type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || (physical->handle_types & type) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int fd = ::fcntl(physical->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}

// Imports in any process that holds the descriptor, of any uid (unless
// BLOCKSWAP_STANDIN_VMM_SAME_UID_ONLY); the caller keeps its descriptor.
CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                void* os_handle, CUmemAllocationHandleType type) {
  BLOCKSWAP_STANDIN_ENTER();
  // "If the current process cannot support the memory described by this
  // shareable handle, this API will error as CUDA_ERROR_NOT_SUPPORTED."
  if (!GetSettings().vmm) return CUDA_ERROR_NOT_SUPPORTED;
  if (handle == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int given = static_cast<int>(reinterpret_cast<uintptr_t>(os_handle));
  VmmHeader header{};
  if (::pread(given, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header)) ||
      header.magic != VmmHeader::kMagic ||
      header.device >= static_cast<uint32_t>(GetDriver().contexts.size())) {
    return CUDA_ERROR_INVALID_VALUE;  // not a descriptor this driver exported
  }
  if (GetSettings().vmm_same_uid_only && header.creator_uid != EffectiveUid()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto physical = std::make_shared<PhysicalMemory>();
  physical->fd = ::fcntl(given, F_DUPFD_CLOEXEC, 0);
  if (physical->fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  physical->device = static_cast<int>(header.device);
  physical->size = header.size;
  physical->handle_types = header.handle_types;
  *handle = AddHandle(std::move(physical));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  BLOCKSWAP_STANDIN_ENTER();
  // `addr` is only a hint, and not followed; but it must be aligned too.
  const auto hint = reinterpret_cast<uintptr_t>(HostAddressOf(addr));
  if (ptr == nullptr || size == 0 || !Aligned(size) || !Aligned(hint) ||
      (alignment & (alignment - 1)) != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t align = std::max(alignment, kGranularity);
  void* raw = ::mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = RoundUp(begin, align);
  if (start > begin) ::munmap(raw, start - begin);
  if (begin + align > start) ::munmap(reinterpret_cast<void*>(start + size), begin + align - start);
  {
    std::lock_guard<std::mutex> lock(GetDriver().mu);
    GetDriver().reservations[start] = size;
  }
  *ptr = DeviceAddressOf(reinterpret_cast<void*>(start));
  return CUDA_SUCCESS;
}

// "The size must match what was given to memAddressReserve and the ptr
// given must match what was returned"; a range still mapped is refused too.
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  BLOCKSWAP_STANDIN_ENTER();
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  const auto host = reinterpret_cast<uintptr_t>(HostAddressOf(ptr));
  auto it = driver.reservations.find(host);
  if ((static_cast<uintptr_t>(ptr) & kDeviceAddressBit) == 0 || it == driver.reservations.end() ||
      it->second != size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto mapped = driver.allocations.lower_bound(host);
  if (mapped != driver.allocations.end() && mapped->first < host + size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ::munmap(reinterpret_cast<void*>(host), size);
  driver.reservations.erase(it);
  return CUDA_SUCCESS;
}

// The whole allocation ("offset ... currently must be zero"; the stand-in
// also takes `size` to be the allocation's) at a reserved, unmapped range.
CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  BLOCKSWAP_STANDIN_ENTER();
  std::shared_ptr<PhysicalMemory> physical = FindHandle(handle);
  uintptr_t host = 0;
  if (!DeviceRange(ptr, size, &host) || offset != 0 || flags != 0 || physical == nullptr ||
      size != physical->size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  if (!Reserved(host, size)) return CUDA_ERROR_INVALID_VALUE;
  // "cuMemMap can only create mappings on VA range reservations that are
  // not currently mapped."
  auto next = driver.allocations.lower_bound(host + size);
  if (next != driver.allocations.begin() &&
      reinterpret_cast<uintptr_t>(std::prev(next)->second->data + std::prev(next)->second->size) >
          host) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* mapped = ::mmap(reinterpret_cast<void*>(host), size, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_FIXED, physical->fd, static_cast<off_t>(PageSize()));
  if (mapped == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  auto allocation = std::make_shared<Allocation>();
  allocation->ctx = driver.contexts[static_cast<size_t>(physical->device)].get();
  allocation->data = static_cast<std::byte*>(mapped);
  allocation->size = size;
  allocation->exporter_pid = static_cast<uint32_t>(::getpid());
  allocation->physical = std::move(physical);
  allocation->access.assign(driver.contexts.size(), CU_MEM_ACCESS_FLAGS_PROT_NONE);
  driver.allocations[host] = std::move(allocation);
  return CUDA_SUCCESS;
}

// Whole mappings only. Does not wait for work: work queued before that runs
// after the unmap faults, as on a GPU.
CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  BLOCKSWAP_STANDIN_ENTER();
  uintptr_t host = 0;
  if (!DeviceRange(ptr, size, &host)) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = GetDriver();
  std::vector<std::shared_ptr<Allocation>> mappings;  // released outside the locks
  std::lock_guard<std::mutex> lock(driver.mu);
  mappings = WholeMappings(host, size);
  if (mappings.empty()) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock<std::shared_mutex> vmm_lock(driver.vmm_mu);
  for (const auto& mapping : mappings) {
    mapping->unmapped = true;
    // Back to a reservation: addresses nothing may touch.
    ::mmap(mapping->data, mapping->size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    driver.allocations.erase(reinterpret_cast<uintptr_t>(mapping->data));
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  BLOCKSWAP_STANDIN_ENTER();
  uintptr_t host = 0;
  if (!DeviceRange(ptr, size, &host) || desc == nullptr || count == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& driver = GetDriver();
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
         desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
         desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (desc[i].location.id < 0 ||
        desc[i].location.id >= static_cast<int>(driver.contexts.size())) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
  }
  std::lock_guard<std::mutex> lock(driver.mu);
  const std::vector<std::shared_ptr<Allocation>> mappings = WholeMappings(host, size);
  if (mappings.empty()) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock<std::shared_mutex> vmm_lock(driver.vmm_mu);
  for (const auto& mapping : mappings) {
    for (size_t i = 0; i < count; ++i) {
      mapping->access[static_cast<size_t>(desc[i].location.id)] = desc[i].flags;
    }
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
