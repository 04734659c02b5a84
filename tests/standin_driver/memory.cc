// The stand-in CUDA driver's entry points for device memory, host memory,
// pointers, copies and IPC memory handles (a TEST DOUBLE, README.md).
#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shared/backend/host_lifetime.h"
#include "tests/standin_driver/entry_points.h"
#include "tests/standin_driver/standin.h"

namespace blockswap::standin {
namespace {

namespace lifetime = host_lifetime;

// What travels in a CUipcMemHandle (64 opaque bytes).
struct MemHandle {
  static constexpr uint32_t kMagic = 0x684d4253;  // "SBMh"
  uint32_t magic;
  uint32_t pid;
  uint32_t uid;  // the exporter's effective uid
  uint32_t file_id;
  uint32_t device;
  uint64_t token;
  uint64_t size;
};
static_assert(sizeof(MemHandle) <= sizeof(CUipcMemHandle));

// The copy engine: runs on a stream worker. The Nth copy of a device fails
// with a sticky error when BLOCKSWAP_STANDIN_STICKY_AT says so.
void RunCopy(Context* ctx, void* dst, const void* src, size_t bytes, bool host_to_device) {
  const Settings& settings = GetSettings();
  const int64_t n = ctx->copies_executed.fetch_add(1) + 1;
  if (settings.sticky_device == ctx->ordinal && settings.sticky_at_copy == n) {
    Fault(ctx, CUDA_ERROR_ILLEGAL_ADDRESS,
          "copy " + std::to_string(n) + " (BLOCKSWAP_STANDIN_STICKY_AT)");
    return;
  }
  if (host_to_device && settings.copy_delay_us > 0) {
    ::usleep(static_cast<useconds_t>(settings.copy_delay_us));
  }
  std::memmove(dst, src, bytes);
}

// Imported memory whose exporter freed it: undefined (cuIpcOpenMemHandle:
// "Calling cuMemFree on an exported memory region before calling
// cuIpcCloseMemHandle in the importing context will result in undefined
// behavior").
void CheckImportAlive(const std::shared_ptr<Allocation>& allocation, const char* use) {
  if (allocation && allocation->imported && lifetime::Freed(allocation->header->ledger)) {
    ReportViolation(std::string(use) + " of imported device memory after its exporter (pid " +
                    std::to_string(allocation->exporter_pid) + ") freed it");
  }
}

// Whether every page of [data, data + bytes) is mapped writable by this
// process (/proc/self/maps: the kernel's own view of the mappings).
bool MappedWritable(const void* data, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = begin + bytes;
  uintptr_t covered = begin;  // [begin, covered) is known writable
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (covered < end && std::getline(maps, line)) {
    uintptr_t from = 0, to = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " %4s", &from, &to, perms) != 3) continue;
    if (from <= covered && covered < to) {
      if (perms[1] != 'w') return false;
      covered = to;
    }
  }
  return covered >= end;
}

// Queues a copy between any two kinds of memory (unified addressing).
CUresult QueueCopy(CUstream handle, uintptr_t dst, bool dst_host, uintptr_t src, bool src_host,
                   size_t bytes, const char* name) {
  CUstream_st* stream = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(EnterStream(handle, &stream));
  if (bytes == 0) return CUDA_SUCCESS;
  Resolved to = Resolve(dst, bytes, dst_host);
  Resolved from = Resolve(src, bytes, src_host);
  if (to.kind == Resolved::Kind::kUnknown || from.kind == Resolved::Kind::kUnknown) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Memory registered CU_MEMHOSTREGISTER_READ_ONLY "is considered read-only
  // by the device": what a device write to it does is not documented, so
  // the strictest rule (assumed): refused at the call.
  if (to.kind == Resolved::Kind::kPinnedHost && (to.range.flags & CU_MEMHOSTREGISTER_READ_ONLY)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const bool host_to_device =
      to.kind == Resolved::Kind::kDevice && (from.kind == Resolved::Kind::kPinnedHost ||
                                             from.kind == Resolved::Kind::kPageableHost);
  // Pageable source: staged at the call, so the caller may reuse its buffer
  // at once (the driver copies it to a staging buffer first).
  std::shared_ptr<std::vector<std::byte>> staged;
  const std::byte* source = from.host;
  if (from.kind == Resolved::Kind::kPageableHost) {
    staged = std::make_shared<std::vector<std::byte>>(from.host, from.host + bytes);
    source = staged->data();
  }
  Context* ctx = stream->ctx;
  std::byte* target = to.host;
  std::string use = name;
  Enqueue(stream, [ctx, target, source, bytes, host_to_device, staged, keep_to = to.allocation,
                   keep_from = from.allocation, use] {
    DeviceTouch touch(ctx, use.c_str(), {{keep_to.get(), true}, {keep_from.get(), false}});
    if (!touch.ok()) return;
    CheckImportAlive(keep_to, use.c_str());
    CheckImportAlive(keep_from, use.c_str());
    RunCopy(ctx, target, source, bytes, host_to_device);
  });
  // To pageable memory: returns once the copy is done (the driver's rule for
  // device-to-pageable copies).
  if (to.kind == Resolved::Kind::kPageableHost) Synchronize(stream);
  return ctx->sticky.load();
}

}  // namespace
}  // namespace blockswap::standin

using namespace blockswap::standin;  // NOLINT: the entry points below are C

extern "C" {

// ---------------------------------------------------------------- device memory

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* dptr, size_t bytes) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ctx->allocated_bytes.load() + bytes > GetSettings().memory_bytes) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Driver& driver = GetDriver();
  auto allocation = std::make_shared<Allocation>();
  {
    std::lock_guard<std::mutex> lock(driver.mu);
    allocation->token = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    allocation->path = FilePath(EffectiveUid(), static_cast<uint32_t>(::getpid()), "mem",
                                driver.next_file++);
  }
  const int fd =
      ::open(allocation->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  // Any process holding the handle may map the memory: a memory handle is a
  // capability that the driver resolves in the kernel, with no file whose
  // permissions apply (unlike an event's; LMCache/LMCache#4550).
  ::fchmod(fd, 0666);
  const size_t page = PageSize();
  const size_t size = page + RoundUp(bytes, page);
  void* mapping = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(size)) == 0) {
    mapping = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (mapping == MAP_FAILED) {
    ::unlink(allocation->path.c_str());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  allocation->ctx = ctx;
  allocation->mapping = mapping;
  allocation->mapping_size = size;
  allocation->header = new (mapping) MemoryHeader();
  allocation->header->magic = MemoryHeader::kMagic;
  allocation->header->device = static_cast<uint32_t>(ctx->ordinal);
  allocation->header->size = bytes;
  lifetime::InitializeLedger(allocation->header->ledger);
  allocation->data = static_cast<std::byte*>(mapping) + page;
  allocation->size = bytes;
  allocation->exporter_pid = static_cast<uint32_t>(::getpid());
  // Device memory is not zeroed by cuMemAlloc: a reader of bytes nobody
  // wrote sees this pattern, not a convenient zero.
  std::memset(allocation->data, 0xcd, bytes);
  ctx->allocated_bytes.fetch_add(bytes);
  {
    std::lock_guard<std::mutex> lock(driver.mu);
    driver.allocations[reinterpret_cast<uintptr_t>(allocation->data)] = allocation;
  }
  *dptr = DeviceAddressOf(allocation->data);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  if (dptr == 0) return CUDA_SUCCESS;
  Driver& driver = GetDriver();
  std::shared_ptr<Allocation> allocation;
  {
    std::lock_guard<std::mutex> lock(driver.mu);
    auto it = driver.allocations.find(reinterpret_cast<uintptr_t>(HostAddressOf(dptr)));
    // Not an import, not a VMM mapping (cuMemUnmap's).
    if (it == driver.allocations.end() || it->second->imported || it->second->physical) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    allocation = it->second;
  }
  // "For all other pointers, this API may perform implicit synchronization":
  // the stand-in always waits for the work queued in the whole context.
  SynchronizeContext(allocation->ctx);
  const std::string holders = lifetime::MarkFreed(allocation->header->ledger);
  if (!holders.empty()) {
    ReportViolation("cuMemFree of exported device memory while " + holders +
                    " still imports it (undefined before every importer's cuIpcCloseMemHandle)");
    // What the importer may read now: garbage.
    std::memset(allocation->data, 0xdb, allocation->size);
  }
  ::unlink(allocation->path.c_str());
  allocation->ctx->allocated_bytes.fetch_sub(allocation->size);
  {
    std::lock_guard<std::mutex> lock(driver.mu);
    driver.allocations.erase(reinterpret_cast<uintptr_t>(allocation->data));
  }
  return allocation->ctx->sticky.load();
}

CUresult CUDAAPI cuMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *total_bytes = GetSettings().memory_bytes;
  *free_bytes = *total_bytes - ctx->allocated_bytes.load();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  Resolved r = Resolve(static_cast<uintptr_t>(dptr), 1, /*host_side=*/false);
  if (r.kind != Resolved::Kind::kDevice) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = DeviceAddressOf(r.allocation->data);
  if (size != nullptr) *size = r.allocation->size;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- host memory

CUresult CUDAAPI cuMemHostRegister(void* p, size_t bytes, unsigned int flags) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  constexpr unsigned kKnown = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                              CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if (p == nullptr || bytes == 0 || (flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  // "a current context associated with a device that does not have this
  // attribute set will cause cuMemHostRegister to error with
  // CUDA_ERROR_NOT_SUPPORTED" (CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED).
  if (!GetSettings().host_register) return CUDA_ERROR_NOT_SUPPORTED;
  // "On platforms without CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
  // this flag is required in order to register memory mapped to the CPU as
  // read-only" (CU_MEMHOSTREGISTER_READ_ONLY); the stand-in is such a
  // platform. The error code is not documented: INVALID_VALUE (assumed).
  if ((flags & CU_MEMHOSTREGISTER_READ_ONLY) == 0 && !MappedWritable(p, bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* data = static_cast<std::byte*>(p);
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  auto next = driver.host_ranges.lower_bound(reinterpret_cast<uintptr_t>(data));
  if (next != driver.host_ranges.end() && next->second.data < data + bytes) {
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  if (next != driver.host_ranges.begin()) {
    auto previous = std::prev(next);
    if (previous->second.data + previous->second.size > data) {
      return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
  }
  driver.host_ranges[reinterpret_cast<uintptr_t>(data)] = HostRange{data, bytes, flags, ctx, false};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostUnregister(void* p) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  auto it = driver.host_ranges.find(reinterpret_cast<uintptr_t>(p));
  if (it == driver.host_ranges.end() || it->second.allocated) {
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  driver.host_ranges.erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr* dptr, void* p, unsigned int flags) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  if (dptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Resolved r = Resolve(reinterpret_cast<uintptr_t>(p), 1, /*host_side=*/true);
  if (r.kind != Resolved::Kind::kPinnedHost ||
      (r.range.flags & CU_MEMHOSTREGISTER_DEVICEMAP) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *dptr = DeviceAddressOf(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost(void** p, size_t bytes) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  driver.host_ranges[reinterpret_cast<uintptr_t>(data)] =
      HostRange{static_cast<std::byte*>(data), bytes,
                CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP, ctx, true};
  *p = data;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void* p) {
  BLOCKSWAP_STANDIN_ENTER();
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  auto it = driver.host_ranges.find(reinterpret_cast<uintptr_t>(p));
  if (it == driver.host_ranges.end() || !it->second.allocated) return CUDA_ERROR_INVALID_VALUE;
  ::munmap(p, it->second.size);
  driver.host_ranges.erase(it);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- pointers

namespace {
// One attribute of `r`; false for one the pointer does not have.
bool PointerAttribute(const Resolved& r, CUdeviceptr ptr, CUpointer_attribute attribute,
                      void* data) {
  const bool device = r.kind == Resolved::Kind::kDevice;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return true;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) =
          ToHandle(device ? r.allocation->ctx : r.range.ctx);
      return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = device ? r.allocation->ctx->ordinal : r.range.ctx->ordinal;
      return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      if (!device && (r.range.flags & CU_MEMHOSTREGISTER_DEVICEMAP) == 0) return false;
      *static_cast<CUdeviceptr*>(data) = DeviceAddressOf(r.host);
      return true;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (device) return false;
      *static_cast<void**>(data) = r.host;
      return true;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) =
          device ? DeviceAddressOf(r.allocation->data) : reinterpret_cast<CUdeviceptr>(r.range.data);
      return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = device ? r.allocation->size : r.range.size;
      return true;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned*>(data) = 0;
      return true;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<unsigned*>(data) = 1;
      return true;
    default:
      (void)ptr;
      return false;
  }
}

Resolved ResolveAnyPointer(CUdeviceptr ptr) {
  const bool device = (static_cast<uintptr_t>(ptr) & kDeviceAddressBit) != 0;
  Resolved r = Resolve(static_cast<uintptr_t>(ptr), 1, /*host_side=*/!device);
  if (r.kind == Resolved::Kind::kMappedHost) r.kind = Resolved::Kind::kPinnedHost;
  return r;
}
}  // namespace

CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  BLOCKSWAP_STANDIN_ENTER();
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Resolved r = ResolveAnyPointer(ptr);
  // A pointer the driver does not know: CUDA_ERROR_INVALID_VALUE.
  if (r.kind != Resolved::Kind::kDevice && r.kind != Resolved::Kind::kPinnedHost) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return PointerAttribute(r, ptr, attribute, data) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Unlike cuPointerGetAttribute, an unknown pointer is no error: its
// attributes read as zero (the reference says so).
CUresult CUDAAPI cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes,
                                        void** data, CUdeviceptr ptr) {
  BLOCKSWAP_STANDIN_ENTER();
  if (attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Resolved r = ResolveAnyPointer(ptr);
  const bool known = r.kind == Resolved::Kind::kDevice || r.kind == Resolved::Kind::kPinnedHost;
  for (unsigned i = 0; i < count; ++i) {
    if (data[i] == nullptr) continue;
    if (!known || !PointerAttribute(r, ptr, attributes[i], data[i])) {
      // Zero of the attribute's width: 8 bytes covers every one used here.
      switch (attributes[i]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        case CU_POINTER_ATTRIBUTE_MAPPED:
          *static_cast<unsigned*>(data[i]) = 0;
          break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
          *static_cast<int*>(data[i]) = -2;
          break;
        default:
          *static_cast<uint64_t*>(data[i]) = 0;
          break;
      }
    }
  }
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- copies

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t bytes,
                                   CUstream stream) {
  BLOCKSWAP_STANDIN_ENTER();
  return QueueCopy(stream, static_cast<uintptr_t>(dst), false,
                   reinterpret_cast<uintptr_t>(src), true, bytes, "cuMemcpyHtoDAsync");
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  BLOCKSWAP_STANDIN_ENTER();
  return QueueCopy(stream, reinterpret_cast<uintptr_t>(dst), true, static_cast<uintptr_t>(src),
                   false, bytes, "cuMemcpyDtoHAsync");
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                   CUstream stream) {
  BLOCKSWAP_STANDIN_ENTER();
  return QueueCopy(stream, static_cast<uintptr_t>(dst), false, static_cast<uintptr_t>(src), false,
                   bytes, "cuMemcpyDtoDAsync");
}

// Unified addressing: each side is device memory if it carries the device
// address bit, host memory otherwise.
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  BLOCKSWAP_STANDIN_ENTER();
  const bool dst_host = (static_cast<uintptr_t>(dst) & kDeviceAddressBit) == 0;
  const bool src_host = (static_cast<uintptr_t>(src) & kDeviceAddressBit) == 0;
  return QueueCopy(stream, static_cast<uintptr_t>(dst), dst_host, static_cast<uintptr_t>(src),
                   src_host, bytes, "cuMemcpyAsync");
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count,
                                 CUstream handle) {
  BLOCKSWAP_STANDIN_ENTER();
  CUstream_st* stream = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(EnterStream(handle, &stream));
  if (count == 0) return CUDA_SUCCESS;
  Resolved r = Resolve(static_cast<uintptr_t>(dst), count, /*host_side=*/false);
  if (r.kind == Resolved::Kind::kUnknown) return CUDA_ERROR_INVALID_VALUE;
  std::byte* target = r.host;
  Enqueue(stream, [ctx = stream->ctx, target, value, count, keep = r.allocation] {
    DeviceTouch touch(ctx, "cuMemsetD8Async", {{keep.get(), true}});
    if (!touch.ok()) return;
    CheckImportAlive(keep, "cuMemsetD8Async");
    std::memset(target, value, count);
  });
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- IPC memory

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Allocation> allocation;
  {
    std::lock_guard<std::mutex> lock(GetDriver().mu);
    auto it = GetDriver().allocations.find(reinterpret_cast<uintptr_t>(HostAddressOf(dptr)));
    // The base of a cuMemAlloc allocation of this process (an import cannot
    // be exported again; VMM memory exports as a descriptor).
    if (it == GetDriver().allocations.end() || it->second->imported || it->second->physical) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    allocation = it->second;
  }
  MemHandle wire{};
  wire.magic = MemHandle::kMagic;
  wire.pid = allocation->exporter_pid;
  wire.uid = EffectiveUid();
  std::sscanf(allocation->path.c_str() + allocation->path.rfind('.') + 1, "%u", &wire.file_id);
  wire.device = static_cast<uint32_t>(allocation->ctx->ordinal);
  wire.token = allocation->token;
  wire.size = allocation->size;
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle->reserved, &wire, sizeof(wire));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  // "Flags for this operation. Must be specified as
  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS".
  if (dptr == nullptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  MemHandle wire;
  std::memcpy(&wire, handle.reserved, sizeof(wire));
  if (wire.magic != MemHandle::kMagic) return CUDA_ERROR_INVALID_VALUE;
  // In the exporting process the driver refuses: "invalid device context"
  // (observed: openucx/ucx#11603, NVIDIA/DALI#4817).
  if (wire.pid == static_cast<uint32_t>(::getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  // Whether legacy IPC memory crosses users is not documented: same uid only,
  // as IPC events (cuda-rules.md), with the answer an event of another uid
  // gets, unless BLOCKSWAP_STANDIN_IPC_MEM_ANY_UID=1.
  if (wire.uid != EffectiveUid() && !GetSettings().ipc_mem_any_uid) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& driver = GetDriver();
  {
    // Opened before by this context: "the reference count on the handle is
    // incremented by 1 and the existing device pointer is returned".
    std::lock_guard<std::mutex> lock(driver.mu);
    for (auto& [key, allocation] : driver.allocations) {
      if (allocation->imported && allocation->token == wire.token && allocation->ctx == ctx) {
        ++allocation->open_count;
        *dptr = DeviceAddressOf(allocation->data);
        return CUDA_SUCCESS;
      }
    }
  }
  auto allocation = std::make_shared<Allocation>();
  allocation->path = FilePath(wire.uid, wire.pid, "mem", wire.file_id);
  const int fd = ::open(allocation->path.c_str(), O_RDWR | O_CLOEXEC);
  // The exporter freed it or exited: nothing to map.
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
  const size_t page = PageSize();
  struct stat st {};
  void* mapping = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= page + wire.size) {
    mapping = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd, 0);
  }
  ::close(fd);
  if (mapping == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  allocation->mapping = mapping;
  allocation->mapping_size = static_cast<size_t>(st.st_size);
  allocation->header = static_cast<MemoryHeader*>(mapping);
  if (allocation->header->magic != MemoryHeader::kMagic ||
      lifetime::Freed(allocation->header->ledger)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  auto claim = lifetime::ImportClaim::Claim(allocation->header->ledger, "stand-in device memory");
  if (!claim.ok()) return CUDA_ERROR_TOO_MANY_PEERS;
  allocation->claim.emplace(std::move(*claim));
  allocation->ctx = ctx;
  allocation->imported = true;
  allocation->data = static_cast<std::byte*>(mapping) + page;
  allocation->size = allocation->header->size;
  allocation->exporter_pid = wire.pid;
  allocation->token = wire.token;
  allocation->open_count = 1;
  {
    std::lock_guard<std::mutex> lock(driver.mu);
    driver.allocations[reinterpret_cast<uintptr_t>(allocation->data)] = allocation;
  }
  *dptr = DeviceAddressOf(allocation->data);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  auto it = driver.allocations.find(reinterpret_cast<uintptr_t>(HostAddressOf(dptr)));
  if (it == driver.allocations.end() || !it->second->imported) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second->open_count == 0) {
    // The import ends now; the mapping goes once no queued work uses it.
    it->second->claim.reset();
    driver.allocations.erase(it);
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
