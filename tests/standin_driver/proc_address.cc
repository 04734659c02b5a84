// The stand-in driver's cuGetProcAddress (both forms) and the hooks its own
// tests use (blockswap_standin_*, declared in standin_hooks.h).
#include <cuda.h>

#include <cstring>
#include <string>

#include "tests/standin_driver/standin.h"
#include "tests/standin_driver/standin_hooks.h"

namespace {

// One entry point under its base name: the implementation serves every
// requested CUDA version from `since` up to the driver's own version (the
// ABI of each base name is the same over that range for everything the
// stand-in implements).
struct EntryPoint {
  const char* name;
  int since;
  void* fn;
};

CUresult CUDAAPI GetProcAddressV1(const char* symbol, void** fn, int version, cuuint64_t flags);

// `#name` is the base name; `name` expands to cuda.h's ABI name (cuMemAlloc
// to cuMemAlloc_v2 and so on), the function devices.cc, memory.cc, vmm.cc or
// events_streams.cc defines.
#define BLOCKSWAP_STANDIN_ENTRY(name, since) {#name, since, reinterpret_cast<void*>(&name)}
const EntryPoint kEntryPoints[] = {
    BLOCKSWAP_STANDIN_ENTRY(cuInit, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuDriverGetVersion, 2020),
    BLOCKSWAP_STANDIN_ENTRY(cuGetErrorName, 6000),
    BLOCKSWAP_STANDIN_ENTRY(cuGetErrorString, 6000),
    BLOCKSWAP_STANDIN_ENTRY(cuDeviceGetCount, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuDeviceGet, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuDeviceGetName, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuDeviceGetUuid, 9020),
    BLOCKSWAP_STANDIN_ENTRY(cuDeviceGetAttribute, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuDeviceTotalMem, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuDevicePrimaryCtxRetain, 7000),
    BLOCKSWAP_STANDIN_ENTRY(cuDevicePrimaryCtxRelease, 7000),
    BLOCKSWAP_STANDIN_ENTRY(cuCtxGetCurrent, 4000),
    BLOCKSWAP_STANDIN_ENTRY(cuCtxSetCurrent, 4000),
    BLOCKSWAP_STANDIN_ENTRY(cuCtxPushCurrent, 4000),
    BLOCKSWAP_STANDIN_ENTRY(cuCtxPopCurrent, 4000),
    BLOCKSWAP_STANDIN_ENTRY(cuCtxGetDevice, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuCtxSynchronize, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuMemAlloc, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemFree, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemGetInfo, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemGetAddressRange, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemAllocHost, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemFreeHost, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuMemHostRegister, 4000),
    BLOCKSWAP_STANDIN_ENTRY(cuMemHostUnregister, 4000),
    BLOCKSWAP_STANDIN_ENTRY(cuMemHostGetDevicePointer, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemcpyHtoDAsync, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemcpyDtoHAsync, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemcpyDtoDAsync, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemcpyAsync, 4000),
    BLOCKSWAP_STANDIN_ENTRY(cuMemsetD8Async, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuIpcGetMemHandle, 4010),
    BLOCKSWAP_STANDIN_ENTRY(cuIpcOpenMemHandle, 4010),
    BLOCKSWAP_STANDIN_ENTRY(cuIpcCloseMemHandle, 4010),
    BLOCKSWAP_STANDIN_ENTRY(cuIpcGetEventHandle, 4010),
    BLOCKSWAP_STANDIN_ENTRY(cuIpcOpenEventHandle, 4010),
    BLOCKSWAP_STANDIN_ENTRY(cuEventCreate, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuEventDestroy, 4000),
    BLOCKSWAP_STANDIN_ENTRY(cuEventRecord, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuEventQuery, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuEventSynchronize, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuEventElapsedTime, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuStreamCreate, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuStreamDestroy, 4000),
    BLOCKSWAP_STANDIN_ENTRY(cuStreamSynchronize, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuStreamQuery, 2000),
    BLOCKSWAP_STANDIN_ENTRY(cuStreamWaitEvent, 3020),
    BLOCKSWAP_STANDIN_ENTRY(cuStreamIsCapturing, 10000),
    BLOCKSWAP_STANDIN_ENTRY(cuLaunchHostFunc, 10000),
    BLOCKSWAP_STANDIN_ENTRY(cuStreamWaitValue32, 8000),
    BLOCKSWAP_STANDIN_ENTRY(cuStreamWriteValue32, 8000),
    BLOCKSWAP_STANDIN_ENTRY(cuPointerGetAttribute, 4000),
    BLOCKSWAP_STANDIN_ENTRY(cuPointerGetAttributes, 7000),
    BLOCKSWAP_STANDIN_ENTRY(cuMemGetAllocationGranularity, 10020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemCreate, 10020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemRelease, 10020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemExportToShareableHandle, 10020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemImportFromShareableHandle, 10020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemAddressReserve, 10020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemAddressFree, 10020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemMap, 10020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemUnmap, 10020),
    BLOCKSWAP_STANDIN_ENTRY(cuMemSetAccess, 10020),
};
#undef BLOCKSWAP_STANDIN_ENTRY

// The lookup of both forms: `status` may be null (the 11.3 form has none).
CUresult Lookup(const char* symbol, void** fn, int version,
                CUdriverProcAddressQueryResult* status) {
  using blockswap::standin::GetSettings;
  if (blockswap::standin::InHostFunction()) {
    blockswap::standin::ReportViolation(
        "cuGetProcAddress called from inside a host function (cuLaunchHostFunc)");
    return CUDA_ERROR_NOT_PERMITTED;
  }
  if (symbol == nullptr || fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *fn = nullptr;
  auto answer = [&](CUdriverProcAddressQueryResult result) {
    if (status != nullptr) *status = result;
    return result == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
  };
  const int driver = GetSettings().driver_version;
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    if (version < 11030 || version > driver) {
      return answer(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    }
    *fn = version >= 12000 ? reinterpret_cast<void*>(&cuGetProcAddress)  // the _v2 form
                           : reinterpret_cast<void*>(&GetProcAddressV1);
    return answer(CU_GET_PROC_ADDRESS_SUCCESS);
  }
  for (const EntryPoint& entry : kEntryPoints) {
    if (std::strcmp(symbol, entry.name) != 0) continue;
    if (version < entry.since || version > driver) {
      return answer(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    }
    *fn = entry.fn;
    return answer(CU_GET_PROC_ADDRESS_SUCCESS);
  }
  return answer(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

CUresult CUDAAPI GetProcAddressV1(const char* symbol, void** fn, int version, cuuint64_t flags) {
  return Lookup(symbol, fn, version, nullptr);
}

}  // namespace

extern "C" {

// cuda.h names this one cuGetProcAddress_v2 (the CUDA 12 form).
CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** fn, int version, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult* status) {
  return Lookup(symbol, fn, version, status);
}

// The CUDA 11.3 form under its own name, for a loader that finds no _v2.
CUresult CUDAAPI blockswap_standin_cuGetProcAddress_v1(const char* symbol, void** fn, int version,
                                                       cuuint64_t flags)
    __asm__("cuGetProcAddress");
CUresult CUDAAPI blockswap_standin_cuGetProcAddress_v1(const char* symbol, void** fn, int version,
                                                       cuuint64_t flags) {
  return Lookup(symbol, fn, version, nullptr);
}

const char* blockswap_standin_driver() {
  return "blockswap stand-in CUDA driver (a test double: it proves rules are kept, never that a "
         "GPU works)";
}

int blockswap_standin_violation_count() { return blockswap::standin::ViolationCount(); }

void blockswap_standin_last_violation(char* text, size_t size) {
  if (text == nullptr || size == 0) return;
  std::string last = blockswap::standin::LastViolation();
  std::strncpy(text, last.c_str(), size - 1);
  text[size - 1] = '\0';
}

void blockswap_standin_poison_device(int ordinal, CUresult error) {
  auto& contexts = blockswap::standin::GetDriver().contexts;
  if (ordinal < 0 || ordinal >= static_cast<int>(contexts.size())) return;
  CUresult expected = CUDA_SUCCESS;
  contexts[static_cast<size_t>(ordinal)]->sticky.compare_exchange_strong(expected, error);
}

void* blockswap_standin_host_address(CUdeviceptr dptr) {
  return blockswap::standin::HostAddressOf(dptr);
}

}  // extern "C"
