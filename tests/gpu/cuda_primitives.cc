#include "tests/gpu/cuda_primitives.h"

#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "shared/backend/cuda_driver.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"
#include "shared/os/shared_memory.h"
#include "tests/gpu/probe_channel.h"

namespace blockswap::probe {
namespace {

// How long a primitive may take to complete once nothing holds it any more.
// A GPU does each in microseconds; the limit only keeps a broken one from
// hanging.
constexpr absl::Duration kCompletionTimeout = absl::Seconds(5);
// How long a stream that must be held (its wait not yet satisfied) is
// watched before it counts as held.
constexpr absl::Duration kHoldCheck = absl::Milliseconds(100);
// The device memory shared: at least this, rounded up to the granularity
// (2 MiB on current GPUs and on the stand-in).
constexpr size_t kSharedMemoryBytes = size_t{2} << 20;
constexpr size_t kPageBytes = 4096;

const cuda_internal::CudaDriverTable* cu = nullptr;  // set by InitCuda, per process
CUdevice device = 0;                                 // device 0, set by InitCuda

// "cuMemImportFromShareableHandle: CUDA_ERROR_INVALID_VALUE (invalid argument)".
absl::Status Cu(const char* call, CUresult result) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  if (cu->cuGetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (cu->cuGetErrorString(result, &text) != CUDA_SUCCESS) text = nullptr;
  return absl::InternalError(absl::StrCat(
      call, ": ", name != nullptr ? std::string(name) : absl::StrCat("CUresult ", result), " (",
      text != nullptr ? text : "no description", ")"));
}
// Calls the driver table's `name` with `args`, naming the call in its error.
#define BLOCKSWAP_PROBE_CU(name, args) Cu(#name, cu->name args)

absl::Status NewStream(CUstream* stream) {
  // Non-blocking, as the product's streams: nothing of the legacy stream's
  // implicit ordering may make a check pass.
  return BLOCKSWAP_PROBE_CU(cuStreamCreate, (stream, CU_STREAM_NON_BLOCKING));
}

// A marker recorded on `stream` now: complete once everything before it is.
// An event of this process only (the product's events never leave theirs).
absl::StatusOr<CUevent> Marker(CUstream stream) {
  CUevent event = nullptr;
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuEventCreate, (&event, CU_EVENT_DISABLE_TIMING)));
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuEventRecord, (event, stream)));
  return event;
}

// Polls instead of cuEventSynchronize, so that work that never completes is
// a failure after `timeout`, not a hang.
absl::Status AwaitMarker(CUevent marker, absl::string_view what) {
  const absl::Time deadline = absl::Now() + kCompletionTimeout;
  while (true) {
    CUresult result = cu->cuEventQuery(marker);
    if (result == CUDA_SUCCESS) return absl::OkStatus();
    if (result != CUDA_ERROR_NOT_READY) return Cu("cuEventQuery", result);
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, " did not complete within ",
                                                      absl::FormatDuration(kCompletionTimeout)));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::Status Sync(CUstream stream, absl::string_view what) {
  BLOCKSWAP_ASSIGN_OR_RETURN(CUevent marker, Marker(stream));
  return AwaitMarker(marker, what);
}

// The stream behind `marker` must still be held by a wait whose condition
// does not hold yet: a wait that does not bind would let it run on.
absl::Status StillHeld(CUevent marker, absl::string_view wait) {
  absl::SleepFor(kHoldCheck);
  CUresult result = cu->cuEventQuery(marker);
  if (result == CUDA_ERROR_NOT_READY) return absl::OkStatus();
  if (result == CUDA_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat(
        wait, " did not hold its stream: work after it completed before its condition held"));
  }
  return Cu("cuEventQuery", result);
}

std::vector<uint8_t> Pattern(uint8_t seed, size_t bytes) {
  std::vector<uint8_t> pattern(bytes);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 131 + seed);
  return pattern;
}

absl::Status SameBytes(const std::vector<uint8_t>& seen, const std::vector<uint8_t>& expected,
                       absl::string_view what) {
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] != expected[i]) {
      return absl::DataLossError(
          absl::StrFormat("%s: byte %d is 0x%02x, expected 0x%02x", what, i, seen[i], expected[i]));
    }
  }
  return absl::OkStatus();
}

// Device memory of the driver's virtual memory management, as the product
// shares its rings (shared/backend/cuda_backend.cc): one physical allocation
// (created here, or imported from a descriptor) mapped read-write for device
// 0 at a range reserved for it. Move-only; Release (or the destructor)
// unmaps it, frees the range and drops this process's handle.
class VmmMemory {
 public:
  // An exportable allocation of at least `bytes`, in whole granules; fails
  // naming the device attribute that says the device cannot.
  static absl::StatusOr<VmmMemory> Create(size_t bytes) {
    for (const auto& [attribute, name] :
         {std::pair{CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                    "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"},
          std::pair{CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                    "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED"}}) {
      int value = 0;
      BLOCKSWAP_RETURN_IF_ERROR(
          BLOCKSWAP_PROBE_CU(cuDeviceGetAttribute, (&value, attribute, device)));
      if (value == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(name, " is 0: device memory cannot cross processes as a descriptor"));
      }
    }
    const CUmemAllocationProp prop = Properties();
    size_t granularity = 0;
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(
        cuMemGetAllocationGranularity, (&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)));
    if (granularity == 0) {
      return absl::InternalError("cuMemGetAllocationGranularity: a granularity of 0");
    }
    VmmMemory memory;
    memory.bytes_ = (bytes + granularity - 1) / granularity * granularity;
    BLOCKSWAP_RETURN_IF_ERROR(
        BLOCKSWAP_PROBE_CU(cuMemCreate, (&memory.handle_, memory.bytes_, &prop, 0)));
    BLOCKSWAP_RETURN_IF_ERROR(memory.MapForDevice());
    return memory;
  }

  // The allocation behind `fd` (from another process), of `bytes` (its
  // whole size, as its exporter announced).
  static absl::StatusOr<VmmMemory> Import(const UniqueFd& fd, size_t bytes) {
    VmmMemory memory;
    memory.bytes_ = bytes;
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(
        cuMemImportFromShareableHandle,
        (&memory.handle_, reinterpret_cast<void*>(static_cast<uintptr_t>(fd.get())),
         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)));
    BLOCKSWAP_RETURN_IF_ERROR(memory.MapForDevice());
    return memory;
  }

  VmmMemory(VmmMemory&& other) noexcept
      : handle_(std::exchange(other.handle_, 0)),
        address_(std::exchange(other.address_, 0)),
        bytes_(other.bytes_),
        mapped_(std::exchange(other.mapped_, false)) {}
  VmmMemory& operator=(VmmMemory&&) = delete;
  ~VmmMemory() { (void)Release(); }

  CUdeviceptr address() const { return address_; }
  size_t bytes() const { return bytes_; }

  // A new descriptor of the allocation, for another process.
  absl::StatusOr<UniqueFd> Export() const {
    int fd = -1;
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(
        cuMemExportToShareableHandle, (&fd, handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)));
    return UniqueFd(fd);
  }

  // Unmaps, frees the range, drops the handle; the first error, if any.
  absl::Status Release() {
    absl::Status status;
    if (mapped_) status.Update(BLOCKSWAP_PROBE_CU(cuMemUnmap, (address_, bytes_)));
    mapped_ = false;
    if (address_ != 0) status.Update(BLOCKSWAP_PROBE_CU(cuMemAddressFree, (address_, bytes_)));
    address_ = 0;
    if (handle_ != 0) status.Update(BLOCKSWAP_PROBE_CU(cuMemRelease, (handle_)));
    handle_ = 0;
    return status;
  }

  // Copies `bytes` in from the host on `stream`, and waits for the copy.
  absl::Status Write(CUstream stream, const std::vector<uint8_t>& bytes, absl::string_view who) {
    BLOCKSWAP_RETURN_IF_ERROR(
        BLOCKSWAP_PROBE_CU(cuMemcpyHtoDAsync, (address_, bytes.data(), bytes.size(), stream)));
    return Sync(stream, absl::StrCat(who, "'s copy into the shared device memory"));
  }
  // Copies the memory out on `stream` and compares it with `expected`.
  absl::Status Expect(CUstream stream, const std::vector<uint8_t>& expected,
                      absl::string_view what) {
    std::vector<uint8_t> seen(expected.size());
    BLOCKSWAP_RETURN_IF_ERROR(
        BLOCKSWAP_PROBE_CU(cuMemcpyDtoHAsync, (seen.data(), address_, seen.size(), stream)));
    BLOCKSWAP_RETURN_IF_ERROR(Sync(stream, absl::StrCat("the copy out of ", what)));
    return SameBytes(seen, expected, what);
  }

 private:
  VmmMemory() = default;

  static CUmemAllocationProp Properties() {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    return prop;
  }

  absl::Status MapForDevice() {
    BLOCKSWAP_RETURN_IF_ERROR(
        BLOCKSWAP_PROBE_CU(cuMemAddressReserve, (&address_, bytes_, 0, 0, 0)));
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuMemMap, (address_, bytes_, 0, handle_, 0)));
    mapped_ = true;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return BLOCKSWAP_PROBE_CU(cuMemSetAccess, (address_, bytes_, &access, 1));
  }

  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr address_ = 0;
  size_t bytes_ = 0;
  bool mapped_ = false;
};

// The memory's size, as an exporter announces it with the descriptor.
absl::Status SendMemory(Channel& channel, uint32_t step, uint32_t phase, const VmmMemory& memory) {
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd fd, memory.Export());
  const uint64_t bytes = memory.bytes();
  return channel.Send(step, phase, &bytes, sizeof(bytes), fd.get());
}
absl::StatusOr<VmmMemory> ReceiveMemory(Received& message) {
  uint64_t bytes = 0;
  std::memcpy(&bytes, message.wire.data, sizeof(bytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd fd, message.TakeFd("the device memory"));
  return VmmMemory::Import(fd, bytes);
}

// --- the steps: each run by the processes it names, `role` saying which ---

// Each step's number on every channel that takes part in it.
enum Step : uint32_t {
  kInit = 1,
  kAllStarted,  // A's word to each peer that every process has CUDA
  kImportSameUid,
  kImportCrossUid,
  kAfterExporterExit,
  kSharedPage,
  kReadOnlyPage,
  kWordAWritesBWaits,
  kWordBWritesAWaits,
  kWordHostStore,
};

// The driver and device 0's primary context in this process.
absl::StatusOr<std::string> InitCuda() {
  BLOCKSWAP_ASSIGN_OR_RETURN(cu, cuda_internal::LoadCudaDriver());
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuInit, (0)));
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuDeviceGet, (&device, 0)));
  char name[256] = {};
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuDeviceGetName, (name, sizeof(name), device)));
  CUuuid uuid{};
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuDeviceGetUuid, (&uuid, device)));
  CUcontext context = nullptr;
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuDevicePrimaryCtxRetain, (&context, device)));
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuCtxSetCurrent, (context)));
  return absl::StrCat("'", name, "' ", cuda_internal::FormatGpuUuid(uuid));
}

// A's device memory, exported as a descriptor and sent over the socket; the
// importer (the other side of `channel`) imports and maps it, reads A's
// bytes and copies its own in; A reads those back. Each side lets go of its
// own handle and mapping when done, in either order (the allocation lives
// while any process holds it).
absl::Status ImportFromA(Channel& channel, Role role, uint32_t step, Channel::PeerEnd* peer) {
  absl::Status mine = [&]() -> absl::Status {
    CUstream stream = nullptr;
    BLOCKSWAP_RETURN_IF_ERROR(NewStream(&stream));
    if (role == Role::kA) {
      BLOCKSWAP_ASSIGN_OR_RETURN(VmmMemory memory, VmmMemory::Create(kSharedMemoryBytes));
      BLOCKSWAP_RETURN_IF_ERROR(memory.Write(stream, Pattern(1, memory.bytes()), "A"));
      BLOCKSWAP_RETURN_IF_ERROR(SendMemory(channel, step, 1, memory));
      BLOCKSWAP_RETURN_IF_ERROR(channel.Await(step, 2).status());
      return memory.Expect(stream, Pattern(2, memory.bytes()),
                           "the importer's bytes, read back by A");
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(Received message, channel.Await(step, 1));
    BLOCKSWAP_ASSIGN_OR_RETURN(VmmMemory memory, ReceiveMemory(message));
    BLOCKSWAP_RETURN_IF_ERROR(
        memory.Expect(stream, Pattern(1, memory.bytes()), "A's bytes, read by the importer"));
    BLOCKSWAP_RETURN_IF_ERROR(memory.Write(stream, Pattern(2, memory.bytes()), "the importer"));
    return channel.Send(step, 2);
  }();
  *peer = channel.Finish(step, mine);
  return mine;
}

// A2's device memory, imported by B (its descriptor relayed by A); then A2
// releases its handle and mapping and exits, and B, its mapping kept, still
// reads A2's bytes and writes its own: what a trainer's kernels need when the
// daemon dies under them. CUDA documents that the allocation lives until its
// last handle and mapping are gone (cuMemRelease), not that this holds across
// the exporter's exit. The exporter's side.
absl::Status ExportThenExit(Channel& channel, Channel::PeerEnd* peer) {
  constexpr uint32_t step = kAfterExporterExit;
  std::optional<VmmMemory> memory;
  absl::Status mine = [&]() -> absl::Status {
    CUstream stream = nullptr;
    BLOCKSWAP_RETURN_IF_ERROR(NewStream(&stream));
    BLOCKSWAP_ASSIGN_OR_RETURN(VmmMemory created, VmmMemory::Create(kSharedMemoryBytes));
    memory.emplace(std::move(created));
    BLOCKSWAP_RETURN_IF_ERROR(memory->Write(stream, Pattern(3, memory->bytes()), "A2"));
    BLOCKSWAP_RETURN_IF_ERROR(SendMemory(channel, step, 1, *memory));
    BLOCKSWAP_RETURN_IF_ERROR(channel.Await(step, 2).status());
    return memory->Release();
  }();
  *peer = channel.Finish(step, mine);
  return mine;  // A2 exits next
}

// A's side: relays A2's descriptor to B, lets A2 go once B has read the
// memory, and tells B once A2 is gone (waited for: `a2` is its pid).
absl::Status RelayUntilExporterExit(Channel& to_a2, Channel& to_b, pid_t a2, bool* a2_reaped,
                                    std::vector<Channel::PeerEnd>* peers) {
  constexpr uint32_t step = kAfterExporterExit;
  std::optional<Channel::PeerEnd> a2_end;
  absl::Status mine = [&]() -> absl::Status {
    BLOCKSWAP_ASSIGN_OR_RETURN(Received exported, to_a2.Await(step, 1));
    BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd fd, exported.TakeFd("A2's device memory"));
    BLOCKSWAP_RETURN_IF_ERROR(to_b.Send(step, 1, exported.wire.data, sizeof(uint64_t), fd.get()));
    fd.Reset();  // A holds no descriptor of A2's memory
    BLOCKSWAP_RETURN_IF_ERROR(to_b.Await(step, 2).status());
    BLOCKSWAP_RETURN_IF_ERROR(to_a2.Send(step, 2));
    a2_end = to_a2.Finish(step, absl::OkStatus());
    if (!a2_end->status.ok()) return absl::AbortedError("gave up: A2 failed");
    const absl::Time deadline = absl::Now() + kCompletionTimeout;
    int status = 0;
    while (::waitpid(a2, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("A2 (pid ", a2, ") had not exited ",
                                                        absl::FormatDuration(kCompletionTimeout),
                                                        " after releasing its memory"));
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    *a2_reaped = true;
    return to_b.Send(step, 3);
  }();
  if (!a2_end.has_value()) a2_end = to_a2.Finish(step, mine);
  peers->push_back(*a2_end);
  peers->push_back(to_b.Finish(step, mine));
  return mine;
}

// B's side: imports and reads A2's memory, then, once A2 has exited, reads
// it again and writes its own bytes into it.
absl::Status ImportPastExporterExit(Channel& channel, Channel::PeerEnd* peer) {
  constexpr uint32_t step = kAfterExporterExit;
  absl::Status mine = [&]() -> absl::Status {
    CUstream stream = nullptr;
    BLOCKSWAP_RETURN_IF_ERROR(NewStream(&stream));
    BLOCKSWAP_ASSIGN_OR_RETURN(Received message, channel.Await(step, 1));
    BLOCKSWAP_ASSIGN_OR_RETURN(VmmMemory memory, ReceiveMemory(message));
    const std::vector<uint8_t> exported = Pattern(3, memory.bytes());
    BLOCKSWAP_RETURN_IF_ERROR(
        memory.Expect(stream, exported, "A2's bytes, read by B while A2 lived"));
    BLOCKSWAP_RETURN_IF_ERROR(channel.Send(step, 2));
    BLOCKSWAP_RETURN_IF_ERROR(channel.Await(step, 3).status());
    BLOCKSWAP_RETURN_IF_ERROR(
        memory.Expect(stream, exported, "A2's bytes, read by B after A2 released them and exited"));
    const std::vector<uint8_t> own = Pattern(4, memory.bytes());
    BLOCKSWAP_RETURN_IF_ERROR(memory.Write(stream, own, "B, after A2 exited,"));
    BLOCKSWAP_RETURN_IF_ERROR(memory.Expect(stream, own, "B's bytes, after A2 exited"));
    return memory.Release();
  }();
  *peer = channel.Finish(step, mine);
  return mine;
}

// A memfd page registered for the device in this process.
struct Page {
  SharedMemory memory;
  Mapping mapping;
  CUdeviceptr device = 0;
  std::atomic<uint32_t>& word(size_t index) const {
    return static_cast<std::atomic<uint32_t>*>(mapping.data())[index];
  }
  ~Page() {
    if (device != 0) (void)cu->cuMemHostUnregister(mapping.data());
  }
};

// The page A made, handed to the other side over the socket as the product
// hands descriptors (A's side: makes it and sends it after registering).
absl::Status AdoptOrCreate(Channel& channel, Role role, uint32_t step, const char* name,
                           Page& page) {
  if (role == Role::kA) {
    BLOCKSWAP_ASSIGN_OR_RETURN(page.memory, SharedMemory::Create(name, kPageBytes));
    return absl::OkStatus();
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(Received message, channel.Await(step, 1));
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd fd, message.TakeFd("the page"));
  BLOCKSWAP_ASSIGN_OR_RETURN(page.memory, SharedMemory::Adopt(std::move(fd), kPageBytes));
  return absl::OkStatus();
}

// Registers the page's mapping (mapped for the device, portable, and
// `extra` flags) and finds its device address.
absl::Status Register(Page& page, unsigned int extra) {
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(
      cuMemHostRegister, (page.mapping.data(), kPageBytes,
                          CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE | extra)));
  absl::Status mapped =
      BLOCKSWAP_PROBE_CU(cuMemHostGetDevicePointer, (&page.device, page.mapping.data(), 0));
  if (!mapped.ok()) (void)cu->cuMemHostUnregister(page.mapping.data());
  return mapped;
}

// A's memfd page of stream words, mapped read-write and registered in each
// process separately, each with its own device address.
absl::Status RegisterSharedPage(Channel& channel, Role role, Page& page, Channel::PeerEnd* peer) {
  constexpr uint32_t step = kSharedPage;
  absl::Status mine = [&]() -> absl::Status {
    BLOCKSWAP_RETURN_IF_ERROR(AdoptOrCreate(channel, role, step, "blockswap-probe-words", page));
    BLOCKSWAP_ASSIGN_OR_RETURN(page.mapping, page.memory.Map(Access::kReadWrite));
    BLOCKSWAP_RETURN_IF_ERROR(Register(page, 0));
    if (role == Role::kA) return channel.Send(step, 1, nullptr, 0, page.memory.fd().get());
    return absl::OkStatus();
  }();
  *peer = channel.Finish(step, mine);
  return mine;
}

// The waiter's stream waits (cyclic GEQ, as the rings' ready words) on word
// `index` at `address`, must be held, and is released by the other side,
// which has already been told to go (`release`) once the wait is issued.
absl::Status WaitForTheOtherSide(CUdeviceptr address, const std::function<absl::Status()>& release,
                                 absl::string_view released_by) {
  CUstream stream = nullptr;
  BLOCKSWAP_RETURN_IF_ERROR(NewStream(&stream));
  BLOCKSWAP_RETURN_IF_ERROR(
      BLOCKSWAP_PROBE_CU(cuStreamWaitValue32, (stream, address, 1, CU_STREAM_WAIT_VALUE_GEQ)));
  BLOCKSWAP_ASSIGN_OR_RETURN(CUevent marker, Marker(stream));
  BLOCKSWAP_RETURN_IF_ERROR(StillHeld(marker, "cuStreamWaitValue32 on a word still 0"));
  BLOCKSWAP_RETURN_IF_ERROR(release());
  return AwaitMarker(marker, absl::StrCat("the stream waiting on the word ", released_by));
}

// The writer's stream writes 1 into word `index` of `page`, which the CPU
// then reads.
absl::Status WriteWithStream(const Page& page, size_t index) {
  CUstream stream = nullptr;
  BLOCKSWAP_RETURN_IF_ERROR(NewStream(&stream));
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(
      cuStreamWriteValue32,
      (stream, page.device + index * sizeof(uint32_t), 1, CU_STREAM_WRITE_VALUE_DEFAULT)));
  BLOCKSWAP_RETURN_IF_ERROR(Sync(stream, "the stream writing the word"));
  if (uint32_t seen = page.word(index).load(std::memory_order_acquire); seen != 1) {
    return absl::DataLossError(absl::StrCat("cuStreamWriteValue32 completed but the CPU reads ",
                                            seen, " in the word, not 1"));
  }
  return absl::OkStatus();
}

// A second page of A's, which B maps read-only (PROT_READ) and registers
// with CU_MEMHOSTREGISTER_READ_ONLY where the device says it can: B's stream
// waits on a word of it that A's stream then writes, as a trainer's waits
// on the words the daemon hands out read-only. UNIMPLEMENTED (the line's
// SKIP) where the attribute says the device cannot.
absl::Status ReadOnlyPage(Channel& channel, Role role, Channel::PeerEnd* peer) {
  constexpr uint32_t step = kReadOnlyPage;
  Page page;
  absl::Status mine = [&]() -> absl::Status {
    BLOCKSWAP_RETURN_IF_ERROR(
        AdoptOrCreate(channel, role, step, "blockswap-probe-read-only", page));
    if (role == Role::kA) {
      BLOCKSWAP_ASSIGN_OR_RETURN(page.mapping, page.memory.Map(Access::kReadWrite));
      BLOCKSWAP_RETURN_IF_ERROR(Register(page, 0));
      BLOCKSWAP_RETURN_IF_ERROR(channel.Send(step, 1, nullptr, 0, page.memory.fd().get()));
      BLOCKSWAP_RETURN_IF_ERROR(channel.Await(step, 2).status());
      return WriteWithStream(page, 0);
    }
    int supported = 0;
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(
        cuDeviceGetAttribute,
        (&supported, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, device)));
    if (supported == 0) {
      return absl::UnimplementedError(
          "CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED is 0: a page mapped read-only "
          "cannot be registered here; a trainer must map the daemon's words read-write to "
          "register them");
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(page.mapping, page.memory.Map(Access::kReadOnly));
    BLOCKSWAP_RETURN_IF_ERROR(Register(page, CU_MEMHOSTREGISTER_READ_ONLY));
    return WaitForTheOtherSide(
        page.device, [&] { return channel.Send(step, 2); }, "A's stream wrote");
  }();
  *peer = channel.Finish(step, mine);
  return mine;
}

// The stream-word lines, each on a word of its own of the shared page: the
// waiter's stream waits on it, must be held, then is released by the other
// process: with a stream write (`host_store` false) or a plain store of the
// CPU, no CUDA call (what a client's watchdog does when the daemon is gone).
struct WordLine {
  Step step;
  size_t index;  // of the word
  bool a_waits;
  bool host_store;
  const char* name;
  const char* passed;
};
constexpr WordLine kWordLines[] = {
    {kWordAWritesBWaits, 0, false, false, "cuda.stream-word.a-writes-b-waits",
     "B's cuStreamWaitValue32 (GEQ) on the word held B's stream; A's cuStreamWriteValue32 "
     "released it"},
    {kWordBWritesAWaits, 1, true, false, "cuda.stream-word.b-writes-a-waits",
     "A's cuStreamWaitValue32 (GEQ) on the word held A's stream; B's cuStreamWriteValue32 "
     "released it"},
    {kWordHostStore, 2, false, true, "cuda.stream-word.host-store-releases-wait",
     "B's cuStreamWaitValue32 (GEQ) held B's stream; a plain CPU store by A into the memfd "
     "page, no CUDA call, released it"},
};

absl::Status StreamWord(Channel& channel, Role role, const WordLine& line, Page& page,
                        Channel::PeerEnd* peer) {
  const uint32_t step = line.step;
  const size_t index = line.index;
  const bool host_store = line.host_store;
  const bool i_wait = (role == Role::kA) == line.a_waits;
  absl::Status mine = [&]() -> absl::Status {
    if (i_wait) {
      return WaitForTheOtherSide(
          page.device + index * sizeof(uint32_t), [&] { return channel.Send(step, 1); },
          host_store ? "the other process stored" : "the other process's stream wrote");
    }
    BLOCKSWAP_RETURN_IF_ERROR(channel.Await(step, 1).status());
    if (!host_store) return WriteWithStream(page, index);
    page.word(index).store(1, std::memory_order_release);
    return absl::OkStatus();
  }();
  // A waiter that failed releases its own stream, so nothing stays stuck.
  if (i_wait) page.word(index).store(1, std::memory_order_release);
  *peer = channel.Finish(step, mine);
  return mine;
}

// The lines after cuda.init, in order.
constexpr const char* kCudaLines[] = {
    "cuda.vmm-fd.import.same-uid",       "cuda.vmm-fd.import.cross-uid",
    "cuda.vmm-fd.after-exporter-exit",   "cuda.host-register.shared-page",
    "cuda.host-register.read-only",      "cuda.stream-word.a-writes-b-waits",
    "cuda.stream-word.b-writes-a-waits", "cuda.stream-word.host-store-releases-wait"};
// The lines from here on need cuda.host-register.shared-page's page.
constexpr size_t kFirstLineOnTheSharedPage = 4;

// Whether B is another user than A (and A2): the cross-uid line needs one.
struct Peers {
  bool cross_uid = false;
  pid_t a2 = 0;
  bool a2_reaped = false;
};

// A peer's first step: CUDA in this process, then A's word that every
// process has it (A skips every later line otherwise).
bool Started(Channel& channel, Role role) {
  const absl::Status init = InitCuda().status();
  (void)channel.Finish(kInit, init, Who(role));
  return init.ok() && channel.Finish(kAllStarted, absl::OkStatus()).status.ok();
}

// B's part, step by step; every step's outcome comes from the ends, so B
// skips exactly the steps A skips.
void RunB(Channel& channel, const Peers& peers) {
  if (!Started(channel, Role::kB)) return;
  Channel::PeerEnd peer;
  if (peers.cross_uid) (void)ImportFromA(channel, Role::kB, kImportCrossUid, &peer);
  (void)ImportPastExporterExit(channel, &peer);
  Page page;
  if (!RegisterSharedPage(channel, Role::kB, page, &peer).ok() || !peer.status.ok()) return;
  (void)ReadOnlyPage(channel, Role::kB, &peer);
  for (const WordLine& line : kWordLines) (void)StreamWord(channel, Role::kB, line, page, &peer);
}

// A2's part: the same-uid importer, then the exporter that exits.
void RunA2(Channel& channel) {
  if (!Started(channel, Role::kA2)) return;
  Channel::PeerEnd peer;
  (void)ImportFromA(channel, Role::kA2, kImportSameUid, &peer);
  (void)ExportThenExit(channel, &peer);
}

// A's part, with both peers, printing every line.
void RunA(Channel& to_b, Channel& to_a2, Peers& peers, Report& report) {
  const absl::StatusOr<std::string> device_name = InitCuda();
  const absl::Status init = device_name.status();
  if (cu == nullptr) {
    report.Fail("cuda.driver", init.message());
  } else {
    const int version = cuda_internal::LoadedCudaDriverVersion();
    report.Pass(
        "cuda.driver",
        absl::StrCat("CUDA ", cuda_internal::CudaVersionString(version), " (", version,
                     "); blockswap needs ",
                     cuda_internal::CudaVersionString(cuda_internal::kLowestCudaDriverVersion),
                     " or later"));
  }
  std::vector<Channel::PeerEnd> ends = {to_b.Finish(kInit, init), to_a2.Finish(kInit, init)};
  if (cu == nullptr) {
    report.Skip("cuda.init", "not run: cuda.driver failed");
  } else {
    Conclude(report, "cuda.init", init, ends,
             absl::StrCat("device 0 ", device_name.value_or(""), ", its primary context in ",
                          Who(Role::kA), ", ", ends[0].info, " and ", ends[1].info));
  }
  const bool started = init.ok() && ends[0].status.ok() && ends[1].status.ok();
  const absl::Status all =
      started ? absl::OkStatus() : absl::AbortedError("gave up: a process failed cuda.init");
  // A peer that failed has exited: its end is its socket's closing.
  (void)to_b.Finish(kAllStarted, all);
  (void)to_a2.Finish(kAllStarted, all);
  if (!started) {
    for (const char* name : kCudaLines) report.Skip(name, "not run: cuda.init failed");
    return;
  }

  Channel::PeerEnd peer;
  absl::Status mine = ImportFromA(to_a2, Role::kA, kImportSameUid, &peer);
  Conclude(report, "cuda.vmm-fd.import.same-uid", mine, {peer},
           "A's device memory (cuMemCreate, 2 MiB granules) exported as a descriptor "
           "(cuMemExportToShareableHandle), sent over a unix socket to A2 of A's uid, imported "
           "(cuMemImportFromShareableHandle, cuMemAddressReserve, cuMemMap, cuMemSetAccess); A2 "
           "read A's bytes, A read back A2's");
  if (peers.cross_uid) {
    mine = ImportFromA(to_b, Role::kA, kImportCrossUid, &peer);
    Conclude(report, "cuda.vmm-fd.import.cross-uid", mine, {peer},
             "the same between A and B of the client user: B read A's bytes, A read back B's");
  } else {
    report.Skip("cuda.vmm-fd.import.cross-uid",
                "not run: B runs as A's own user (env.client-user)");
  }
  std::vector<Channel::PeerEnd> relay_ends;
  mine = RelayUntilExporterExit(to_a2, to_b, peers.a2, &peers.a2_reaped, &relay_ends);
  Conclude(report, "cuda.vmm-fd.after-exporter-exit", mine, relay_ends,
           absl::StrCat("A2's device memory imported and mapped by ", ends[0].info,
                        "; A2 released it and exited; B, its mapping kept, still read A2's "
                        "bytes and wrote its own (not documented by CUDA)"));

  Page page;
  mine = RegisterSharedPage(to_b, Role::kA, page, &peer);
  Conclude(report, "cuda.host-register.shared-page", mine, {peer},
           "A's memfd page, passed to B over a unix socket, mapped read-write and registered in "
           "each (cuMemHostRegister DEVICEMAP|PORTABLE, cuMemHostGetDevicePointer)");
  if (!mine.ok() || !peer.status.ok()) {
    for (size_t i = kFirstLineOnTheSharedPage; i < std::size(kCudaLines); ++i) {
      report.Skip(kCudaLines[i], "not run: cuda.host-register.shared-page failed");
    }
    return;
  }
  mine = ReadOnlyPage(to_b, Role::kA, &peer);
  Conclude(report, "cuda.host-register.read-only", mine, {peer},
           "a second page of A's, mapped PROT_READ by B and registered with "
           "CU_MEMHOSTREGISTER_READ_ONLY; B's cuStreamWaitValue32 on it held B's stream until "
           "A's cuStreamWriteValue32 released it");
  for (const WordLine& line : kWordLines) {
    mine = StreamWord(to_b, Role::kA, line, page, &peer);
    Conclude(report, line.name, mine, {peer}, line.passed);
  }
}

// B becomes the other user as a trainer of another uid is: no
// supplementary groups, that user's own group (from passwd), dumpable.
absl::Status BecomePeerUser(const PeerUser& user) {
  if (::setgroups(0, nullptr) != 0 || ::setgid(user.gid) != 0 || ::setuid(user.uid) != 0 ||
      ::prctl(PR_SET_DUMPABLE, 1) != 0) {
    return ErrnoStatus(errno, absl::StrCat("becoming uid ", user.uid, " gid ", user.gid));
  }
  return absl::OkStatus();
}

// A child running `side` on its end of a new socket pair; A keeps the other
// end. Nullopt (and a cuda.init line) when the pair or the fork fails.
std::optional<Channel> Fork(Report& report, Role who, pid_t* pid,
                            const std::function<void(Channel&)>& side) {
  int sockets[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) {
    report.Fail("cuda.init", ErrnoStatus(errno, "socketpair for the processes").message());
    return std::nullopt;
  }
  UniqueFd mine(sockets[0]);
  UniqueFd theirs(sockets[1]);
  std::fflush(stdout);
  *pid = ::fork();
  if (*pid < 0) {
    report.Fail("cuda.init",
                ErrnoStatus(errno, absl::StrCat("fork of process ", who == Role::kB ? "B" : "A2"))
                    .message());
    return std::nullopt;
  }
  if (*pid == 0) {
    mine.Reset();
    Channel channel(std::move(theirs), who);
    side(channel);
    ::_exit(0);
  }
  return Channel(std::move(mine), Role::kA);
}

// Waits for a child that should end on its own; kills one that hangs.
void Reap(pid_t child) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace

void RunCudaPrimitives(Report& report, std::optional<PeerUser> peer_user) {
  Peers peers;
  peers.cross_uid = peer_user.has_value();
  pid_t b = 0;
  std::optional<Channel> to_b = Fork(report, Role::kB, &b, [&](Channel& channel) {
    absl::Status became = peer_user.has_value() ? BecomePeerUser(*peer_user) : absl::OkStatus();
    if (!became.ok()) {
      // B ends its first step with the failure, so A prints it as cuda.init's.
      channel.Finish(kInit, became);
      return;
    }
    RunB(channel, peers);
  });
  if (!to_b.has_value()) return;
  std::optional<Channel> to_a2 =
      Fork(report, Role::kA2, &peers.a2, [](Channel& channel) { RunA2(channel); });
  if (to_a2.has_value()) RunA(*to_b, *to_a2, peers, report);
  // B and A2 end right after their last step; one that hangs anyway is killed.
  to_b.reset();
  to_a2.reset();
  Reap(b);
  if (peers.a2 > 0 && !peers.a2_reaped) Reap(peers.a2);
}

}  // namespace blockswap::probe
