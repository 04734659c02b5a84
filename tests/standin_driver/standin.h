// The stand-in CUDA driver's internals (a TEST DOUBLE, never shipped): the
// objects behind the driver API's handles, shared by the entry points
// (devices.cc, memory.cc, events_streams.cc, proc_address.cc, sharing
// entry_points.h) and the machinery that runs them (standin.cc). README.md
// lists the rules it enforces and where each is documented.
//
// Model. Every device is this host: "device memory" is a file in /dev/shm
// mapped into each process that allocated or imported it; a device pointer is
// that mapping's address with kDeviceAddressBit set, so a host that
// dereferences one faults, as it would on a GPU. A stream is an ordered queue
// drained by one thread; an event is {records, completed} counters in shared
// memory (for an interprocess event a file in /dev/shm named with its
// creator's uid, mode 0600, so that only that uid opens it). Thread safety: the entry points may be called from any
// thread; Driver::mu guards the tables, each stream its queue.
#ifndef BLOCKSWAP_TESTS_STANDIN_DRIVER_STANDIN_H_
#define BLOCKSWAP_TESTS_STANDIN_DRIVER_STANDIN_H_

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "shared/backend/host_lifetime.h"

namespace blockswap::standin {

// Set in every device pointer: user-space addresses are below 2^47, so a
// device pointer is not a canonical host address and a host dereference of it
// faults (SIGSEGV), as on a GPU whose memory the host cannot map.
inline constexpr uintptr_t kDeviceAddressBit = uintptr_t{1} << 47;
inline void* HostAddressOf(CUdeviceptr dptr) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(dptr) & ~kDeviceAddressBit);
}
inline CUdeviceptr DeviceAddressOf(const void* host) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(host) | kDeviceAddressBit);
}

// What the environment configures (read once, at the first call).
struct Settings {
  int device_count = 1;              // BLOCKSWAP_STANDIN_DEVICES
  int driver_version = CUDA_VERSION;  // BLOCKSWAP_STANDIN_DRIVER_VERSION
  int64_t jitter_us = 0;              // BLOCKSWAP_STANDIN_JITTER_US
  int64_t copy_delay_us = 0;          // BLOCKSWAP_STANDIN_COPY_DELAY_US
  uint64_t memory_bytes = uint64_t{8} << 30;  // BLOCKSWAP_STANDIN_MEMORY_BYTES
  bool abort_on_violation = false;    // BLOCKSWAP_STANDIN_VIOLATIONS=abort
  // BLOCKSWAP_STANDIN_HOST_REGISTER=0: the devices cannot register host
  // memory (CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED 0), as some GPUs and
  // platforms: no pinned masters, no stream words.
  bool host_register = true;
  // BLOCKSWAP_STANDIN_STREAM_MEM_OPS=0: cuStreamWaitValue32 and
  // cuStreamWriteValue32 are CUDA_ERROR_NOT_SUPPORTED, as where the driver or
  // device has no stream memory operations: the product keeps to events.
  bool stream_mem_ops = true;
  // BLOCKSWAP_STANDIN_IPC_MEM_ANY_UID=1: cuIpcOpenMemHandle opens memory of
  // an exporter of another uid (by default it refuses, the strictest reading
  // of what the reference leaves unsaid).
  bool ipc_mem_any_uid = false;
  // BLOCKSWAP_STANDIN_VMM=0: devices without virtual memory management
  // (their attributes read 0, cuMemCreate is CUDA_ERROR_NOT_SUPPORTED).
  bool vmm = true;
  // BLOCKSWAP_STANDIN_VMM_SAME_UID_ONLY=1: cuMemImportFromShareableHandle
  // refuses memory a process of another uid created (by default a descriptor
  // imports wherever it is held).
  bool vmm_same_uid_only = false;
  // BLOCKSWAP_STANDIN_STICKY_AT=DEVICE:N: the Nth copy executed on DEVICE
  // faults (CUDA_ERROR_ILLEGAL_ADDRESS), poisoning that device's context.
  int sticky_device = -1;
  int64_t sticky_at_copy = 0;
};
const Settings& GetSettings();

// A breach of a rule whose consequence CUDA leaves undefined: one line on
// stderr, counted, and with BLOCKSWAP_STANDIN_VIOLATIONS=abort the process
// aborts, so that no test passes over it.
void ReportViolation(const std::string& what);
// Reports so far in this process, and the newest one's text.
int ViolationCount();
std::string LastViolation();

struct Context;

// One allocation's first page in its /dev/shm file: who imports it.
struct MemoryHeader {
  static constexpr uint32_t kMagic = 0x6d534253;  // "SBSm"
  uint32_t magic;
  uint32_t device;
  uint64_t size;
  host_lifetime::ImportLedger ledger;
};

// Physical memory of the virtual memory management API (cuMemCreate, or
// imported from a descriptor): a memfd, a VmmHeader page, then the bytes.
// Shared by this process's handles to it and its mappings, and gone with the
// last of them (cuMemRelease: freed "when all outstanding mappings to the
// memory are unmapped and when all outstanding references to the handle ...
// are also released"); other processes hold their own descriptors.
struct PhysicalMemory {
  ~PhysicalMemory();
  int fd = -1;
  int device = 0;
  size_t size = 0;
  unsigned handle_types = 0;   // CUmemAllocationProp::requestedHandleTypes
  Context* charged = nullptr;  // whose cuMemGetInfo counts it (created here)
};

// The first bytes of a PhysicalMemory's file, written by its creator.
struct VmmHeader {
  static constexpr uint32_t kMagic = 0x764d4253;  // "SBMv"
  uint32_t magic;
  uint32_t device;
  uint32_t creator_uid;  // effective uid of the process that created (exports) it
  uint32_t handle_types;
  uint64_t size;
};

// Device memory mapped in this process: allocated here (cuMemAlloc),
// imported (cuIpcOpenMemHandle) or a VMM mapping (cuMemMap). Shared by the
// work queued on it, so that a mapping outlives the copies that use it.
struct Allocation {
  ~Allocation();
  Context* ctx = nullptr;
  bool imported = false;
  std::byte* data = nullptr;  // host address of the first byte
  size_t size = 0;
  void* mapping = nullptr;    // header page + data
  size_t mapping_size = 0;
  MemoryHeader* header = nullptr;
  std::string path;           // the /dev/shm file (the exporter unlinks it)
  uint32_t exporter_pid = 0;
  uint64_t token = 0;         // the handle's identity
  int open_count = 0;         // cuIpcOpenMemHandle references (imports)
  std::optional<host_lifetime::ImportClaim> claim;
  // A VMM mapping: the memory it maps. `unmapped` (cuMemUnmap) and `access`
  // (CU_MEM_ACCESS_FLAGS_PROT_* by device ordinal, cuMemSetAccess) are
  // guarded by Driver::vmm_mu, which work holds shared while it touches the
  // mapping (DeviceTouch).
  std::shared_ptr<PhysicalMemory> physical;
  bool unmapped = false;
  std::vector<unsigned> access;
};

// Pinned host memory: cuMemHostRegister or cuMemAllocHost.
struct HostRange {
  std::byte* data = nullptr;
  size_t size = 0;
  unsigned flags = 0;  // CU_MEMHOSTREGISTER_*
  Context* ctx = nullptr;
  bool allocated = false;  // cuMemAllocHost
};

// An event's state, in shared memory for an interprocess event.
struct EventState {
  static constexpr uint32_t kMagic = 0x65534253;  // "SBSe"
  uint32_t magic;
  uint32_t flags;
  // Records issued and the newest completed, compared in serial-number order;
  // `completed` is a futex word.
  std::atomic<uint32_t> records;
  std::atomic<uint32_t> completed;
  std::atomic<uint64_t> completed_ns;  // CLOCK_MONOTONIC of the newest completion
  // The process that issued the newest record (host_lifetime::ProcessKey):
  // a wait on a pending record of a dead process can never complete.
  std::atomic<uint64_t> last_recorder;
  uint64_t creator;  // ProcessKey of the creator
  host_lifetime::ImportLedger ledger;
};

// The memory behind an EventState: a heap block or a mapped /dev/shm file.
struct EventMemory {
  ~EventMemory();
  EventState* state = nullptr;
  void* mapping = nullptr;  // nullptr: heap
  size_t mapping_size = 0;
};

}  // namespace blockswap::standin

struct CUevent_st {
  blockswap::standin::Context* ctx = nullptr;
  unsigned flags = 0;
  bool imported = false;
  std::shared_ptr<blockswap::standin::EventMemory> memory;
  std::string path;     // the creator's /dev/shm file of an interprocess event
  uint32_t file_id = 0;  // its number in the handle
  std::optional<blockswap::host_lifetime::ImportClaim> claim;
  blockswap::standin::EventState& state() const { return *memory->state; }
};

struct CUstream_st {
  blockswap::standin::Context* ctx = nullptr;
  bool non_blocking = false;
  bool legacy = false;  // the context's NULL stream

  // The queue, drained in order by `worker`.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  uint64_t issued = 0;     // guarded by mu
  uint64_t completed = 0;  // guarded by mu
  bool destroyed = false;  // guarded by mu: the worker exits once drained
  std::thread worker;
};

namespace blockswap::standin {

struct Context {
  int ordinal = 0;
  std::atomic<int> retained{0};
  // The first sticky error; every later call in this context returns it.
  std::atomic<CUresult> sticky{CUDA_SUCCESS};
  std::atomic<int64_t> copies_executed{0};
  std::atomic<uint64_t> allocated_bytes{0};
  CUstream_st* legacy_stream = nullptr;  // created with the context, never freed
  std::vector<CUstream_st*> streams;     // guarded by Driver::mu
};

struct Driver {
  std::mutex mu;
  std::atomic<bool> initialized{false};
  std::vector<std::unique_ptr<Context>> contexts;  // one primary context per device
  // Keyed by the host address of the first byte.
  std::map<uintptr_t, std::shared_ptr<Allocation>> allocations;
  std::map<uintptr_t, HostRange> host_ranges;
  // Handles this process created and has not destroyed: a destroyed or
  // foreign handle is CUDA_ERROR_INVALID_HANDLE, never a crash.
  std::set<CUstream_st*> streams;
  std::set<CUevent_st*> events;
  uint32_t next_file = 0;
  // Virtual memory management: this process's allocation handles and
  // address reservations (host address of the first byte -> size).
  std::map<CUmemGenericAllocationHandle, std::shared_ptr<PhysicalMemory>> vmm_handles;
  CUmemGenericAllocationHandle next_vmm_handle = 0x5b00;
  std::map<uintptr_t, size_t> reservations;
  // Taken after `mu`, never before it: exclusive to unmap or to change
  // access, shared by work touching a VMM mapping while it runs.
  std::shared_mutex vmm_mu;
};
// The process's driver: created at the first call, never destroyed (stream
// workers may still run while the process exits).
Driver& GetDriver();

// Whether the calling thread runs a host function (cuLaunchHostFunc).
bool InHostFunction();
void SetInHostFunction(bool value);

// Streams.
CUstream_st* CreateStream(Context* ctx, bool non_blocking, bool legacy);
// Queues `op` behind the stream's work (and, for the legacy stream and the
// blocking streams, behind each other's, as CUDA's NULL stream does).
void Enqueue(CUstream_st* stream, std::function<void()> op);
// Blocks until the work queued so far has run.
void Synchronize(CUstream_st* stream);
bool Idle(CUstream_st* stream);
// The stream's worker exits once its queue is drained; the stream is freed then.
void ReleaseStream(CUstream_st* stream);
void SynchronizeContext(Context* ctx);
// The random pause before each stream operation (BLOCKSWAP_STANDIN_JITTER_US).
void Jitter();

// Events: whether the newest record as of now has completed.
bool EventComplete(const EventState& state);
// Blocks the calling stream worker until the record numbered `target` (or a
// later one) of `state` has completed.
void AwaitRecord(const EventState& state, uint32_t target);
void CompleteRecord(EventState& state, uint32_t generation);
uint64_t MonotonicNs();

}  // namespace blockswap::standin

#endif  // BLOCKSWAP_TESTS_STANDIN_DRIVER_STANDIN_H_
