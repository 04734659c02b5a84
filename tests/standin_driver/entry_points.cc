// What the stand-in CUDA driver's entry points share (entry_points.h).
#include "tests/standin_driver/entry_points.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace blockswap::standin {
namespace {
thread_local std::vector<Context*> context_stack;
}  // namespace

size_t PageSize() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

std::string FilePath(uint32_t uid, uint32_t pid, const char* kind, uint32_t id) {
  return std::string(kShmDir) + "/" + kFilePrefix + std::to_string(uid) + "." +
         std::to_string(pid) + "." + kind + "." + std::to_string(id);
}

uint32_t EffectiveUid() { return static_cast<uint32_t>(::geteuid()); }

std::vector<Context*>& ContextStack() { return context_stack; }

CUresult Enter(const char* name, bool needs_init) {
  if (InHostFunction()) {
    ReportViolation(std::string(name) + " called from inside a host function (cuLaunchHostFunc)");
    return CUDA_ERROR_NOT_PERMITTED;
  }
  if (needs_init && !GetDriver().initialized.load(std::memory_order_acquire)) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return CUDA_SUCCESS;
}

CUresult CurrentContext(Context** out) {
  Context* ctx = ContextStack().empty() ? nullptr : ContextStack().back();
  if (ctx == nullptr || ctx->retained.load() == 0) return CUDA_ERROR_INVALID_CONTEXT;
  const CUresult sticky = ctx->sticky.load(std::memory_order_acquire);
  if (sticky != CUDA_SUCCESS) return sticky;
  *out = ctx;
  return CUDA_SUCCESS;
}

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

void Fault(Context* ctx, CUresult error, const std::string& why) {
  CUresult expected = CUDA_SUCCESS;
  ctx->sticky.compare_exchange_strong(expected, error);
  std::fprintf(stderr, "stand-in CUDA driver (pid %d): device %d faults: %s: the context is poisoned\n",
               static_cast<int>(::getpid()), ctx->ordinal, why.c_str());
}

DeviceTouch::DeviceTouch(Context* ctx, const char* use, std::initializer_list<Touch> touches) {
  bool vmm = false;
  for (const Touch& touch : touches) vmm |= touch.allocation != nullptr && touch.allocation->physical;
  if (!vmm) return;
  lock_ = std::shared_lock<std::shared_mutex>(GetDriver().vmm_mu);
  for (const Touch& touch : touches) {
    const Allocation* a = touch.allocation;
    if (a == nullptr || !a->physical) continue;
    const unsigned flags = a->access[static_cast<size_t>(ctx->ordinal)];
    const bool allowed = !a->unmapped && (touch.write ? flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                                      : (flags & CU_MEM_ACCESS_FLAGS_PROT_READ) != 0);
    if (allowed) continue;
    char range[64];
    std::snprintf(range, sizeof(range), "0x%llx",
                  static_cast<unsigned long long>(DeviceAddressOf(a->data)));
    Fault(ctx, CUDA_ERROR_ILLEGAL_ADDRESS,
          std::string(use) + (touch.write ? " writes" : " reads") + " the VMM mapping at " +
              range + (a->unmapped ? ", unmapped since" : ", which has no access set for it") +
              " (cuMemSetAccess)");
    ok_ = false;
    return;
  }
}

}  // namespace blockswap::standin
