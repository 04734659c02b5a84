// The CUDA driver API, reached through one table of entry points resolved at
// run time (docs/backends.md, "How CUDA is reached"): dlopen("libcuda.so.1"),
// one dlsym of the driver's entry-point lookup (cuGetProcAddress), and every
// other entry point through that lookup at the explicit version listed below.
// Nothing links libcuda (a binary that needs it does not start without the
// driver) and nothing links a CUDA runtime (a runtime needs a driver of at
// least its own major version; the driver API needs only the versions of the
// entry points used).
//
// Built only with BLOCKSWAP_HAVE_CUDA (it includes the toolkit's headers,
// never its libraries). Included by the cuda backend, the demo and the
// stand-in driver of the tests, which implements exactly the list below.
#ifndef BLOCKSWAP_SHARED_BACKEND_CUDA_DRIVER_H_
#define BLOCKSWAP_SHARED_BACKEND_CUDA_DRIVER_H_

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Every driver entry point the product calls, once: X(name, version, type).
// `name` is the driver's base name (what cuGetProcAddress is asked for),
// `version` the CUDA version (1000 * major + 10 * minor) whose ABI of it the
// product was written against, `type` the matching PFN typedef of
// <cudaTypedefs.h>. The lookup returns the entry point as of that version, so
// a newer driver keeps its meaning; an older driver lacks it. The lowest
// driver the product needs follows from this list (kLowestCudaDriverVersion).
//
// The legacy default stream is meant wherever a stream argument is null
// (cuGetProcAddress is asked with CU_GET_PROC_ADDRESS_LEGACY_STREAM), as in a
// trainer that wraps torch's default stream.
#define BLOCKSWAP_CUDA_DRIVER_ENTRY_POINTS(X)                               \
  X(cuInit, 2000, PFN_cuInit_v2000)                                         \
  X(cuDriverGetVersion, 2020, PFN_cuDriverGetVersion_v2020)                 \
  X(cuGetErrorName, 6000, PFN_cuGetErrorName_v6000)                         \
  X(cuGetErrorString, 6000, PFN_cuGetErrorString_v6000)                     \
  X(cuDeviceGetCount, 2000, PFN_cuDeviceGetCount_v2000)                     \
  X(cuDeviceGet, 2000, PFN_cuDeviceGet_v2000)                               \
  X(cuDeviceGetName, 2000, PFN_cuDeviceGetName_v2000)                       \
  X(cuDeviceGetUuid, 11040, PFN_cuDeviceGetUuid_v11040)                     \
  X(cuDeviceTotalMem, 3020, PFN_cuDeviceTotalMem_v3020)                     \
  X(cuDeviceGetAttribute, 2000, PFN_cuDeviceGetAttribute_v2000)             \
  X(cuDevicePrimaryCtxRetain, 7000, PFN_cuDevicePrimaryCtxRetain_v7000)     \
  X(cuDevicePrimaryCtxRelease, 11000, PFN_cuDevicePrimaryCtxRelease_v11000) \
  X(cuCtxGetCurrent, 4000, PFN_cuCtxGetCurrent_v4000)                       \
  X(cuCtxSetCurrent, 4000, PFN_cuCtxSetCurrent_v4000)                       \
  X(cuMemGetInfo, 3020, PFN_cuMemGetInfo_v3020)                             \
  X(cuMemAlloc, 3020, PFN_cuMemAlloc_v3020)                                 \
  X(cuMemFree, 3020, PFN_cuMemFree_v3020)                                   \
  X(cuMemAllocHost, 3020, PFN_cuMemAllocHost_v3020)                         \
  X(cuMemFreeHost, 2000, PFN_cuMemFreeHost_v2000)                           \
  X(cuMemHostRegister, 6050, PFN_cuMemHostRegister_v6050)                   \
  X(cuMemHostUnregister, 4000, PFN_cuMemHostUnregister_v4000)               \
  X(cuMemHostGetDevicePointer, 3020, PFN_cuMemHostGetDevicePointer_v3020)   \
  X(cuMemGetAllocationGranularity, 10020,                                   \
    PFN_cuMemGetAllocationGranularity_v10020)                               \
  X(cuMemCreate, 10020, PFN_cuMemCreate_v10020)                             \
  X(cuMemRelease, 10020, PFN_cuMemRelease_v10020)                           \
  X(cuMemExportToShareableHandle, 10020,                                    \
    PFN_cuMemExportToShareableHandle_v10020)                                \
  X(cuMemImportFromShareableHandle, 10020,                                  \
    PFN_cuMemImportFromShareableHandle_v10020)                              \
  X(cuMemAddressReserve, 10020, PFN_cuMemAddressReserve_v10020)             \
  X(cuMemAddressFree, 10020, PFN_cuMemAddressFree_v10020)                   \
  X(cuMemMap, 10020, PFN_cuMemMap_v10020)                                   \
  X(cuMemUnmap, 10020, PFN_cuMemUnmap_v10020)                               \
  X(cuMemSetAccess, 10020, PFN_cuMemSetAccess_v10020)                       \
  X(cuEventCreate, 2000, PFN_cuEventCreate_v2000)                           \
  X(cuEventDestroy, 4000, PFN_cuEventDestroy_v4000)                         \
  X(cuEventRecord, 2000, PFN_cuEventRecord_v2000)                           \
  X(cuEventQuery, 2000, PFN_cuEventQuery_v2000)                             \
  X(cuEventSynchronize, 2000, PFN_cuEventSynchronize_v2000)                 \
  X(cuEventElapsedTime, 2000, PFN_cuEventElapsedTime_v2000)                 \
  X(cuStreamCreate, 2000, PFN_cuStreamCreate_v2000)                         \
  X(cuStreamDestroy, 4000, PFN_cuStreamDestroy_v4000)                       \
  X(cuStreamSynchronize, 2000, PFN_cuStreamSynchronize_v2000)               \
  X(cuStreamWaitEvent, 3020, PFN_cuStreamWaitEvent_v3020)                   \
  X(cuMemcpyHtoDAsync, 3020, PFN_cuMemcpyHtoDAsync_v3020)                   \
  X(cuMemcpyDtoHAsync, 3020, PFN_cuMemcpyDtoHAsync_v3020)                   \
  X(cuLaunchHostFunc, 10000, PFN_cuLaunchHostFunc_v10000)                   \
  X(cuStreamWaitValue32, 11070, PFN_cuStreamWaitValue32_v11070)             \
  X(cuStreamWriteValue32, 11070, PFN_cuStreamWriteValue32_v11070)

namespace blockswap::cuda_internal {

// The lookup itself: cuGetProcAddress as of CUDA 11.3 (no query result). The
// table prefers the 12.0 form (cuGetProcAddress_v2), which says whether a
// symbol is missing or only too new, and falls back to this one on drivers
// before 12.0, so the lookup adds nothing to the lowest driver beyond 11.3.
inline constexpr int kCuGetProcAddressVersion = 11030;

namespace detail {
inline constexpr int kEntryPointVersions[] = {
    kCuGetProcAddressVersion,
#define BLOCKSWAP_CUDA_DRIVER_VERSION_OF(name, version, type) version,
    BLOCKSWAP_CUDA_DRIVER_ENTRY_POINTS(BLOCKSWAP_CUDA_DRIVER_VERSION_OF)
#undef BLOCKSWAP_CUDA_DRIVER_VERSION_OF
};
constexpr int MaxVersion() {
  int highest = 0;
  for (int version : kEntryPointVersions) highest = version > highest ? version : highest;
  return highest;
}
}  // namespace detail

// The lowest driver (as cuDriverGetVersion reports it) the product runs on:
// the highest version of the entry points it resolves. Checked when the
// driver is loaded; reported at daemon start and at Attach.
inline constexpr int kLowestCudaDriverVersion = detail::MaxVersion();

// "11.7" for 11070.
std::string CudaVersionString(int version);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lowercase, as nvidia-smi prints
// a GPU's UUID. It is the same in every process whatever CUDA_VISIBLE_DEVICES
// says, which is why devices are named by it on the wire. (A MIG instance is
// printed with the same "GPU-" prefix, not nvidia-smi's "MIG-": daemon and
// client format it alike either way.)
std::string FormatGpuUuid(const CUuuid& uuid);

// One pointer per entry point of BLOCKSWAP_CUDA_DRIVER_ENTRY_POINTS, each
// non-null once the table is loaded.
struct CudaDriverTable {
#define BLOCKSWAP_CUDA_DRIVER_FIELD(name, version, type) type name = nullptr;
  BLOCKSWAP_CUDA_DRIVER_ENTRY_POINTS(BLOCKSWAP_CUDA_DRIVER_FIELD)
#undef BLOCKSWAP_CUDA_DRIVER_FIELD
};

// The process's driver: loaded on the first call, from then on the same
// table for every caller, never unloaded (host functions and the primary
// contexts of other libraries in the process may use the driver until exit).
// Fails with FAILED_PRECONDITION when there is no driver (libcuda.so.1 cannot
// be loaded or has no cuGetProcAddress), when the driver is older than
// kLowestCudaDriverVersion (naming both versions) or lacks an entry point
// (naming it). The failure is remembered: every later call returns it.
// Thread-safe. Does not call cuInit.
absl::StatusOr<const CudaDriverTable*> LoadCudaDriver();

// The driver's version (cuDriverGetVersion), loading the driver as
// LoadCudaDriver does; 0 when that failed.
int LoadedCudaDriverVersion();

}  // namespace blockswap::cuda_internal

#endif  // BLOCKSWAP_SHARED_BACKEND_CUDA_DRIVER_H_
