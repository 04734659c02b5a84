#include "tests/gpu/cuda_primitives.h"

#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
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
#include "shared/os/fd_passing.h"
#include "shared/os/shared_memory.h"

namespace blockswap::probe {
namespace {

// How long one process waits for the other's next message, and how long a
// primitive may take to complete once nothing holds it any more. A GPU does
// each in microseconds; the limits only keep a broken one from hanging.
constexpr absl::Duration kPeerTimeout = absl::Seconds(10);
constexpr absl::Duration kCompletionTimeout = absl::Seconds(5);
// How long a stream that must be held (its wait not yet satisfied) is
// watched before it counts as held.
constexpr absl::Duration kHoldCheck = absl::Milliseconds(100);
constexpr size_t kIpcBytes = size_t{1} << 20;
constexpr size_t kWordsBytes = 4096;

const cuda_internal::CudaDriverTable* cu = nullptr;  // set by InitCuda, per process

// "cuIpcOpenMemHandle: CUDA_ERROR_INVALID_CONTEXT (invalid device context)".
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

enum class Role { kA, kB };  // A: the daemon's side (exports), B: a trainer's (imports)

std::string Who(Role role) {
  return absl::StrCat(role == Role::kA ? "A" : "B", " (pid ", ::getpid(), ", uid ", ::getuid(),
                      ")");
}

// One message: the step and phase it belongs to, whether the sender's part
// went well, a payload (an IPC handle) and the sender's detail (its failure,
// or what it saw).
struct Wire {
  uint32_t step = 0;
  uint32_t phase = 0;
  uint32_t ok = 1;
  uint32_t aborted = 0;  // the sender gave up because this side did
  char data[64] = {};
  char detail[480] = {};
};
static_assert(sizeof(CUipcMemHandle) <= sizeof(Wire::data));
static_assert(sizeof(CUipcEventHandle) <= sizeof(Wire::data));

// A step ends with one end message from each side, its status; a side that
// fails sends its end at once and skips the rest of its part, so the peer,
// awaiting a message of that step, receives the end instead and gives up too
// (ABORTED): both sides stay in step whoever fails where.
constexpr uint32_t kEnd = 99;

struct Received {
  Wire wire;
  std::vector<UniqueFd> fds;
};

// The two processes' socket (SOCK_SEQPACKET: one message per send).
class Channel {
 public:
  Channel(UniqueFd socket, Role role) : socket_(std::move(socket)), role_(role) {}

  absl::Status Send(uint32_t step, uint32_t phase, const void* data = nullptr, size_t size = 0,
                    int fd = -1) {
    Wire wire;
    wire.step = step;
    wire.phase = phase;
    if (size > 0) std::memcpy(wire.data, data, size);
    return SendWire(wire, fd);
  }

  // The peer's message `phase` of `step`; ABORTED when the peer ended the
  // step first (failed), DEADLINE_EXCEEDED after kPeerTimeout.
  absl::StatusOr<Received> Await(uint32_t step, uint32_t phase) {
    const absl::Time deadline = absl::Now() + kPeerTimeout;
    while (true) {
      if (peer_end_.has_value() && peer_end_->step == step) {
        if (phase == kEnd) return Received{*peer_end_, {}};
        return absl::AbortedError("gave up: the other process ended this step first");
      }
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      pollfd pfd{socket_.get(), POLLIN, 0};
      const int ready = left <= 0 ? 0 : ::poll(&pfd, 1, static_cast<int>(left));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        return absl::DeadlineExceededError(absl::StrCat("no message from the other process within ",
                                                        absl::FormatDuration(kPeerTimeout),
                                                        " (step ", step, ", phase ", phase, ")"));
      }
      BLOCKSWAP_ASSIGN_OR_RETURN(ReceivedMessage message, ReceiveWithFds(socket_));
      if (message.payload.size() != sizeof(Wire)) {
        return absl::DataLossError(absl::StrCat("a message of ", message.payload.size(),
                                                " bytes from the other process (", sizeof(Wire),
                                                " expected)"));
      }
      Received received;
      std::memcpy(&received.wire, message.payload.data(), sizeof(Wire));
      received.fds = std::move(message.fds);
      // Messages of an earlier step, sent before its sender gave up, are stale.
      if (received.wire.step != step) continue;
      if (received.wire.phase == kEnd) {
        peer_end_ = received.wire;
        if (phase == kEnd) return received;
        continue;
      }
      if (received.wire.phase == phase) return received;
    }
  }

  // Ends the step with this side's status (`info`, when it went well, is
  // what the line may say of this side) and returns the peer's.
  struct PeerEnd {
    absl::Status status;
    std::string info;
  };
  PeerEnd Finish(uint32_t step, const absl::Status& mine, const std::string& info = "") {
    Wire wire;
    wire.step = step;
    wire.phase = kEnd;
    wire.ok = mine.ok();
    wire.aborted = absl::IsAborted(mine);
    const std::string detail = mine.ok() ? info : absl::StrCat(Who(role_), ": ", mine.message());
    absl::SNPrintF(wire.detail, sizeof(wire.detail), "%s", detail);
    if (absl::Status sent = SendWire(wire, -1); !sent.ok()) {
      return {absl::UnavailableError(absl::StrCat("the other process is gone: ", sent.message())),
              ""};
    }
    absl::StatusOr<Received> end = Await(step, kEnd);
    peer_end_.reset();
    if (!end.ok()) return {end.status(), ""};
    if (end->wire.ok) return {absl::OkStatus(), end->wire.detail};
    if (end->wire.aborted) return {absl::AbortedError(end->wire.detail), ""};
    return {absl::InternalError(end->wire.detail), ""};
  }

 private:
  absl::Status SendWire(const Wire& wire, int fd) {
    std::vector<int> fds;
    if (fd >= 0) fds.push_back(fd);
    return SendWithFds(socket_,
                       absl::string_view(reinterpret_cast<const char*>(&wire), sizeof(wire)), fds);
  }

  UniqueFd socket_;
  Role role_;
  std::optional<Wire> peer_end_;
};

// The outcome of a step as the line reports it: PASS when both sides went
// well, else the first real failure (a side that only gave up because the
// other failed is named last).
void Conclude(Report& report, absl::string_view name, const absl::Status& mine,
              const Channel::PeerEnd& peer, absl::string_view passed) {
  if (mine.ok() && peer.status.ok()) {
    report.Pass(name, passed);
    return;
  }
  std::string a = mine.ok() ? "" : absl::StrCat(Who(Role::kA), ": ", mine.message());
  std::string b(peer.status.message());
  if (!mine.ok() && !absl::IsAborted(mine)) {
    report.Fail(name, a);
  } else if (!peer.status.ok() && !absl::IsAborted(peer.status)) {
    report.Fail(name, b);
  } else {
    report.Fail(name, !a.empty() ? a : b);
  }
}

absl::Status NewStream(CUstream* stream) {
  // Non-blocking, as the product's streams: nothing of the legacy stream's
  // implicit ordering may make a check pass.
  return BLOCKSWAP_PROBE_CU(cuStreamCreate, (stream, CU_STREAM_NON_BLOCKING));
}

// A marker recorded on `stream` now: complete once everything before it is.
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

// A host function that holds its stream until opened (at most 10 s), so that
// a record after it stays pending while the other process issues its wait.
// It calls no CUDA API (a host function may not). Never freed: a stream
// that failed may still run it.
struct Gate {
  std::atomic<int> open{0};
};
void CUDA_CB HoldUntilOpen(void* user_data) noexcept {
  auto* gate = static_cast<Gate*>(user_data);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (gate->open.load(std::memory_order_acquire) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

std::vector<uint8_t> Pattern(uint8_t seed) {
  std::vector<uint8_t> bytes(kIpcBytes);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + seed);
  return bytes;
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

// --- the steps: each run by both processes, `role` saying which side ---

// Step 1: the driver and device 0's primary context in each process.
absl::StatusOr<std::string> InitCuda() {
  BLOCKSWAP_ASSIGN_OR_RETURN(cu, cuda_internal::LoadCudaDriver());
  BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuInit, (0)));
  CUdevice device = 0;
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

// Step 2: A's device memory, exported; B imports it, reads A's bytes and
// copies its own into it; A reads those back. B closes its mapping before
// its end message, A frees only after it (freeing before every importer
// closed is undefined).
absl::Status IpcMemory(Channel& channel, Role role, uint32_t step, Channel::PeerEnd* peer) {
  CUstream stream = nullptr;
  std::vector<uint8_t> seen(kIpcBytes);
  if (role == Role::kA) {
    CUdeviceptr memory = 0;
    absl::Status mine = [&]() -> absl::Status {
      BLOCKSWAP_RETURN_IF_ERROR(NewStream(&stream));
      BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuMemAlloc, (&memory, kIpcBytes)));
      const std::vector<uint8_t> first = Pattern(1);
      BLOCKSWAP_RETURN_IF_ERROR(
          BLOCKSWAP_PROBE_CU(cuMemcpyHtoDAsync, (memory, first.data(), kIpcBytes, stream)));
      BLOCKSWAP_RETURN_IF_ERROR(Sync(stream, "the exporter's copy into its memory"));
      CUipcMemHandle handle{};
      BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuIpcGetMemHandle, (&handle, memory)));
      BLOCKSWAP_RETURN_IF_ERROR(channel.Send(step, 1, &handle, sizeof(handle)));
      BLOCKSWAP_RETURN_IF_ERROR(channel.Await(step, 2).status());
      BLOCKSWAP_RETURN_IF_ERROR(
          BLOCKSWAP_PROBE_CU(cuMemcpyDtoHAsync, (seen.data(), memory, kIpcBytes, stream)));
      BLOCKSWAP_RETURN_IF_ERROR(Sync(stream, "the exporter's copy out of its memory"));
      return SameBytes(seen, Pattern(2), "the importer's copy, read by the exporter");
    }();
    *peer = channel.Finish(step, mine);
    if (memory != 0) (void)cu->cuMemFree(memory);
    return mine;
  }
  CUdeviceptr mapped = 0;
  absl::Status mine = [&]() -> absl::Status {
    BLOCKSWAP_ASSIGN_OR_RETURN(Received handle, channel.Await(step, 1));
    CUipcMemHandle ipc{};
    std::memcpy(&ipc, handle.wire.data, sizeof(ipc));
    BLOCKSWAP_RETURN_IF_ERROR(
        BLOCKSWAP_PROBE_CU(cuIpcOpenMemHandle, (&mapped, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)));
    BLOCKSWAP_RETURN_IF_ERROR(NewStream(&stream));
    BLOCKSWAP_RETURN_IF_ERROR(
        BLOCKSWAP_PROBE_CU(cuMemcpyDtoHAsync, (seen.data(), mapped, kIpcBytes, stream)));
    BLOCKSWAP_RETURN_IF_ERROR(Sync(stream, "the importer's copy out of the imported memory"));
    BLOCKSWAP_RETURN_IF_ERROR(
        SameBytes(seen, Pattern(1), "the exporter's bytes, read by the importer"));
    const std::vector<uint8_t> second = Pattern(2);
    BLOCKSWAP_RETURN_IF_ERROR(
        BLOCKSWAP_PROBE_CU(cuMemcpyHtoDAsync, (mapped, second.data(), kIpcBytes, stream)));
    BLOCKSWAP_RETURN_IF_ERROR(Sync(stream, "the importer's copy into the imported memory"));
    absl::Status closed = BLOCKSWAP_PROBE_CU(cuIpcCloseMemHandle, (mapped));
    mapped = 0;
    BLOCKSWAP_RETURN_IF_ERROR(closed);
    return channel.Send(step, 2);
  }();
  if (mapped != 0) (void)cu->cuIpcCloseMemHandle(mapped);
  *peer = channel.Finish(step, mine);
  return mine;
}

// Steps 3 and 4: an interprocess event A created, imported by B; the
// recorder records it behind a gate that holds its stream, the waiter issues
// its wait after the record (the order docs/protocol.md's slot
// generations enforce) and must stay held until the gate opens, then be released.
absl::Status IpcEvent(Channel& channel, Role role, uint32_t step, bool a_records,
                      Channel::PeerEnd* peer) {
  const bool i_record = (role == Role::kA) == a_records;
  CUevent event = nullptr;
  auto* gate = new Gate;  // never freed: see Gate
  absl::Status mine = [&]() -> absl::Status {
    if (role == Role::kA) {
      BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(
          cuEventCreate, (&event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING)));
      CUipcEventHandle handle{};
      BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuIpcGetEventHandle, (&handle, event)));
      BLOCKSWAP_RETURN_IF_ERROR(channel.Send(step, 1, &handle, sizeof(handle)));
    } else {
      BLOCKSWAP_ASSIGN_OR_RETURN(Received handle, channel.Await(step, 1));
      CUipcEventHandle ipc{};
      std::memcpy(&ipc, handle.wire.data, sizeof(ipc));
      BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuIpcOpenEventHandle, (&event, ipc)));
    }
    CUstream stream = nullptr;
    BLOCKSWAP_RETURN_IF_ERROR(NewStream(&stream));
    if (i_record) {
      BLOCKSWAP_RETURN_IF_ERROR(
          BLOCKSWAP_PROBE_CU(cuLaunchHostFunc, (stream, HoldUntilOpen, gate)));
      BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuEventRecord, (event, stream)));
      BLOCKSWAP_RETURN_IF_ERROR(channel.Send(step, 2));
      BLOCKSWAP_RETURN_IF_ERROR(channel.Await(step, 3).status());
      gate->open.store(1, std::memory_order_release);
      return Sync(stream, "the recorder's stream, its gate open");
    }
    BLOCKSWAP_RETURN_IF_ERROR(channel.Await(step, 2).status());
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(cuStreamWaitEvent, (stream, event, 0)));
    BLOCKSWAP_ASSIGN_OR_RETURN(CUevent marker, Marker(stream));
    BLOCKSWAP_RETURN_IF_ERROR(
        StillHeld(marker, "cuStreamWaitEvent on the other process's pending record"));
    BLOCKSWAP_RETURN_IF_ERROR(channel.Send(step, 3));
    return AwaitMarker(marker,
                       "the stream waiting on the other process's record, once it completed");
  }();
  gate->open.store(1, std::memory_order_release);
  // The importer lets go of the event before its end, the exporter destroys
  // it only after (using an imported event after its exporter destroyed it
  // is undefined).
  if (role == Role::kB && event != nullptr) (void)cu->cuEventDestroy(event);
  *peer = channel.Finish(step, mine);
  if (role == Role::kA && event != nullptr) (void)cu->cuEventDestroy(event);
  return mine;
}

// The memfd page of stream words, registered for the device in this process.
struct Words {
  SharedMemory memory;
  Mapping mapping;
  CUdeviceptr device = 0;
  std::atomic<uint32_t>& word(size_t index) const {
    return static_cast<std::atomic<uint32_t>*>(mapping.data())[index];
  }
};

// Step 5: A's memfd page, handed to B over the socket as the product hands
// descriptors, mapped and registered (mapped for the device, portable) in
// each process separately, each with its own device address.
absl::Status RegisterWords(Channel& channel, Role role, uint32_t step, Words& words,
                           Channel::PeerEnd* peer) {
  absl::Status mine = [&]() -> absl::Status {
    if (role == Role::kA) {
      BLOCKSWAP_ASSIGN_OR_RETURN(words.memory,
                                 SharedMemory::Create("blockswap-probe-words", kWordsBytes));
    } else {
      BLOCKSWAP_ASSIGN_OR_RETURN(Received page, channel.Await(step, 1));
      if (page.fds.size() != 1) {
        return absl::DataLossError(absl::StrCat("the page's descriptor did not arrive (",
                                                page.fds.size(), " descriptors)"));
      }
      BLOCKSWAP_ASSIGN_OR_RETURN(words.memory,
                                 SharedMemory::Adopt(std::move(page.fds[0]), kWordsBytes));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(words.mapping, words.memory.Map(Access::kReadWrite));
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(
        cuMemHostRegister, (words.mapping.data(), kWordsBytes,
                            CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE)));
    BLOCKSWAP_RETURN_IF_ERROR(
        BLOCKSWAP_PROBE_CU(cuMemHostGetDevicePointer, (&words.device, words.mapping.data(), 0)));
    if (role == Role::kA) {
      BLOCKSWAP_RETURN_IF_ERROR(channel.Send(step, 1, nullptr, 0, words.memory.fd().get()));
    }
    return absl::OkStatus();
  }();
  *peer = channel.Finish(step, mine);
  return mine;
}

// Steps 6 to 8: the waiter's stream waits (cyclic GEQ, as the rings' ready
// words) on word `index` of the page; it must be held, then released by the
// other process: with a stream write (`host_store` false) or a plain store
// of the CPU, no CUDA call (what a client's watchdog does when the daemon is
// gone).
absl::Status StreamWord(Channel& channel, Role role, uint32_t step, bool a_waits, size_t index,
                        bool host_store, Words& words, Channel::PeerEnd* peer) {
  const bool i_wait = (role == Role::kA) == a_waits;
  const CUdeviceptr address = words.device + index * sizeof(uint32_t);
  absl::Status mine = [&]() -> absl::Status {
    CUstream stream = nullptr;
    BLOCKSWAP_RETURN_IF_ERROR(NewStream(&stream));
    if (i_wait) {
      BLOCKSWAP_RETURN_IF_ERROR(
          BLOCKSWAP_PROBE_CU(cuStreamWaitValue32, (stream, address, 1, CU_STREAM_WAIT_VALUE_GEQ)));
      BLOCKSWAP_ASSIGN_OR_RETURN(CUevent marker, Marker(stream));
      BLOCKSWAP_RETURN_IF_ERROR(StillHeld(marker, "cuStreamWaitValue32 on a word still 0"));
      BLOCKSWAP_RETURN_IF_ERROR(channel.Send(step, 1));
      return AwaitMarker(
          marker, host_store ? "the stream waiting on the word the other process stored"
                             : "the stream waiting on the word the other process's stream wrote");
    }
    BLOCKSWAP_RETURN_IF_ERROR(channel.Await(step, 1).status());
    if (host_store) {
      words.word(index).store(1, std::memory_order_release);
      return absl::OkStatus();
    }
    BLOCKSWAP_RETURN_IF_ERROR(BLOCKSWAP_PROBE_CU(
        cuStreamWriteValue32, (stream, address, 1, CU_STREAM_WRITE_VALUE_DEFAULT)));
    BLOCKSWAP_RETURN_IF_ERROR(Sync(stream, "the stream writing the word"));
    if (uint32_t seen = words.word(index).load(std::memory_order_acquire); seen != 1) {
      return absl::DataLossError(absl::StrCat("cuStreamWriteValue32 completed but the CPU reads ",
                                              seen, " in the word, not 1"));
    }
    return absl::OkStatus();
  }();
  // A waiter that failed releases its own stream, so nothing stays stuck.
  if (i_wait) words.word(index).store(1, std::memory_order_release);
  *peer = channel.Finish(step, mine);
  return mine;
}

// Every step in order, in either process; A (with `report`) prints the
// lines. Both sides learn each step's outcome from the ends, so they skip
// the same later steps.
void RunSide(Channel& channel, Role role, Report* report) {
  Channel::PeerEnd peer;
  auto line = [&](absl::string_view name, const absl::Status& mine, absl::string_view passed) {
    if (report != nullptr) Conclude(*report, name, mine, peer, passed);
  };
  auto skip = [&](absl::string_view name, absl::string_view why) {
    if (report != nullptr) report->Skip(name, why);
  };

  absl::StatusOr<std::string> device = InitCuda();
  absl::Status init = device.status();
  if (role == Role::kA && cu == nullptr) {
    report->Fail("cuda.driver", init.message());
  } else if (role == Role::kA) {
    const int version = cuda_internal::LoadedCudaDriverVersion();
    report->Pass(
        "cuda.driver",
        absl::StrCat("CUDA ", cuda_internal::CudaVersionString(version), " (", version,
                     "); blockswap needs ",
                     cuda_internal::CudaVersionString(cuda_internal::kLowestCudaDriverVersion),
                     " or later"));
  }
  peer = channel.Finish(1, init, absl::StrCat(Who(role)));
  if (role == Role::kA && cu == nullptr) {
    skip("cuda.init", "not run: cuda.driver failed");
  } else {
    line("cuda.init", init,
         init.ok() && peer.status.ok()
             ? absl::StrCat("device 0 ", *device, ", its primary context in ", Who(Role::kA),
                            " and ", peer.info)
             : "");
  }
  const bool cuda_ok = init.ok() && peer.status.ok();
  constexpr const char* kNoInit = "not run: cuda.init failed";
  if (!cuda_ok) {
    for (const char* name :
         {"cuda.ipc-memory", "cuda.ipc-event.a-records-b-waits", "cuda.ipc-event.b-records-a-waits",
          "cuda.host-register.memfd", "cuda.stream-word.a-writes-b-waits",
          "cuda.stream-word.b-writes-a-waits", "cuda.stream-word.host-store-releases-wait"}) {
      skip(name, kNoInit);
    }
    return;
  }

  absl::Status mine = IpcMemory(channel, role, 2, &peer);
  line("cuda.ipc-memory", mine,
       "1 MiB of A's device memory exported (cuIpcGetMemHandle) and opened by B "
       "(cuIpcOpenMemHandle); B read A's bytes, A read back B's copy into it");

  mine = IpcEvent(channel, role, 3, /*a_records=*/true, &peer);
  line("cuda.ipc-event.a-records-b-waits", mine,
       "A's interprocess event opened by B (cuIpcOpenEventHandle); B's cuStreamWaitEvent, "
       "issued after A's record, held B's stream until the record completed, then released it");
  mine = IpcEvent(channel, role, 4, /*a_records=*/false, &peer);
  line("cuda.ipc-event.b-records-a-waits", mine,
       "B recorded A's event through its import; A's cuStreamWaitEvent, issued after B's "
       "record, held A's stream until the record completed, then released it");

  Words words;
  mine = RegisterWords(channel, role, 5, words, &peer);
  line("cuda.host-register.memfd", mine,
       "A's memfd page, passed to B over a unix socket, mapped and registered in each "
       "(cuMemHostRegister DEVICEMAP|PORTABLE, cuMemHostGetDevicePointer)");
  const bool words_ok = mine.ok() && peer.status.ok();
  constexpr const char* kNoWords = "not run: cuda.host-register.memfd failed";
  if (!words_ok) {
    for (const char* name :
         {"cuda.stream-word.a-writes-b-waits", "cuda.stream-word.b-writes-a-waits",
          "cuda.stream-word.host-store-releases-wait"}) {
      skip(name, kNoWords);
    }
    return;
  }
  mine = StreamWord(channel, role, 6, /*a_waits=*/false, 0, /*host_store=*/false, words, &peer);
  line("cuda.stream-word.a-writes-b-waits", mine,
       "B's cuStreamWaitValue32 (GEQ) on the word held B's stream; A's cuStreamWriteValue32 "
       "released it");
  mine = StreamWord(channel, role, 7, /*a_waits=*/true, 1, /*host_store=*/false, words, &peer);
  line("cuda.stream-word.b-writes-a-waits", mine,
       "A's cuStreamWaitValue32 (GEQ) on the word held A's stream; B's cuStreamWriteValue32 "
       "released it");
  mine = StreamWord(channel, role, 8, /*a_waits=*/false, 2, /*host_store=*/true, words, &peer);
  line("cuda.stream-word.host-store-releases-wait", mine,
       "B's cuStreamWaitValue32 (GEQ) held B's stream; a plain CPU store by A into the memfd "
       "page, no CUDA call, released it");
  if (words.device != 0) (void)cu->cuMemHostUnregister(words.mapping.data());
}

// The peer becomes the other user as a trainer of another uid is: no
// supplementary groups, that user's own group (from passwd), dumpable.
absl::Status BecomePeerUser(const PeerUser& user) {
  if (::setgroups(0, nullptr) != 0 || ::setgid(user.gid) != 0 || ::setuid(user.uid) != 0 ||
      ::prctl(PR_SET_DUMPABLE, 1) != 0) {
    return ErrnoStatus(errno, absl::StrCat("becoming uid ", user.uid, " gid ", user.gid));
  }
  return absl::OkStatus();
}

}  // namespace

void RunCudaPrimitives(Report& report, std::optional<PeerUser> peer_user) {
  int sockets[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) {
    report.Fail("cuda.init", ErrnoStatus(errno, "socketpair for the two processes").message());
    return;
  }
  UniqueFd mine(sockets[0]);
  UniqueFd theirs(sockets[1]);
  std::fflush(stdout);
  const pid_t child = ::fork();
  if (child < 0) {
    report.Fail("cuda.init", ErrnoStatus(errno, "fork of process B").message());
    return;
  }
  if (child == 0) {
    mine.Reset();
    Channel channel(std::move(theirs), Role::kB);
    absl::Status became = peer_user.has_value() ? BecomePeerUser(*peer_user) : absl::OkStatus();
    if (!became.ok()) {
      // B ends its first step with the failure, so A prints it as cuda.init's.
      channel.Finish(1, became);
      ::_exit(1);
    }
    RunSide(channel, Role::kB, nullptr);
    ::_exit(0);
  }
  theirs.Reset();
  if (peer_user.has_value() && peer_user->a_in_user_group && ::geteuid() == 0) {
    // As the system unit's Group= and UMask=0007 give the daemon: the files
    // behind CUDA's IPC events, created with A's gid and umask, are then
    // B's group's to open (cuda-rules.md, "IPC event handles").
    if (::setregid(peer_user->gid, peer_user->gid) != 0) {
      report.Fail("env.daemon-group", ErrnoStatus(errno, absl::StrCat("setregid(", peer_user->gid,
                                                                      ") for A, the daemon's side"))
                                          .message());
    }
    ::umask(0007);
  }
  Channel channel(std::move(mine), Role::kA);
  RunSide(channel, Role::kA, &report);
  // B ends right after its last step; a B that hangs anyway is killed.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace blockswap::probe
