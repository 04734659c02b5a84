// The stand-in CUDA driver's entry points for events, IPC event handles,
// streams and stream memory operations (a TEST DOUBLE, README.md).
#include <cuda.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "shared/backend/host_lifetime.h"
#include "tests/standin_driver/entry_points.h"
#include "tests/standin_driver/standin.h"

namespace blockswap::standin {
namespace {

namespace lifetime = host_lifetime;

// What travels in a CUipcEventHandle (64 opaque bytes).
struct EventHandle {
  static constexpr uint32_t kMagic = 0x68454253;  // "SBEh"
  uint32_t magic;
  uint32_t pid;
  uint32_t file_id;
};
static_assert(sizeof(EventHandle) <= sizeof(CUipcEventHandle));

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
  // As the driver's /cuda.shm.<uid>.<pid>.<n>: named with the creator's
  // effective uid, mode 0600 whatever the umask. The opener rebuilds the name
  // from its own uid, so a process of another uid (root too) finds no file
  // (cuda-rules.md, "IPC events do not cross users").
  event->path = FilePath(EffectiveUid(), pid, "event", id);
  event->file_id = id;
  const int fd = ::open(event->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  ::fchmod(fd, 0600);  // a umask may have taken bits away: the mode is the driver's
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

}  // namespace
}  // namespace blockswap::standin

using namespace blockswap::standin;  // NOLINT: the entry points below are C

extern "C" {

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
  // The name from this process's own uid: another user's event is not found.
  opened->path = FilePath(EffectiveUid(), wire.pid, "event", wire.file_id);
  const int fd = ::open(opened->path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    // Another user's event, or one already destroyed: the handle cannot be
    // opened ("invalid argument", as LMCache/LMCache#3236 saw for a
    // destroyed one).
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
  Enqueue(stream, [ctx = stream->ctx, word, value, kind, keep] {
    // Whoever writes the word may do it with a plain store (no wake), so the
    // wait also polls.
    while (true) {
      uint32_t current = 0;
      {
        DeviceTouch touch(ctx, "cuStreamWaitValue32", {{keep.get(), false}});
        if (!touch.ok()) return;
        current = word->load(std::memory_order_acquire);
      }
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
  Enqueue(stream, [ctx = stream->ctx, word, value, keep] {
    DeviceTouch touch(ctx, "cuStreamWriteValue32", {{keep.get(), true}});
    if (!touch.ok()) return;
    word->store(value, std::memory_order_release);
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr,
              nullptr, 0);
  });
  return CUDA_SUCCESS;
}

}  // extern "C"
