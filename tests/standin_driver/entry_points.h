// The stand-in CUDA driver's entry points share these (a TEST DOUBLE,
// README.md): how every entry point begins, the calling thread's context,
// and what a handle or an address names. Used by devices.cc, memory.cc and
// events_streams.cc; standin.h holds the objects behind the handles.
#ifndef BLOCKSWAP_TESTS_STANDIN_DRIVER_ENTRY_POINTS_H_
#define BLOCKSWAP_TESTS_STANDIN_DRIVER_ENTRY_POINTS_H_

#include <cuda.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "tests/standin_driver/standin.h"

namespace blockswap::standin {

inline constexpr const char* kShmDir = "/dev/shm";
// Files of a process: cuda-standin.<uid>.<pid>.mem.<n> / .event.<n>, <uid>
// its effective uid (an event's opener rebuilds the name from its own).
inline constexpr const char* kFilePrefix = "cuda-standin.";

size_t PageSize();
inline size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
// /dev/shm/cuda-standin.<uid>.<pid>.<kind>.<id>
std::string FilePath(uint32_t uid, uint32_t pid, const char* kind, uint32_t id);
// This process's effective uid, for the names of its files.
uint32_t EffectiveUid();

// The calling thread's context stack (cuCtxPushCurrent, cuCtxPopCurrent);
// its top is the current context.
std::vector<Context*>& ContextStack();
inline CUcontext ToHandle(Context* ctx) { return reinterpret_cast<CUcontext>(ctx); }
inline Context* FromHandle(CUcontext ctx) { return reinterpret_cast<Context*>(ctx); }

// Every entry point begins here. A host function must not call the driver
// (cuLaunchHostFunc: "The host function must not make any CUDA API calls");
// the driver may say CUDA_ERROR_NOT_PERMITTED, and the stand-in always does,
// and reports it, since a call that happens to work on a GPU may deadlock.
CUresult Enter(const char* name, bool needs_init = true);

#define BLOCKSWAP_STANDIN_RETURN_IF_ERROR(expr)                             \
  do {                                                                      \
    const CUresult blockswap_standin_r_ = (expr);                           \
    if (blockswap_standin_r_ != CUDA_SUCCESS) return blockswap_standin_r_;  \
  } while (0)
#define BLOCKSWAP_STANDIN_ENTER() BLOCKSWAP_STANDIN_RETURN_IF_ERROR(Enter(__func__))

// The calling thread's current context, or why there is none to use.
CUresult CurrentContext(Context** out);
// The stream a handle names, in the current context. NULL, CU_STREAM_LEGACY
// and CU_STREAM_PER_THREAD are all the context's NULL stream here.
CUresult ResolveStream(CUstream handle, Context* ctx, CUstream_st** out);
CUresult EnterStream(CUstream handle, CUstream_st** stream);
// CUDA_ERROR_INVALID_HANDLE for an event this process has not (or no longer).
CUresult ResolveEvent(CUevent event);

// What an address is, as the device sees it.
struct Resolved {
  enum class Kind { kUnknown, kDevice, kMappedHost, kPinnedHost, kPageableHost } kind;
  std::byte* host = nullptr;  // where the bytes are in this process
  std::shared_ptr<Allocation> allocation;  // kDevice
  HostRange range;                          // kMappedHost, kPinnedHost
};
// `bytes` at `address` (a device pointer, or a host pointer when `host_side`).
Resolved Resolve(uintptr_t address, size_t bytes, bool host_side);

// A fault of work running on `ctx`'s device: `error` poisons the context
// (the first sticky error stays), as a GPU fault does; one stderr line says
// `why`.
void Fault(Context* ctx, CUresult error, const std::string& why);

// What work on a stream touches of device memory (null: not device memory).
struct Touch {
  const Allocation* allocation;
  bool write;
};

// Held by work on a stream while it touches device memory. A VMM mapping
// may be touched only while mapped and with access set for the stream's
// device (cuMemMap: "calling cuMemMap does not make the address accessible";
// cuMemUnmap: new mappings "start with no accessibility setup"); otherwise
// the work faults: CUDA_ERROR_ILLEGAL_ADDRESS poisons its context. Holds
// Driver::vmm_mu shared (only where a VMM mapping is touched), so that no
// unmap lands while the work runs.
class DeviceTouch {
 public:
  DeviceTouch(Context* ctx, const char* use, std::initializer_list<Touch> touches);
  // False: the work faulted and must not touch the memory.
  bool ok() const { return ok_; }

 private:
  std::shared_lock<std::shared_mutex> lock_;
  bool ok_ = true;
};

}  // namespace blockswap::standin

#endif  // BLOCKSWAP_TESTS_STANDIN_DRIVER_ENTRY_POINTS_H_
