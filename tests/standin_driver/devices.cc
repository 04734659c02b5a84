// The stand-in CUDA driver's entry points for initialisation, errors,
// devices and contexts (a TEST DOUBLE, README.md).
#include <cuda.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "tests/standin_driver/entry_points.h"
#include "tests/standin_driver/standin.h"

namespace blockswap::standin {
namespace {

// Removes this process's leftovers of earlier processes that died without
// freeing (the files of a pid that no longer runs).
void SweepStaleFiles() {
  DIR* dir = ::opendir(kShmDir);
  if (dir == nullptr) return;
  const size_t prefix = std::strlen(kFilePrefix);
  while (dirent* entry = ::readdir(dir)) {
    if (std::strncmp(entry->d_name, kFilePrefix, prefix) != 0) continue;
    // cuda-standin.<uid>.<pid>.<kind>.<n>: the pid is the second number.
    char* end = nullptr;
    std::strtol(entry->d_name + prefix, &end, 10);
    if (*end != '.') continue;
    const long pid = std::strtol(end + 1, nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    ::unlinkat(::dirfd(dir), entry->d_name, 0);
  }
  ::closedir(dir);
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
    // Read-only registration itself is not modelled: the flag is accepted.
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
      *value = GetSettings().host_register ? 1 : 0;
      break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      *value = GetSettings().vmm ? 1 : 0;
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
  *ctx = ContextStack().empty() ? nullptr : ToHandle(ContextStack().back());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  BLOCKSWAP_STANDIN_ENTER();
  if (ContextStack().empty()) {
    if (ctx != nullptr) ContextStack().push_back(FromHandle(ctx));
  } else if (ctx == nullptr) {
    ContextStack().pop_back();
  } else {
    ContextStack().back() = FromHandle(ctx);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  BLOCKSWAP_STANDIN_ENTER();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextStack().push_back(FromHandle(ctx));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext* ctx) {
  BLOCKSWAP_STANDIN_ENTER();
  if (ContextStack().empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr) *ctx = ToHandle(ContextStack().back());
  ContextStack().pop_back();
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

}  // extern "C"
