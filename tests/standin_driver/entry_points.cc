// The stand-in CUDA driver's entry points (a TEST DOUBLE): each one the
// product resolves, exported under the driver's ABI name (cuda.h maps
// cuMemAlloc to cuMemAlloc_v2 and so on) and through cuGetProcAddress by
// base name. Each checks the rules of README.md and returns the CUresult the
// driver API reference gives for their breach; breaches whose consequence
// CUDA leaves undefined are reported (ReportViolation) instead.
#include <cuda.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shared/backend/host_lifetime.h"
#include "tests/standin_driver/standin.h"

namespace blockswap::standin {
namespace {

namespace lifetime = host_lifetime;

constexpr const char* kShmDir = "/dev/shm";
// Files of this process: cuda-standin.<pid>.mem.<n> / .event.<n>.
constexpr const char* kFilePrefix = "cuda-standin.";

size_t PageSize() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }
size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string FilePath(uint32_t pid, const char* kind, uint32_t id) {
  return std::string(kShmDir) + "/" + kFilePrefix + std::to_string(pid) + "." + kind + "." +
         std::to_string(id);
}

// What travels in a CUipcMemHandle / CUipcEventHandle (64 opaque bytes).
struct MemHandle {
  static constexpr uint32_t kMagic = 0x684d4253;  // "SBMh"
  uint32_t magic;
  uint32_t pid;
  uint32_t file_id;
  uint32_t device;
  uint64_t token;
  uint64_t size;
};
struct EventHandle {
  static constexpr uint32_t kMagic = 0x68454253;  // "SBEh"
  uint32_t magic;
  uint32_t pid;
  uint32_t file_id;
};
static_assert(sizeof(MemHandle) <= sizeof(CUipcMemHandle));
static_assert(sizeof(EventHandle) <= sizeof(CUipcEventHandle));

thread_local std::vector<Context*> context_stack;

CUcontext ToHandle(Context* ctx) { return reinterpret_cast<CUcontext>(ctx); }
Context* FromHandle(CUcontext ctx) { return reinterpret_cast<Context*>(ctx); }

// Every entry point begins here. A host function must not call the driver
// (cuLaunchHostFunc: "The host function must not make any CUDA API calls");
// the driver may say CUDA_ERROR_NOT_PERMITTED, and the stand-in always does,
// and reports it, since a call that happens to work on a GPU may deadlock.
CUresult Enter(const char* name, bool needs_init = true) {
  if (InHostFunction()) {
    ReportViolation(std::string(name) + " called from inside a host function (cuLaunchHostFunc)");
    return CUDA_ERROR_NOT_PERMITTED;
  }
  if (needs_init && !GetDriver().initialized.load(std::memory_order_acquire)) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return CUDA_SUCCESS;
}

#define BLOCKSWAP_STANDIN_RETURN_IF_ERROR(expr)  \
  do {                                           \
    const CUresult blockswap_standin_r_ = (expr); \
    if (blockswap_standin_r_ != CUDA_SUCCESS) return blockswap_standin_r_; \
  } while (0)
#define BLOCKSWAP_STANDIN_ENTER() BLOCKSWAP_STANDIN_RETURN_IF_ERROR(Enter(__func__))

// The calling thread's current context, or why there is none to use.
CUresult CurrentContext(Context** out) {
  Context* ctx = context_stack.empty() ? nullptr : context_stack.back();
  if (ctx == nullptr || ctx->retained.load() == 0) return CUDA_ERROR_INVALID_CONTEXT;
  const CUresult sticky = ctx->sticky.load(std::memory_order_acquire);
  if (sticky != CUDA_SUCCESS) return sticky;
  *out = ctx;
  return CUDA_SUCCESS;
}

// The stream a handle names, in the current context. NULL, CU_STREAM_LEGACY
// and CU_STREAM_PER_THREAD are all the context's NULL stream here.
CUresult ResolveStream(CUstream handle, Context* ctx, CUstream_st** out) {
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    *out = ctx->legacy_stream;
    return CUDA_SUCCESS;
  }
  {
    std::lock_guard<std::mutex> lock(GetDriver().mu);
    if (GetDriver().streams.count(handle) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  // A stream of another context: "invalid resource handle".
  if (handle->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  *out = handle;
  return CUDA_SUCCESS;
}

CUresult EnterStream(CUstream handle, CUstream_st** stream) {
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  return ResolveStream(handle, ctx, stream);
}

CUresult ResolveEvent(CUevent event) {
  std::lock_guard<std::mutex> lock(GetDriver().mu);
  return GetDriver().events.count(event) == 0 ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

// An imported event whose exporter destroyed it: any use is undefined
// (cuIpcGetEventHandle: "Performing operations on the imported event after
// the exported event has been freed with cuEventDestroy will result in
// undefined behavior").
void CheckImportedEventAlive(CUevent event, const char* use) {
  if (event->imported && lifetime::Freed(event->state().ledger)) {
    ReportViolation(std::string(use) + " of an imported event after its exporter (pid " +
                    std::to_string(event->state().ledger.exporter_pid.load()) +
                    ") destroyed it");
  }
}

// What an address is, as the device sees it.
struct Resolved {
  enum class Kind { kUnknown, kDevice, kMappedHost, kPinnedHost, kPageableHost } kind;
  std::byte* host = nullptr;  // where the bytes are in this process
  std::shared_ptr<Allocation> allocation;  // kDevice
  HostRange range;                          // kMappedHost, kPinnedHost
};

// `bytes` at `address` (a device pointer, or a host pointer when `host_side`).
Resolved Resolve(uintptr_t address, size_t bytes, bool host_side) {
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  Resolved out;
  out.kind = Resolved::Kind::kUnknown;
  const bool device_address = (address & kDeviceAddressBit) != 0;
  if (host_side == device_address) {
    if (!host_side) return out;  // a host pointer where a device pointer belongs
    return out;                  // a device pointer where host memory belongs
  }
  auto* host = static_cast<std::byte*>(HostAddressOf(address));
  auto key = reinterpret_cast<uintptr_t>(host);
  if (!host_side) {
    auto it = driver.allocations.upper_bound(key);
    if (it != driver.allocations.begin()) {
      --it;
      const Allocation& a = *it->second;
      if (host >= a.data && host + bytes <= a.data + a.size) {
        out.kind = Resolved::Kind::kDevice;
        out.host = host;
        out.allocation = it->second;
        return out;
      }
    }
  }
  auto it = driver.host_ranges.upper_bound(key);
  if (it != driver.host_ranges.begin()) {
    --it;
    const HostRange& r = it->second;
    if (host >= r.data && host + bytes <= r.data + r.size) {
      if (!host_side && (r.flags & CU_MEMHOSTREGISTER_DEVICEMAP) == 0) return out;
      out.kind = host_side ? Resolved::Kind::kPinnedHost : Resolved::Kind::kMappedHost;
      out.host = host;
      out.range = r;
      return out;
    }
  }
  if (host_side) {
    out.kind = Resolved::Kind::kPageableHost;
    out.host = host;
  }
  return out;
}

// Removes this process's leftovers of earlier processes that died without
// freeing (the files of a pid that no longer runs).
void SweepStaleFiles() {
  DIR* dir = ::opendir(kShmDir);
  if (dir == nullptr) return;
  const size_t prefix = std::strlen(kFilePrefix);
  while (dirent* entry = ::readdir(dir)) {
    if (std::strncmp(entry->d_name, kFilePrefix, prefix) != 0) continue;
    const long pid = std::strtol(entry->d_name + prefix, nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    ::unlinkat(::dirfd(dir), entry->d_name, 0);
  }
  ::closedir(dir);
}

// The copy engine: runs on a stream worker. The Nth copy of a device fails
// with a sticky error when BLOCKSWAP_STANDIN_STICKY_AT says so.
void RunCopy(Context* ctx, void* dst, const void* src, size_t bytes, bool host_to_device) {
  const Settings& settings = GetSettings();
  const int64_t n = ctx->copies_executed.fetch_add(1) + 1;
  if (settings.sticky_device == ctx->ordinal && settings.sticky_at_copy == n) {
    CUresult expected = CUDA_SUCCESS;
    ctx->sticky.compare_exchange_strong(expected, CUDA_ERROR_ILLEGAL_ADDRESS);
    std::fprintf(stderr,
                 "stand-in CUDA driver (pid %d): copy %lld on device %d faults "
                 "(BLOCKSWAP_STANDIN_STICKY_AT): the context is poisoned\n",
                 static_cast<int>(::getpid()), static_cast<long long>(n), ctx->ordinal);
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
    CheckImportAlive(keep_to, use.c_str());
    CheckImportAlive(keep_from, use.c_str());
    RunCopy(ctx, target, source, bytes, host_to_device);
  });
  // To pageable memory: returns once the copy is done (the driver's rule for
  // device-to-pageable copies).
  if (to.kind == Resolved::Kind::kPageableHost) Synchronize(stream);
  return ctx->sticky.load();
}

// A stream memory operation's address: device memory, or host memory
// registered with CU_MEMHOSTREGISTER_DEVICEMAP through the device pointer
// cuMemHostGetDevicePointer gave (cuStreamWaitValue32: "If the memory was
// registered via cuMemHostRegister(), the device pointer should be obtained
// with cuMemHostGetDevicePointer()"). Anything else: CUDA_ERROR_INVALID_VALUE.
CUresult ResolveWord(CUstream_st* stream, CUdeviceptr addr, std::atomic<uint32_t>** word,
                     std::shared_ptr<Allocation>* keep) {
  if (addr % sizeof(uint32_t) != 0) return CUDA_ERROR_INVALID_VALUE;
  Resolved r = Resolve(static_cast<uintptr_t>(addr), sizeof(uint32_t), /*host_side=*/false);
  if (r.kind == Resolved::Kind::kUnknown) return CUDA_ERROR_INVALID_VALUE;
  // Registered without CU_MEMHOSTREGISTER_PORTABLE: pinned for the
  // registering context only.
  if (r.kind == Resolved::Kind::kMappedHost &&
      (r.range.flags & CU_MEMHOSTREGISTER_PORTABLE) == 0 && r.range.ctx != stream->ctx) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *word = reinterpret_cast<std::atomic<uint32_t>*>(r.host);
  *keep = r.allocation;
  return CUDA_SUCCESS;
}

bool WaitValueSatisfied(uint32_t current, uint32_t value, unsigned kind) {
  switch (kind) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return static_cast<int32_t>(current - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return current == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (current & value) != 0;
    default:  // CU_STREAM_WAIT_VALUE_NOR
      return ~(current | value) != 0;
  }
}

CUresult CreateEventFile(Context* ctx, unsigned flags, CUevent_st* event) {
  Driver& driver = GetDriver();
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(driver.mu);
    id = driver.next_file++;
  }
  const auto pid = static_cast<uint32_t>(::getpid());
  event->path = FilePath(pid, "event", id);
  event->file_id = id;
  // Mode 0666 through the creator's umask, owned by its uid and gid: whether
  // another process may open it is what the file system says (the observation
  // in cuda-rules.md, "IPC event handles resolve through files in /dev/shm").
  const int fd = ::open(event->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  const size_t size = PageSize();
  void* mapping = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(size)) == 0) {
    mapping = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (mapping == MAP_FAILED) {
    ::unlink(event->path.c_str());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  event->memory = std::make_shared<EventMemory>();
  event->memory->mapping = mapping;
  event->memory->mapping_size = size;
  event->memory->state = new (mapping) EventState();
  (void)ctx;
  return CUDA_SUCCESS;
}

void InitializeEventState(EventState& state, unsigned flags) {
  state.magic = EventState::kMagic;
  state.flags = flags;
  state.records.store(0);
  state.completed.store(0);
  state.completed_ns.store(0);
  state.last_recorder.store(0);
  state.creator = lifetime::ProcessKey();
  lifetime::InitializeLedger(state.ledger);
}

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

}  // namespace
}  // namespace blockswap::standin

using namespace blockswap::standin;  // NOLINT: the entry points below are C

extern "C" {

// ---------------------------------------------------------------- init, errors

CUresult CUDAAPI cuInit(unsigned int flags) {
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(Enter("cuInit", /*needs_init=*/false));
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const Settings& settings = GetSettings();
  if (settings.device_count <= 0) return CUDA_ERROR_NO_DEVICE;
  Driver& driver = GetDriver();
  std::lock_guard<std::mutex> lock(driver.mu);
  if (driver.initialized.load()) return CUDA_SUCCESS;
  SweepStaleFiles();
  // Under the lock throughout, so that a concurrent cuInit finds everything
  // or nothing (creating a legacy stream takes no lock).
  for (int i = 0; i < settings.device_count; ++i) {
    auto ctx = std::make_unique<Context>();
    ctx->ordinal = i;
    ctx->legacy_stream = CreateStream(ctx.get(), /*non_blocking=*/false, /*legacy=*/true);
    driver.contexts.push_back(std::move(ctx));
  }
  driver.initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(Enter("cuDriverGetVersion", /*needs_init=*/false));
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = GetSettings().driver_version;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** name) {
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(Enter("cuGetErrorName", /*needs_init=*/false));
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& e : kErrors) {
    if (e.code == error) {
      *name = e.name;
      return CUDA_SUCCESS;
    }
  }
  *name = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** text) {
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(Enter("cuGetErrorString", /*needs_init=*/false));
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& e : kErrors) {
    if (e.code == error) {
      *text = e.text;
      return CUDA_SUCCESS;
    }
  }
  *text = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

// ---------------------------------------------------------------- devices

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  BLOCKSWAP_STANDIN_ENTER();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(GetDriver().contexts.size());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  BLOCKSWAP_STANDIN_ENTER();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= static_cast<int>(GetDriver().contexts.size())) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *device = ordinal;
  return CUDA_SUCCESS;
}

namespace {
CUresult CheckDevice(CUdevice device) {
  return device < 0 || device >= static_cast<int>(GetDriver().contexts.size())
             ? CUDA_ERROR_INVALID_DEVICE
             : CUDA_SUCCESS;
}
}  // namespace

CUresult CUDAAPI cuDeviceGetName(char* name, int length, CUdevice device) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CheckDevice(device));
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(length),
                "blockswap stand-in CUDA device %d (a test double, not a GPU)", device);
  return CUDA_SUCCESS;
}

// Stable across processes and runs: "stand-in" and the ordinal.
CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CheckDevice(device));
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static constexpr char kStem[] = "stand-in";
  std::memset(uuid->bytes, 0, sizeof(uuid->bytes));
  std::memcpy(uuid->bytes, kStem, 8);
  uuid->bytes[15] = static_cast<char>(device);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice device) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CheckDevice(device));
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = GetSettings().memory_bytes;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CheckDevice(device));
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
      *value = GetSettings().host_register ? 1 : 0;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
      *value = GetSettings().stream_mem_ops ? 1 : 0;
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      *value = 1;
      break;
    // Zero, so that a device pointer of registered memory differs from its
    // host pointer (cuMemHostRegister: "If any device visible to the
    // application has a zero value for the device attribute, the device
    // pointer returned by cuMemHostGetDevicePointer() will not match the
    // original host pointer").
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
      *value = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = 2;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *value = device;
      break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      *value = 1;
      break;
    default:
      if (attribute <= 0 || attribute >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
      *value = 0;
      break;
  }
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- contexts

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CheckDevice(device));
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = GetDriver().contexts[static_cast<size_t>(device)].get();
  context->retained.fetch_add(1);
  *ctx = ToHandle(context);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CheckDevice(device));
  Context* context = GetDriver().contexts[static_cast<size_t>(device)].get();
  int retained = context->retained.load();
  do {
    if (retained == 0) return CUDA_ERROR_INVALID_CONTEXT;
  } while (!context->retained.compare_exchange_weak(retained, retained - 1));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* ctx) {
  BLOCKSWAP_STANDIN_ENTER();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = context_stack.empty() ? nullptr : ToHandle(context_stack.back());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  BLOCKSWAP_STANDIN_ENTER();
  if (context_stack.empty()) {
    if (ctx != nullptr) context_stack.push_back(FromHandle(ctx));
  } else if (ctx == nullptr) {
    context_stack.pop_back();
  } else {
    context_stack.back() = FromHandle(ctx);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  BLOCKSWAP_STANDIN_ENTER();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  context_stack.push_back(FromHandle(ctx));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext* ctx) {
  BLOCKSWAP_STANDIN_ENTER();
  if (context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr) *ctx = ToHandle(context_stack.back());
  context_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  BLOCKSWAP_STANDIN_ENTER();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  *device = ctx->ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize() {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  SynchronizeContext(ctx);
  return ctx->sticky.load();
}

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
    allocation->path = FilePath(static_cast<uint32_t>(::getpid()), "mem", driver.next_file++);
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
    if (it == driver.allocations.end() || it->second->imported) return CUDA_ERROR_INVALID_VALUE;
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
  Enqueue(stream, [target, value, count, keep = r.allocation] {
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
    // The base of an allocation of this process (an import cannot be
    // exported again).
    if (it == GetDriver().allocations.end() || it->second->imported) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    allocation = it->second;
  }
  MemHandle wire{};
  wire.magic = MemHandle::kMagic;
  wire.pid = allocation->exporter_pid;
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
  allocation->path = FilePath(wire.pid, "mem", wire.file_id);
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

// ---------------------------------------------------------------- events

CUresult CUDAAPI cuEventCreate(CUevent* event, unsigned int flags) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  constexpr unsigned kKnown = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                              CU_EVENT_INTERPROCESS;
  if (event == nullptr || (flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  // "CU_EVENT_INTERPROCESS ... CU_EVENT_DISABLE_TIMING must be set".
  if ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto created = std::make_unique<CUevent_st>();
  created->ctx = ctx;
  created->flags = flags;
  if ((flags & CU_EVENT_INTERPROCESS) != 0) {
    BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CreateEventFile(ctx, flags, created.get()));
  } else {
    created->memory = std::make_shared<EventMemory>();
    created->memory->state = new EventState();
  }
  InitializeEventState(created->state(), flags);
  std::lock_guard<std::mutex> lock(GetDriver().mu);
  GetDriver().events.insert(created.get());
  *event = created.release();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent event) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ResolveEvent(event));
  {
    std::lock_guard<std::mutex> lock(GetDriver().mu);
    GetDriver().events.erase(event);
  }
  std::unique_ptr<CUevent_st> owned(event);
  if (event->imported) {
    event->claim.reset();
  } else if ((event->flags & CU_EVENT_INTERPROCESS) != 0) {
    const std::string holders = lifetime::MarkFreed(event->state().ledger);
    if (!holders.empty()) {
      ReportViolation("cuEventDestroy of an exported event while " + holders +
                      " still imports it (its later use there is undefined)");
    }
    ::unlink(event->path.c_str());
  }
  // Pending records keep the state alive (`memory` is shared with them), as
  // the driver releases an event's resources once its work completed.
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent event, CUstream handle) {
  BLOCKSWAP_STANDIN_ENTER();
  CUstream_st* stream = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(EnterStream(handle, &stream));
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ResolveEvent(event));
  // The event and the stream must belong to one context.
  if (event->ctx != stream->ctx) return CUDA_ERROR_INVALID_HANDLE;
  CheckImportedEventAlive(event, "cuEventRecord");
  EventState& state = event->state();
  const uint32_t generation = state.records.fetch_add(1, std::memory_order_acq_rel) + 1;
  state.last_recorder.store(lifetime::ProcessKey(), std::memory_order_release);
  Enqueue(stream, [memory = event->memory, generation] {
    CompleteRecord(*memory->state, generation);
  });
  return CUDA_SUCCESS;
}

// Complete when the newest record has (cuEventRecord: "Before the first call
// to cuEventRecord(), an event represents an empty set of work, so for example
// cuEventQuery() would return CUDA_SUCCESS").
CUresult CUDAAPI cuEventQuery(CUevent event) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ResolveEvent(event));
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(event->ctx->sticky.load());
  CheckImportedEventAlive(event, "cuEventQuery");
  return EventComplete(event->state()) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventSynchronize(CUevent event) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ResolveEvent(event));
  CheckImportedEventAlive(event, "cuEventSynchronize");
  AwaitRecord(event->state(), event->state().records.load());
  return event->ctx->sticky.load();
}

CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ResolveEvent(start));
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ResolveEvent(end));
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Timing needs both events created with timing and recorded.
  if ((start->flags & CU_EVENT_DISABLE_TIMING) != 0 || (end->flags & CU_EVENT_DISABLE_TIMING) != 0 ||
      start->state().records.load() == 0 || end->state().records.load() == 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!EventComplete(start->state()) || !EventComplete(end->state())) return CUDA_ERROR_NOT_READY;
  const auto begin_ns = static_cast<int64_t>(start->state().completed_ns.load());
  const auto end_ns = static_cast<int64_t>(end->state().completed_ns.load());
  *ms = static_cast<float>(static_cast<double>(end_ns - begin_ns) / 1e6);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- IPC events

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle* handle, CUevent event) {
  BLOCKSWAP_STANDIN_ENTER();
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ResolveEvent(event));
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // "This event must have been created with the CU_EVENT_INTERPROCESS and
  // CU_EVENT_DISABLE_TIMING flags set"; of the documented results the
  // stand-in answers "invalid resource handle".
  if ((event->flags & CU_EVENT_INTERPROCESS) == 0) return CUDA_ERROR_INVALID_HANDLE;
  EventHandle wire{};
  wire.magic = EventHandle::kMagic;
  wire.pid = static_cast<uint32_t>(event->state().creator);
  wire.file_id = event->file_id;
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle->reserved, &wire, sizeof(wire));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent* event, CUipcEventHandle handle) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  EventHandle wire;
  std::memcpy(&wire, handle.reserved, sizeof(wire));
  if (wire.magic != EventHandle::kMagic) return CUDA_ERROR_INVALID_VALUE;
  // As for memory handles: "invalid device context" in the exporter (what
  // HIP documents for its copy of this call, hipErrorInvalidContext).
  if (wire.pid == static_cast<uint32_t>(::getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  auto opened = std::make_unique<CUevent_st>();
  opened->path = FilePath(wire.pid, "event", wire.file_id);
  const int fd = ::open(opened->path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    // Another user's file it may not open, or an event already destroyed:
    // the handle cannot be opened ("invalid argument", as LMCache/LMCache#3236
    // saw for a destroyed one).
    std::fprintf(stderr, "stand-in CUDA driver (pid %d): cuIpcOpenEventHandle: %s: %s\n",
                 static_cast<int>(::getpid()), opened->path.c_str(), std::strerror(errno));
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t size = PageSize();
  void* mapping = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  opened->memory = std::make_shared<EventMemory>();
  opened->memory->mapping = mapping;
  opened->memory->mapping_size = size;
  opened->memory->state = static_cast<EventState*>(mapping);
  if (opened->state().magic != EventState::kMagic) return CUDA_ERROR_INVALID_VALUE;
  auto claim = lifetime::ImportClaim::Claim(opened->state().ledger, "stand-in event");
  if (!claim.ok()) return CUDA_ERROR_TOO_MANY_PEERS;
  opened->claim.emplace(std::move(*claim));
  opened->ctx = ctx;
  // "behaves like a locally created event with the CU_EVENT_DISABLE_TIMING
  // flag specified".
  opened->flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  opened->imported = true;
  opened->file_id = wire.file_id;
  std::lock_guard<std::mutex> lock(GetDriver().mu);
  GetDriver().events.insert(opened.get());
  *event = opened.release();
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- streams

CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
  BLOCKSWAP_STANDIN_ENTER();
  Context* ctx = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(CurrentContext(&ctx));
  if (stream == nullptr || (flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUstream_st* created =
      CreateStream(ctx, (flags & CU_STREAM_NON_BLOCKING) != 0, /*legacy=*/false);
  std::lock_guard<std::mutex> lock(GetDriver().mu);
  GetDriver().streams.insert(created);
  *stream = created;
  return CUDA_SUCCESS;
}

// Returns at once; the stream's work still runs ("resources ... released
// automatically once the device has completed all work").
CUresult CUDAAPI cuStreamDestroy(CUstream stream) {
  BLOCKSWAP_STANDIN_ENTER();
  {
    std::lock_guard<std::mutex> lock(GetDriver().mu);
    if (GetDriver().streams.erase(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  ReleaseStream(stream);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream handle) {
  BLOCKSWAP_STANDIN_ENTER();
  CUstream_st* stream = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(EnterStream(handle, &stream));
  Synchronize(stream);
  return stream->ctx->sticky.load();
}

CUresult CUDAAPI cuStreamQuery(CUstream handle) {
  BLOCKSWAP_STANDIN_ENTER();
  CUstream_st* stream = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(EnterStream(handle, &stream));
  return Idle(stream) ? stream->ctx->sticky.load() : CUDA_ERROR_NOT_READY;
}

// Binds to the newest record issued before this call (cuEventRecord: "Other
// APIs such as cuStreamWaitEvent() use the most recently captured state at the
// time of the API call, and are not affected by later calls").
CUresult CUDAAPI cuStreamWaitEvent(CUstream handle, CUevent event, unsigned int flags) {
  BLOCKSWAP_STANDIN_ENTER();
  CUstream_st* stream = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(EnterStream(handle, &stream));
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ResolveEvent(event));
  if (flags != CU_EVENT_WAIT_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  CheckImportedEventAlive(event, "cuStreamWaitEvent");
  const uint32_t target = event->state().records.load(std::memory_order_acquire);
  Enqueue(stream, [memory = event->memory, target] { AwaitRecord(*memory->state, target); });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream handle, CUstreamCaptureStatus* status) {
  BLOCKSWAP_STANDIN_ENTER();
  CUstream_st* stream = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(EnterStream(handle, &stream));
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *status = CU_STREAM_CAPTURE_STATUS_NONE;  // the stand-in has no graphs
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream handle, CUhostFn fn, void* user_data) {
  BLOCKSWAP_STANDIN_ENTER();
  CUstream_st* stream = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(EnterStream(handle, &stream));
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Enqueue(stream, [fn, user_data] {
    SetInHostFunction(true);
    fn(user_data);
    SetInHostFunction(false);
  });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWaitValue32(CUstream handle, CUdeviceptr addr, cuuint32_t value,
                                     unsigned int flags) {
  BLOCKSWAP_STANDIN_ENTER();
  CUstream_st* stream = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(EnterStream(handle, &stream));
  if (!GetSettings().stream_mem_ops) return CUDA_ERROR_NOT_SUPPORTED;
  const unsigned kind = flags & ~unsigned{CU_STREAM_WAIT_VALUE_FLUSH};
  if (kind > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  std::atomic<uint32_t>* word = nullptr;
  std::shared_ptr<Allocation> keep;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ResolveWord(stream, addr, &word, &keep));
  Enqueue(stream, [word, value, kind, keep] {
    // Whoever writes the word may do it with a plain store (no wake), so the
    // wait also polls.
    while (true) {
      const uint32_t current = word->load(std::memory_order_acquire);
      if (WaitValueSatisfied(current, value, kind)) return;
      timespec timeout{0, 200 * 1000};
      ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, current, &timeout,
                nullptr, 0);
    }
  });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWriteValue32(CUstream handle, CUdeviceptr addr, cuuint32_t value,
                                      unsigned int flags) {
  BLOCKSWAP_STANDIN_ENTER();
  CUstream_st* stream = nullptr;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(EnterStream(handle, &stream));
  if (!GetSettings().stream_mem_ops) return CUDA_ERROR_NOT_SUPPORTED;
  if ((flags & ~unsigned{CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER}) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::atomic<uint32_t>* word = nullptr;
  std::shared_ptr<Allocation> keep;
  BLOCKSWAP_STANDIN_RETURN_IF_ERROR(ResolveWord(stream, addr, &word, &keep));
  Enqueue(stream, [word, value, keep] {
    word->store(value, std::memory_order_release);
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr,
              nullptr, 0);
  });
  return CUDA_SUCCESS;
}

}  // extern "C"
