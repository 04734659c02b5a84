// The stand-in CUDA driver (a TEST DOUBLE, README.md) keeps CUDA's rules:
// each test breaks one and expects the CUresult the driver API reference
// gives for it, or the stand-in's report where CUDA leaves the outcome
// undefined. Rules that span processes break across real processes (child
// roles of this binary). The driver is reached as the product reaches it:
// dlopen("libcuda.so.1") — the stand-in, first on this test's
// LD_LIBRARY_PATH — and cuGetProcAddress.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "shared/backend/cuda_driver.h"
#include "shared/base/unique_fd.h"
#include "shared/os/fd_passing.h"
#include "tests/standin_driver/standin_hooks.h"
#include "tests/support/become_user.h"
#include "tests/support/child_process.h"

namespace blockswap::testing {
namespace {

// The entry points the tests use beyond the product's table
// (shared/backend/cuda_driver.h), which the tests reach as the product does.
#define BLOCKSWAP_STANDIN_TEST_ENTRY_POINTS(X)                                          \
  X(cuCtxSynchronize, 2000, PFN_cuCtxSynchronize_v2000)                                 \
  X(cuStreamQuery, 2000, PFN_cuStreamQuery_v2000)                                       \
  X(cuMemcpyDtoDAsync, 3020, PFN_cuMemcpyDtoDAsync_v3020)                               \
  X(cuMemcpyAsync, 4000, PFN_cuMemcpyAsync_v4000)                                       \
  X(cuMemsetD8Async, 3020, PFN_cuMemsetD8Async_v3020)                                   \
  X(cuPointerGetAttribute, 4000, PFN_cuPointerGetAttribute_v4000)                       \
  X(cuPointerGetAttributes, 7000, PFN_cuPointerGetAttributes_v7000)                     \
  X(cuMemGetAddressRange, 3020, PFN_cuMemGetAddressRange_v3020)                         \
  X(cuIpcGetMemHandle, 4010, PFN_cuIpcGetMemHandle_v4010)                               \
  X(cuIpcOpenMemHandle, 11000, PFN_cuIpcOpenMemHandle_v11000)                           \
  X(cuIpcCloseMemHandle, 4010, PFN_cuIpcCloseMemHandle_v4010)                           \
  X(cuIpcGetEventHandle, 4010, PFN_cuIpcGetEventHandle_v4010)                           \
  X(cuIpcOpenEventHandle, 4010, PFN_cuIpcOpenEventHandle_v4010)

struct Driver : cuda_internal::CudaDriverTable {
  void* library = nullptr;
  PFN_cuGetProcAddress_v12000 cuGetProcAddress = nullptr;
  BlockswapStandinViolationCountFn violation_count = nullptr;
  BlockswapStandinLastViolationFn last_violation = nullptr;
  BlockswapStandinPoisonDeviceFn poison_device = nullptr;
  BlockswapStandinHostAddressFn host_address = nullptr;
#define BLOCKSWAP_STANDIN_TEST_FIELD(name, version, type) type name = nullptr;
  BLOCKSWAP_STANDIN_TEST_ENTRY_POINTS(BLOCKSWAP_STANDIN_TEST_FIELD)
#undef BLOCKSWAP_STANDIN_TEST_FIELD
  std::string error;  // why loading failed; empty once loaded
};

// Loads the driver the way the product does, once per process.
const Driver& LoadDriver() {
  static const Driver* loaded = [] {
    auto* d = new Driver;
    d->library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (d->library == nullptr) {
      d->error = absl::StrCat("dlopen(libcuda.so.1): ", ::dlerror());
      return d;
    }
    if (::dlsym(d->library, "blockswap_standin_driver") == nullptr) {
      d->error = "the libcuda.so.1 loaded is not the stand-in: LD_LIBRARY_PATH must put "
                 "build/standin_driver first (ctest does)";
      return d;
    }
    absl::StatusOr<const cuda_internal::CudaDriverTable*> table = cuda_internal::LoadCudaDriver();
    if (!table.ok()) {
      d->error = absl::StrCat("the product's driver table: ", table.status().ToString());
      return d;
    }
    static_cast<cuda_internal::CudaDriverTable&>(*d) = **table;
    d->cuGetProcAddress =
        reinterpret_cast<PFN_cuGetProcAddress_v12000>(::dlsym(d->library, "cuGetProcAddress_v2"));
    d->violation_count = reinterpret_cast<BlockswapStandinViolationCountFn>(
        ::dlsym(d->library, "blockswap_standin_violation_count"));
    d->last_violation = reinterpret_cast<BlockswapStandinLastViolationFn>(
        ::dlsym(d->library, "blockswap_standin_last_violation"));
    d->poison_device = reinterpret_cast<BlockswapStandinPoisonDeviceFn>(
        ::dlsym(d->library, "blockswap_standin_poison_device"));
    d->host_address = reinterpret_cast<BlockswapStandinHostAddressFn>(
        ::dlsym(d->library, "blockswap_standin_host_address"));
#define BLOCKSWAP_STANDIN_TEST_RESOLVE(name, version, type)                               \
  {                                                                                       \
    CUdriverProcAddressQueryResult status;                                                \
    void* fn = nullptr;                                                                   \
    if (d->cuGetProcAddress(#name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM,       \
                            &status) != CUDA_SUCCESS) {                                   \
      d->error = absl::StrCat("cuGetProcAddress(" #name ", ", version, ") failed: ", status); \
      return d;                                                                           \
    }                                                                                     \
    d->name = reinterpret_cast<type>(fn);                                                 \
  }
    BLOCKSWAP_STANDIN_TEST_ENTRY_POINTS(BLOCKSWAP_STANDIN_TEST_RESOLVE)
#undef BLOCKSWAP_STANDIN_TEST_RESOLVE
    return d;
  }();
  return *loaded;
}

std::string Name(CUresult result) {
  const char* name = nullptr;
  if (LoadDriver().cuGetErrorName == nullptr ||
      LoadDriver().cuGetErrorName(result, &name) != CUDA_SUCCESS) {
    return absl::StrCat("CUresult ", static_cast<int>(result));
  }
  return name;
}

#define EXPECT_CU(expected, call) EXPECT_EQ(Name(expected), Name(call)) << #call
#define ASSERT_CU(expected, call) ASSERT_EQ(Name(expected), Name(call)) << #call

// The driver initialised and device `ordinal`'s primary context current on
// this thread; an error message otherwise.
std::string UseDevice(int ordinal) {
  const Driver& cu = LoadDriver();
  if (!cu.error.empty()) return cu.error;
  if (CUresult r = cu.cuInit(0); r != CUDA_SUCCESS) return "cuInit: " + Name(r);
  CUcontext ctx = nullptr;
  if (CUresult r = cu.cuDevicePrimaryCtxRetain(&ctx, ordinal); r != CUDA_SUCCESS) {
    return "cuDevicePrimaryCtxRetain: " + Name(r);
  }
  if (CUresult r = cu.cuCtxSetCurrent(ctx); r != CUDA_SUCCESS) return "cuCtxSetCurrent: " + Name(r);
  return "";
}

std::string LastViolation() {
  char text[512];
  LoadDriver().last_violation(text, sizeof(text));
  return text;
}

template <typename Handle>
std::string Encode(const Handle& handle) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(&handle), sizeof(handle)));
}
template <typename Handle>
Handle Decode(const std::string& hex) {
  Handle handle{};
  const std::string bytes = absl::HexStringToBytes(hex);
  std::memcpy(&handle, bytes.data(), std::min(bytes.size(), sizeof(handle)));
  return handle;
}

// Lines between a test and its child role: the child reads fd 3 and writes
// fd 4.
class Channel {
 public:
  Channel(int in, int out) : in_(in), out_(out) {}
  void Send(const std::string& line) const {
    const std::string text = line + "\n";
    (void)!::write(out_, text.data(), text.size());
  }
  // The next line; empty after 20 s or at end of file.
  std::string Receive() const {
    std::string line;
    char c;
    while (true) {
      pollfd p{in_, POLLIN, 0};
      if (::poll(&p, 1, 20000) <= 0 || ::read(in_, &c, 1) != 1) return "";
      if (c == '\n') return line;
      line.push_back(c);
    }
  }

 private:
  int in_;
  int out_;
};

Channel ChildChannel() { return Channel(3, 4); }

// A child role with a channel to it.
struct Peer {
  std::optional<ChildProcess> process;
  UniqueFd to_child;
  UniqueFd from_child;
  Channel channel() const { return Channel(from_child.get(), to_child.get()); }
};

// `inherit`: more descriptors for the child, (here, there), as SpawnOptions.
Peer SpawnPeer(const std::string& role, std::vector<std::string> args = {},
               std::map<std::string, std::string> env = {},
               std::vector<std::pair<int, int>> inherit = {}) {
  int down[2], up[2];
  EXPECT_EQ(::pipe2(down, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(up, O_CLOEXEC), 0);
  UniqueFd down_read(down[0]), up_write(up[1]);
  Peer peer;
  peer.to_child = UniqueFd(down[1]);
  peer.from_child = UniqueFd(up[0]);
  inherit.insert(inherit.begin(), {{down_read.get(), 3}, {up_write.get(), 4}});
  // Each source above every target, so that no dup2 in the child overwrites
  // the source of a later one.
  std::vector<UniqueFd> raised;
  for (auto& [from, to] : inherit) {
    raised.emplace_back(::fcntl(from, F_DUPFD_CLOEXEC, 100));
    from = raised.back().get();
  }
  auto spawned = ChildProcess::Spawn(
      role, {.args = std::move(args), .inherit = std::move(inherit), .env = std::move(env)});
  EXPECT_TRUE(spawned.ok()) << spawned.status();
  if (spawned.ok()) peer.process.emplace(std::move(*spawned));
  return peer;
}

int ExitCode(Peer& peer) {
  if (!peer.process.has_value()) return -1;
  absl::StatusOr<int> code = peer.process->Wait(absl::Seconds(30));
  return code.ok() ? *code : -1;
}

// Polls `done` for up to 5 s.
template <typename F>
bool Eventually(F done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return done();
}

// Role exit codes: 0 is what the test expects; each failure its own code.
#define BLOCKSWAP_STANDIN_ROLE_CHECK(condition, code)                        \
  do {                                                                       \
    if (!(condition)) {                                                      \
      std::fprintf(stderr, "role check failed: %s (exit %d)\n", #condition, code); \
      return code;                                                           \
    }                                                                        \
  } while (0)

class StandinDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string error = UseDevice(0);
    ASSERT_EQ(error, "");
  }
  const Driver& cu = LoadDriver();
};

// Exactly one report in this process so far, and it says `what`.
void ExpectOneViolation(const std::string& what) {
  EXPECT_EQ(LoadDriver().violation_count(), 1);
  EXPECT_NE(LastViolation().find(what), std::string::npos) << LastViolation();
}

// What a child role imported from this process, and the child.
struct Exported {
  CUdeviceptr memory = 0;
  CUevent event = nullptr;
  Peer peer;
};

// 4 KiB of device memory, exported to a new `role` that has imported it
// once this returns (it said `imported_line`).
Exported MemoryImportedBy(const char* role, const char* imported_line) {
  const Driver& cu = LoadDriver();
  CUdeviceptr memory = 0;
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemAlloc(&memory, 4096));
  CUipcMemHandle handle;
  EXPECT_CU(CUDA_SUCCESS, cu.cuIpcGetMemHandle(&handle, memory));
  Exported exported{memory, nullptr, SpawnPeer(role)};
  exported.peer.channel().Send(Encode(handle));
  EXPECT_EQ(exported.peer.channel().Receive(), imported_line);
  return exported;
}

// An interprocess event, imported by a new standin-event-importer.
Exported EventImportedByAPeer() {
  const Driver& cu = LoadDriver();
  CUevent event = nullptr;
  EXPECT_CU(CUDA_SUCCESS,
            cu.cuEventCreate(&event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  CUipcEventHandle handle;
  EXPECT_CU(CUDA_SUCCESS, cu.cuIpcGetEventHandle(&handle, event));
  Exported exported{0, event, SpawnPeer("standin-event-importer")};
  exported.peer.channel().Send(Encode(handle));
  EXPECT_EQ(exported.peer.channel().Receive(), "CUDA_SUCCESS");
  return exported;
}

// ------------------------------------------------------------------ the driver

TEST_F(StandinDriverTest, ResolvesItsEntryPointsByBaseNameAndRefusesUnknownOrTooNewOnes) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  EXPECT_CU(CUDA_SUCCESS, cu.cuGetProcAddress("cuMemAlloc", &fn, 3020, 0, &status));
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(fn, ::dlsym(cu.library, "cuMemAlloc_v2"));  // the same function, plain-exported
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cu.cuGetProcAddress("cuNoSuchEntryPoint", &fn, 12000, 0, &status));
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cu.cuGetProcAddress("cuMemAlloc", &fn, 99000, 0, &status));
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cu.cuGetProcAddress("cuLaunchHostFunc", &fn, 9000, 0, &status));
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

TEST_F(StandinDriverTest, DevicesSayTheyAreStandInsAndKeepTheirUuids) {
  int count = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuDeviceGetCount(&count));
  ASSERT_EQ(count, 2);  // BLOCKSWAP_STANDIN_DEVICES=2 (CMakeLists.txt)
  char name[128];
  ASSERT_CU(CUDA_SUCCESS, cu.cuDeviceGetName(name, sizeof(name), 1));
  EXPECT_NE(std::string(name).find("stand-in"), std::string::npos) << name;
  CUuuid first, second, again;
  ASSERT_CU(CUDA_SUCCESS, cu.cuDeviceGetUuid(&first, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.cuDeviceGetUuid(&second, 1));
  ASSERT_CU(CUDA_SUCCESS, cu.cuDeviceGetUuid(&again, 0));
  EXPECT_NE(Encode(first), Encode(second));
  EXPECT_EQ(Encode(first), Encode(again));
  EXPECT_EQ(Encode(first), "7374616e642d696e0000000000000000");  // "stand-in", device 0
}

// Without a wait, a read on another stream sees the bytes from before the
// copy: streams are queues that a worker runs later (with
// BLOCKSWAP_STANDIN_COPY_DELAY_US, slowly), so a missing wait in the product
// shows as wrong bytes.
TEST_F(StandinDriverTest, ACopyLandsOnlyWhenItsStreamRunsItSoAMissingWaitReadsOldBytes) {
  CUdeviceptr device = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemAlloc(&device, 4096));
  CUstream copier = nullptr, reader = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamCreate(&copier, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamCreate(&reader, CU_STREAM_NON_BLOCKING));
  std::vector<uint8_t> bytes(4096, 0x5a), seen(4096, 0);
  // Pinned, so that the copies into it are asynchronous too (a copy to
  // pageable memory returns only once it is done).
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostRegister(seen.data(), 4096, 0));
  // Hold the copier behind a word nobody has written yet.
  std::vector<uint32_t> gate(1024, 0);
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostRegister(gate.data(), 4096, CU_MEMHOSTREGISTER_DEVICEMAP |
                                                                  CU_MEMHOSTREGISTER_PORTABLE));
  CUdeviceptr gate_device = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostGetDevicePointer(&gate_device, gate.data(), 0));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamWaitValue32(copier, gate_device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemcpyHtoDAsync(device, bytes.data(), 4096, copier));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemcpyDtoHAsync(seen.data(), device, 4096, reader));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamSynchronize(reader));
  // Never written: cuMemAlloc's memory is not zeroed, and not the copy yet.
  EXPECT_EQ(seen[0], 0xcd);

  CUevent copied = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuEventCreate(&copied, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(CUDA_SUCCESS, cu.cuEventRecord(copied, copier));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamWaitEvent(reader, copied, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemcpyDtoHAsync(seen.data(), device, 4096, reader));  // waits
  ASSERT_CU(CUDA_ERROR_NOT_READY, cu.cuStreamQuery(reader));
  reinterpret_cast<std::atomic<uint32_t>&>(gate[0]).store(1);  // a plain host store opens it
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamSynchronize(reader));
  EXPECT_EQ(seen, bytes);
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamDestroy(copier));
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamDestroy(reader));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemHostUnregister(gate.data()));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemHostUnregister(seen.data()));
  EXPECT_CU(CUDA_SUCCESS, cu.cuEventDestroy(copied));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemFree(device));
}

// ------------------------------------------------------------------ IPC memory

TEST_F(StandinDriverTest, OpeningAMemoryHandleInTheProcessThatExportedItIsInvalidContext) {
  CUdeviceptr device = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemAlloc(&device, 4096));
  CUipcMemHandle handle;
  ASSERT_CU(CUDA_SUCCESS, cu.cuIpcGetMemHandle(&handle, device));
  CUdeviceptr opened = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT,
            cu.cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemFree(device));
}

// Imports the handle of argv[0] twice, and checks the refcount the reference
// describes ("If the memory handle has already been opened by the current
// context, the reference count on the handle is incremented by 1 and the
// existing device pointer is returned").
int RunDoubleImporter(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  const Channel channel = ChildChannel();
  auto handle = Decode<CUipcMemHandle>(channel.Receive());
  CUdeviceptr first = 0, second = 0;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuIpcOpenMemHandle(&first, handle,
                                                     CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ==
                                   CUDA_SUCCESS, 3);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuIpcOpenMemHandle(&second, handle,
                                                     CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ==
                                   CUDA_SUCCESS, 4);
  BLOCKSWAP_STANDIN_ROLE_CHECK(first == second, 5);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuIpcCloseMemHandle(first) == CUDA_SUCCESS, 6);
  // Still mapped: one reference is left. The exporter's bytes are visible.
  uint8_t byte = 0;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemcpyDtoHAsync(&byte, first, 1, nullptr) == CUDA_SUCCESS, 7);
  BLOCKSWAP_STANDIN_ROLE_CHECK(byte == 0x42, 8);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuIpcCloseMemHandle(first) == CUDA_SUCCESS, 9);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuIpcCloseMemHandle(first) == CUDA_ERROR_INVALID_VALUE, 10);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemcpyDtoHAsync(&byte, first, 1, nullptr) ==
                                   CUDA_ERROR_INVALID_VALUE, 11);
  BLOCKSWAP_STANDIN_ROLE_CHECK(LoadDriver().violation_count() == 0, 12);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-double-importer", RunDoubleImporter);

TEST_F(StandinDriverTest, OpeningAMemoryHandleTwiceInOneContextCountsOneMapping) {
  CUdeviceptr device = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemAlloc(&device, 4096));
  std::vector<uint8_t> bytes(4096, 0x42);
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemcpyHtoDAsync(device, bytes.data(), 4096, nullptr));
  ASSERT_CU(CUDA_SUCCESS, cu.cuCtxSynchronize());
  CUipcMemHandle handle;
  ASSERT_CU(CUDA_SUCCESS, cu.cuIpcGetMemHandle(&handle, device));
  Peer peer = SpawnPeer("standin-double-importer");
  peer.channel().Send(Encode(handle));
  EXPECT_EQ(ExitCode(peer), 0);
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemFree(device));
  EXPECT_EQ(cu.violation_count(), 0) << LastViolation();
}

// Opens the handle of argv[0] with flags 0, then with the one flag the
// reference allows.
int RunUnflaggedImporter(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  const Channel channel = ChildChannel();
  auto handle = Decode<CUipcMemHandle>(channel.Receive());
  CUdeviceptr opened = 0;
  BLOCKSWAP_STANDIN_ROLE_CHECK(
      cu.cuIpcOpenMemHandle(&opened, handle, 0) == CUDA_ERROR_INVALID_VALUE, 3);
  BLOCKSWAP_STANDIN_ROLE_CHECK(
      cu.cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS,
      4);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuIpcCloseMemHandle(opened) == CUDA_SUCCESS, 5);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-unflagged-importer", RunUnflaggedImporter);

// cuIpcOpenMemHandle: "Flags for this operation. Must be specified as
// CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS".
TEST_F(StandinDriverTest, OpeningAMemoryHandleWithoutTheLazyPeerAccessFlagIsInvalidValue) {
  CUdeviceptr device = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemAlloc(&device, 4096));
  CUipcMemHandle handle;
  ASSERT_CU(CUDA_SUCCESS, cu.cuIpcGetMemHandle(&handle, device));
  Peer peer = SpawnPeer("standin-unflagged-importer");
  peer.channel().Send(Encode(handle));
  EXPECT_EQ(ExitCode(peer), 0);
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemFree(device));
  EXPECT_EQ(cu.violation_count(), 0) << LastViolation();
}

// Imports a memory handle, says so, and on "use" copies from it.
int RunMemoryImporter(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  const Channel channel = ChildChannel();
  auto handle = Decode<CUipcMemHandle>(channel.Receive());
  CUdeviceptr imported = 0;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuIpcOpenMemHandle(&imported, handle,
                                                     CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ==
                                   CUDA_SUCCESS, 3);
  channel.Send("imported");
  if (channel.Receive() == "use") {
    uint8_t byte = 0;
    BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemcpyDtoHAsync(&byte, imported, 1, nullptr) ==
                                     CUDA_SUCCESS, 4);
    channel.Send(absl::StrCat(cu.violation_count(), " ", LastViolation()));
  }
  channel.Receive();  // until the test closes the channel
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-memory-importer", RunMemoryImporter);

TEST_F(StandinDriverTest, FreeingExportedMemoryWhileAnotherProcessImportsItIsReported) {
  Exported exported = MemoryImportedBy("standin-memory-importer", "imported");
  // The reference: "Calling cuMemFree on an exported memory region before
  // calling cuIpcCloseMemHandle in the importing context will result in
  // undefined behavior".
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemFree(exported.memory));
  ExpectOneViolation("cuMemFree of exported device memory while pid");
  exported.peer.to_child.Reset();
  EXPECT_EQ(ExitCode(exported.peer), 0);
}

TEST_F(StandinDriverTest, UsingAnImportAfterItsExporterFreedItIsReportedInTheImporter) {
  Exported exported = MemoryImportedBy("standin-memory-importer", "imported");
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemFree(exported.memory));
  exported.peer.channel().Send("use");
  const std::string report = exported.peer.channel().Receive();
  EXPECT_EQ(report.substr(0, 2), "1 ") << report;
  EXPECT_NE(report.find("of imported device memory after its exporter"), std::string::npos)
      << report;
  exported.peer.to_child.Reset();
  EXPECT_EQ(ExitCode(exported.peer), 0);
}

// Closing the import first is the order CUDA defines: nothing is reported.
TEST_F(StandinDriverTest, FreeingExportedMemoryAfterTheImporterClosedItIsNoBreach) {
  CUdeviceptr device = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemAlloc(&device, 4096));
  std::vector<uint8_t> bytes(4096, 0x42);
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemcpyHtoDAsync(device, bytes.data(), 4096, nullptr));
  ASSERT_CU(CUDA_SUCCESS, cu.cuCtxSynchronize());
  CUipcMemHandle handle;
  ASSERT_CU(CUDA_SUCCESS, cu.cuIpcGetMemHandle(&handle, device));
  Peer peer = SpawnPeer("standin-double-importer");  // closes what it opened
  peer.channel().Send(Encode(handle));
  ASSERT_EQ(ExitCode(peer), 0);
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemFree(device));
  EXPECT_EQ(cu.violation_count(), 0) << LastViolation();
}

// Becomes uid argv[0], opens the memory handle it is sent and says what that
// gave.
int RunMemoryOpenerAs(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(BecomeUser(std::stoll(args.at(0))).ok(), 20);
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  const Channel channel = ChildChannel();
  auto handle = Decode<CUipcMemHandle>(channel.Receive());
  CUdeviceptr opened = 0;
  const CUresult result =
      cu.cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  channel.Send(Name(result));
  if (result == CUDA_SUCCESS) {
    BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuIpcCloseMemHandle(opened) == CUDA_SUCCESS, 3);
  }
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-memory-opener-as", RunMemoryOpenerAs);

// What a process of uid 65534 gets opening memory this process (root)
// exported, with `env` added to its environment.
std::string OpenMemoryAsNobody(std::map<std::string, std::string> env) {
  const Driver& cu = LoadDriver();
  CUdeviceptr device = 0;
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemAlloc(&device, 4096));
  CUipcMemHandle handle;
  EXPECT_CU(CUDA_SUCCESS, cu.cuIpcGetMemHandle(&handle, device));
  Peer peer = SpawnPeer("standin-memory-opener-as", {"65534"}, std::move(env));
  peer.channel().Send(Encode(handle));
  const std::string result = peer.channel().Receive();
  EXPECT_EQ(ExitCode(peer), 0);
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemFree(device));
  return result;
}

// Not documented either way; the stand-in takes the strictest plausible rule
// (cuda-rules.md: "treat it as same-user only") and answers as for an IPC
// event of another uid. BLOCKSWAP_STANDIN_IPC_MEM_ANY_UID=1 lets any uid open.
TEST_F(StandinDriverTest, IpcMemoryOpensOnlyInAProcessOfItsExportersUidUnlessAnyUidIsSet) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to export as one user, open as another)";
  EXPECT_EQ(OpenMemoryAsNobody({}), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(OpenMemoryAsNobody({{"BLOCKSWAP_STANDIN_IPC_MEM_ANY_UID", "1"}}), "CUDA_SUCCESS");
  EXPECT_EQ(cu.violation_count(), 0) << LastViolation();
}

// ------------------------------------------------------------------ IPC events

TEST_F(StandinDriverTest, AnInterprocessEventNeedsDisableTimingAndOnlySuchAnEventExports) {
  CUevent event = nullptr;
  // "CU_EVENT_INTERPROCESS ... CU_EVENT_DISABLE_TIMING must be set".
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuEventCreate(&event, CU_EVENT_INTERPROCESS));
  ASSERT_CU(CUDA_SUCCESS, cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  CUipcEventHandle handle;
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cu.cuIpcGetEventHandle(&handle, event));
  EXPECT_CU(CUDA_SUCCESS, cu.cuEventDestroy(event));
  ASSERT_CU(CUDA_SUCCESS,
            cu.cuEventCreate(&event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  EXPECT_CU(CUDA_SUCCESS, cu.cuIpcGetEventHandle(&handle, event));
  CUevent opened = nullptr;
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cu.cuIpcOpenEventHandle(&opened, handle));
  EXPECT_CU(CUDA_SUCCESS, cu.cuEventDestroy(event));
}

// An event never recorded queries complete, and a wait issued before a record
// binds to nothing: the record issued later does not hold the waiting stream.
// This is why the load protocol orders records and waits with generations.
TEST_F(StandinDriverTest, AnEventNeverRecordedIsCompleteAndAWaitBindsToTheRecordsIssuedBeforeIt) {
  CUevent event = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  EXPECT_CU(CUDA_SUCCESS, cu.cuEventQuery(event));
  CUstream recorder = nullptr, waiter = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamCreate(&recorder, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamCreate(&waiter, CU_STREAM_NON_BLOCKING));
  std::vector<uint32_t> gate(1024, 0);
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostRegister(gate.data(), 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  CUdeviceptr gate_device = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostGetDevicePointer(&gate_device, gate.data(), 0));

  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamWaitEvent(waiter, event, 0));  // binds to no record
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamWaitValue32(recorder, gate_device, 1, CU_STREAM_WAIT_VALUE_EQ));
  ASSERT_CU(CUDA_SUCCESS, cu.cuEventRecord(event, recorder));  // pending behind the gate
  EXPECT_CU(CUDA_ERROR_NOT_READY, cu.cuEventQuery(event));
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamSynchronize(waiter));  // not held by the later record

  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamWaitEvent(waiter, event, 0));  // binds to that record
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cu.cuStreamQuery(waiter));
  reinterpret_cast<std::atomic<uint32_t>&>(gate[0]).store(1);
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamSynchronize(waiter));
  EXPECT_CU(CUDA_SUCCESS, cu.cuEventQuery(event));
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamDestroy(recorder));
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamDestroy(waiter));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemHostUnregister(gate.data()));
  EXPECT_CU(CUDA_SUCCESS, cu.cuEventDestroy(event));
}

// Imports an event, says so, and on "use" queries it.
int RunEventImporter(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  const Channel channel = ChildChannel();
  auto handle = Decode<CUipcEventHandle>(channel.Receive());
  CUevent imported = nullptr;
  const CUresult opened = cu.cuIpcOpenEventHandle(&imported, handle);
  channel.Send(Name(opened));
  if (opened != CUDA_SUCCESS) return 0;
  if (channel.Receive() == "use") {
    (void)cu.cuEventQuery(imported);
    channel.Send(absl::StrCat(cu.violation_count(), " ", LastViolation()));
  }
  channel.Receive();
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuEventDestroy(imported) == CUDA_SUCCESS, 3);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-event-importer", RunEventImporter);

TEST_F(StandinDriverTest, DestroyingAnExportedEventWhileAnotherProcessImportsItIsReported) {
  Exported exported = EventImportedByAPeer();
  EXPECT_CU(CUDA_SUCCESS, cu.cuEventDestroy(exported.event));
  ExpectOneViolation("cuEventDestroy of an exported event while pid");
  exported.peer.channel().Send("done");
  exported.peer.channel().Send("done");
  EXPECT_EQ(ExitCode(exported.peer), 0);
}

TEST_F(StandinDriverTest, UsingAnImportedEventAfterItsExporterDestroyedItIsReportedInTheImporter) {
  Exported exported = EventImportedByAPeer();
  EXPECT_CU(CUDA_SUCCESS, cu.cuEventDestroy(exported.event));
  exported.peer.channel().Send("use");
  const std::string report = exported.peer.channel().Receive();
  EXPECT_EQ(report.substr(0, 2), "1 ") << report;
  EXPECT_NE(report.find("cuEventQuery of an imported event after its exporter"),
            std::string::npos)
      << report;
  exported.peer.channel().Send("done");
  EXPECT_EQ(ExitCode(exported.peer), 0);
}

// Creates an interprocess event, records it on a stream held behind a word
// that nobody writes (so the record stays pending), sends its handle, and
// waits to be killed.
int RunPendingRecorder(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  CUevent event = nullptr;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuEventCreate(&event, CU_EVENT_INTERPROCESS |
                                                            CU_EVENT_DISABLE_TIMING) ==
                                   CUDA_SUCCESS, 3);
  CUstream stream = nullptr;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS,
                               4);
  CUdeviceptr word = 0;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemAlloc(&word, 4096) == CUDA_SUCCESS, 5);
  BLOCKSWAP_STANDIN_ROLE_CHECK(
      cu.cuStreamWaitValue32(stream, word, 0xfffffffe, CU_STREAM_WAIT_VALUE_EQ) == CUDA_SUCCESS, 6);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuEventRecord(event, stream) == CUDA_SUCCESS, 7);
  CUipcEventHandle handle;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuIpcGetEventHandle(&handle, event) == CUDA_SUCCESS, 8);
  ChildChannel().Send(Encode(handle));
  while (true) ::pause();
}
BLOCKSWAP_CHILD_ROLE("standin-pending-recorder", RunPendingRecorder);

TEST_F(StandinDriverTest, WaitingOnAPendingRecordOfADeadProcessIsReportedAndNeverEnds) {
  Peer peer = SpawnPeer("standin-pending-recorder");
  auto handle = Decode<CUipcEventHandle>(peer.channel().Receive());
  CUevent imported = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuIpcOpenEventHandle(&imported, handle));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cu.cuEventQuery(imported));
  peer.process->Kill(SIGKILL);
  (void)peer.process->Wait(absl::Seconds(10));
  CUstream stream = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamWaitEvent(stream, imported, 0));
  EXPECT_TRUE(Eventually([&] { return cu.violation_count() == 1; })) << cu.violation_count();
  EXPECT_NE(LastViolation().find("which has exited before the record completed"),
            std::string::npos)
      << LastViolation();
  // As on a GPU, nobody can complete that record: the stream stays stuck.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cu.cuStreamQuery(stream));
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamDestroy(stream));  // abandoned, as the product must
  EXPECT_CU(CUDA_SUCCESS, cu.cuEventDestroy(imported));
}

// Becomes uid argv[1] (when it is not this process's), creates an
// interprocess event under umask 0 (so that only the driver sets its mode),
// sends its handle and its file's owner and mode, and waits for the channel
// to close.
int RunEventCreator(const std::vector<std::string>& args) {
  const int64_t uid = std::stoll(args.at(0));
  if (uid != ::geteuid()) BLOCKSWAP_STANDIN_ROLE_CHECK(BecomeUser(uid).ok(), 20);
  ::umask(0);
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  CUevent event = nullptr;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuEventCreate(&event, CU_EVENT_INTERPROCESS |
                                                            CU_EVENT_DISABLE_TIMING) ==
                                   CUDA_SUCCESS, 3);
  CUipcEventHandle handle;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuIpcGetEventHandle(&handle, event) == CUDA_SUCCESS, 4);
  // This process's first file is this event's, named with its uid.
  const std::string path =
      absl::StrCat("/dev/shm/cuda-standin.", ::geteuid(), ".", ::getpid(), ".event.0");
  struct stat st {};
  BLOCKSWAP_STANDIN_ROLE_CHECK(::stat(path.c_str(), &st) == 0, 5);
  const Channel channel = ChildChannel();
  channel.Send(Encode(handle));
  channel.Send(absl::StrCat(st.st_uid, " ", absl::Hex(st.st_mode & 0777)));
  channel.Receive();
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuEventDestroy(event) == CUDA_SUCCESS, 6);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-event-creator", RunEventCreator);

// The event importer as uid argv[0] (gid the same).
int RunEventImporterAs(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(BecomeUser(std::stoll(args.at(0))).ok(), 20);
  return RunEventImporter(args);
}
BLOCKSWAP_CHILD_ROLE("standin-event-importer-as", RunEventImporterAs);

// What a process of uid `opener` gets opening an event that a process of uid
// `creator` created; `file` is the event file's "uid mode".
std::string OpenEventAcrossUids(int creator_uid, int opener_uid, std::string* file) {
  Peer creator = SpawnPeer("standin-event-creator", {std::to_string(creator_uid)});
  const std::string handle = creator.channel().Receive();
  *file = creator.channel().Receive();
  Peer importer = SpawnPeer("standin-event-importer-as", {std::to_string(opener_uid)});
  importer.channel().Send(handle);
  const std::string result = importer.channel().Receive();
  if (result == "CUDA_SUCCESS") {  // else the importer has exited
    importer.channel().Send("done");
    importer.channel().Send("done");
  }
  EXPECT_EQ(ExitCode(importer), 0);
  creator.channel().Send("done");
  EXPECT_EQ(ExitCode(creator), 0);
  return result;
}

// cuda-rules.md, "IPC events do not cross users": the driver names an IPC
// event's file from its creator's uid (mode 0600) and cuIpcOpenEventHandle
// rebuilds the name from the opener's own uid, so a process of another uid,
// root included, finds nothing: CUDA_ERROR_INVALID_VALUE. No group or umask
// changes that.
TEST_F(StandinDriverTest, AnIpcEventOpensOnlyInAProcessOfItsCreatorsUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to create as one user, open as another)";
  std::string file;
  EXPECT_EQ(OpenEventAcrossUids(0, 0, &file), "CUDA_SUCCESS");
  EXPECT_EQ(file, "0 180");  // 0600 under umask 0
  EXPECT_EQ(OpenEventAcrossUids(0, 65534, &file), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(OpenEventAcrossUids(65534, 0, &file), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(file, "65534 180");
  EXPECT_EQ(OpenEventAcrossUids(65534, 65534, &file), "CUDA_SUCCESS");
}

// ------------------------------------------------------------------ stream memory operations

TEST_F(StandinDriverTest, StreamMemoryOperationsNeedMemoryRegisteredAndMappedForTheDevice) {
  CUstream stream = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<uint32_t> words(1024, 7);
  const auto host = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(words.data()));
  // Host memory the driver does not know.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.cuStreamWriteValue32(stream, host, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  // Registered without CU_MEMHOSTREGISTER_DEVICEMAP: no device pointer.
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostRegister(words.data(), 4096, CU_MEMHOSTREGISTER_PORTABLE));
  CUdeviceptr device = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemHostGetDevicePointer(&device, words.data(), 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.cuStreamWaitValue32(stream, host, 7, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostUnregister(words.data()));
  // Registered and mapped: the device pointer works; the host pointer still
  // does not (CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is 0).
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostRegister(words.data(), 4096, CU_MEMHOSTREGISTER_PORTABLE |
                                                                   CU_MEMHOSTREGISTER_DEVICEMAP));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostGetDevicePointer(&device, words.data(), 0));
  EXPECT_NE(device, host);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.cuStreamWriteValue32(stream, host, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamWriteValue32(stream, device + 4, 9,
                                                  CU_STREAM_WRITE_VALUE_DEFAULT));
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamSynchronize(stream));
  EXPECT_EQ(words[1], 9u);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,  // not 4-byte aligned
            cu.cuStreamWriteValue32(stream, device + 2, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamDestroy(stream));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemHostUnregister(words.data()));
}

// CU_STREAM_WAIT_VALUE_GEQ: "(int32_t)(*addr - value) >= 0, a cyclic
// greater-or-equal" — a word just past the wrap is ahead of 0xfffffff0.
TEST_F(StandinDriverTest, WaitValueGeqComparesCyclically) {
  CUstream stream = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<uint32_t> words(1024, 0xfffffff0u);
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostRegister(words.data(), 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  CUdeviceptr device = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostGetDevicePointer(&device, words.data(), 0));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamWaitValue32(stream, device, 3, CU_STREAM_WAIT_VALUE_GEQ));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cu.cuStreamQuery(stream));  // 0xfffffff0 is before 3
  reinterpret_cast<std::atomic<uint32_t>&>(words[0]).store(2);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cu.cuStreamQuery(stream));
  reinterpret_cast<std::atomic<uint32_t>&>(words[0]).store(5);
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamSynchronize(stream));
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamDestroy(stream));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemHostUnregister(words.data()));
}

// With BLOCKSWAP_STANDIN_HOST_REGISTER=0 (its environment): a device that
// cannot register host memory says so and refuses it.
int RunWithoutHostRegistration(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  int supported = -1;
  BLOCKSWAP_STANDIN_ROLE_CHECK(
      cu.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 0) ==
          CUDA_SUCCESS, 3);
  BLOCKSWAP_STANDIN_ROLE_CHECK(supported == 0, 4);
  std::vector<uint32_t> words(1024);
  BLOCKSWAP_STANDIN_ROLE_CHECK(
      cu.cuMemHostRegister(words.data(), 4096, CU_MEMHOSTREGISTER_PORTABLE) ==
          CUDA_ERROR_NOT_SUPPORTED, 5);
  // Memory the driver allocates pinned needs no registration.
  void* pinned = nullptr;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemAllocHost(&pinned, 4096) == CUDA_SUCCESS, 6);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemFreeHost(pinned) == CUDA_SUCCESS, 7);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-without-host-registration", RunWithoutHostRegistration);

// cuMemHostRegister: "a current context associated with a device that does
// not have this attribute set will cause cuMemHostRegister to error with
// CUDA_ERROR_NOT_SUPPORTED". cuMemAllocHost is not a registration and still
// works (the staging buffers rely on it).
TEST_F(StandinDriverTest, ADeviceThatCannotRegisterHostMemoryRefusesItWithNotSupported) {
  int supported = -1;
  ASSERT_CU(CUDA_SUCCESS, cu.cuDeviceGetAttribute(&supported,
                                                  CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 0));
  EXPECT_EQ(supported, 1);
  Peer peer = SpawnPeer("standin-without-host-registration", {},
                        {{"BLOCKSWAP_STANDIN_HOST_REGISTER", "0"}});
  EXPECT_EQ(ExitCode(peer), 0);
}

// With BLOCKSWAP_STANDIN_STREAM_MEM_OPS=0 (its environment): no stream
// memory operations, CUDA_ERROR_NOT_SUPPORTED (among their documented
// results), as where the driver or device lacks them.
int RunWithoutStreamMemOps(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  CUdeviceptr word = 0;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemAlloc(&word, 4096) == CUDA_SUCCESS, 3);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuStreamWriteValue32(nullptr, word, 1, 0) ==
                                   CUDA_ERROR_NOT_SUPPORTED, 4);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuStreamWaitValue32(nullptr, word, 1, 0) ==
                                   CUDA_ERROR_NOT_SUPPORTED, 5);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-without-stream-mem-ops", RunWithoutStreamMemOps);

TEST_F(StandinDriverTest, WithoutStreamMemoryOperationsTheyAreNotSupported) {
  Peer peer = SpawnPeer("standin-without-stream-mem-ops", {},
                        {{"BLOCKSWAP_STANDIN_STREAM_MEM_OPS", "0"}});
  EXPECT_EQ(ExitCode(peer), 0);
}

// ------------------------------------------------------------------ virtual memory management

constexpr size_t kTwoMib = size_t{2} << 20;

// Pinned memory on `device`, shareable as a descriptor when `shareable`.
CUmemAllocationProp VmmProperties(int device = 0, bool shareable = true) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  prop.requestedHandleTypes =
      shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

// A mapping of `handle` (of `size` bytes) in a reservation of its own.
struct VmmMapping {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr ptr = 0;
  size_t size = 0;
};

// Maps `handle` in a new reservation; with access for `devices` (read-write).
VmmMapping Map(CUmemGenericAllocationHandle handle, size_t size, std::vector<int> devices = {0}) {
  const Driver& cu = LoadDriver();
  VmmMapping m{handle, 0, size};
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemAddressReserve(&m.ptr, size, 0, 0, 0));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemMap(m.ptr, size, 0, handle, 0));
  for (int device : devices) {
    CUmemAccessDesc desc{{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    EXPECT_CU(CUDA_SUCCESS, cu.cuMemSetAccess(m.ptr, size, &desc, 1));
  }
  return m;
}

// `size` bytes of new VMM memory on device 0, mapped as Map does.
VmmMapping CreateAndMap(size_t size, std::vector<int> devices = {0}) {
  CUmemGenericAllocationHandle handle = 0;
  const CUmemAllocationProp prop = VmmProperties();
  EXPECT_CU(CUDA_SUCCESS, LoadDriver().cuMemCreate(&handle, size, &prop, 0));
  return Map(handle, size, std::move(devices));
}

// Unmaps, frees the reservation and releases the handle (unless released).
void UnmapAndRelease(const VmmMapping& m, bool release = true) {
  const Driver& cu = LoadDriver();
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemUnmap(m.ptr, m.size));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemAddressFree(m.ptr, m.size));
  if (release) {
    EXPECT_CU(CUDA_SUCCESS, cu.cuMemRelease(m.handle));
  }
}

// The first byte at `ptr`, read back by a copy on the NULL stream.
int FirstByte(CUdeviceptr ptr) {
  uint8_t byte = 0;
  if (LoadDriver().cuMemcpyDtoHAsync(&byte, ptr, 1, nullptr) != CUDA_SUCCESS) return -1;
  return byte;
}

TEST_F(StandinDriverTest, TheVmmEntryPointsAreExportedAndResolveFromVersion10020) {
  for (const char* name : {"cuMemGetAllocationGranularity", "cuMemCreate", "cuMemRelease",
                           "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle",
                           "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap", "cuMemUnmap",
                           "cuMemSetAccess"}) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status;
    EXPECT_CU(CUDA_SUCCESS, cu.cuGetProcAddress(name, &fn, 10020, 0, &status)) << name;
    EXPECT_EQ(fn, ::dlsym(cu.library, name)) << name;
    EXPECT_NE(fn, nullptr) << name;
    EXPECT_CU(CUDA_ERROR_NOT_FOUND, cu.cuGetProcAddress(name, &fn, 10010, 0, &status)) << name;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) << name;
  }
}

// cuMemCreate, cuMemMap: sizes, offsets and addresses must be multiples of
// the granularity, which the stand-in makes 2 MiB (minimum and recommended).
TEST_F(StandinDriverTest, VmmGranularityIsTwoMibAndAnythingUnalignedIsInvalidValue) {
  const CUmemAllocationProp prop = VmmProperties();
  size_t minimum = 0, recommended = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemGetAllocationGranularity(&minimum, &prop,
                                                           CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemGetAllocationGranularity(&recommended, &prop,
                                                           CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  EXPECT_EQ(minimum, kTwoMib);
  EXPECT_EQ(recommended, kTwoMib);
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemCreate(&handle, kTwoMib / 2, &prop, 0));
  CUdeviceptr ptr = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemAddressReserve(&ptr, kTwoMib + 4096, 0, 0, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemAddressReserve(&ptr, kTwoMib, 0, 4096, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemCreate(&handle, kTwoMib, &prop, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemAddressReserve(&ptr, 2 * kTwoMib, 0, 0, 0));
  EXPECT_EQ(ptr % kTwoMib, 0u);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(ptr + 4096, kTwoMib, 0, handle, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(ptr, kTwoMib, kTwoMib, handle, 0));  // offset
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemMap(ptr + kTwoMib, kTwoMib, 0, handle, 0));
  CUmemAccessDesc desc{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemSetAccess(ptr + kTwoMib, 4096, &desc, 1));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemUnmap(ptr + kTwoMib + 4096, kTwoMib - 4096));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemUnmap(ptr + kTwoMib, kTwoMib));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemAddressFree(ptr, 2 * kTwoMib));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemRelease(handle));
}

// cuMemCreate: pinned memory on a device; exported only as a handle type
// its properties requested, and counted as allocated until released.
TEST_F(StandinDriverTest, CuMemCreateMakesPinnedDeviceMemoryExportableAsTheRequestedTypeOnly) {
  CUmemGenericAllocationHandle handle = 0;
  CUmemAllocationProp prop = VmmProperties();
  prop.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemCreate(&handle, kTwoMib, &prop, 0));
  prop = VmmProperties();
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemCreate(&handle, kTwoMib, &prop, 0));
  prop = VmmProperties(7);
  EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cu.cuMemCreate(&handle, kTwoMib, &prop, 0));

  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemGetInfo(&free_before, &total));
  prop = VmmProperties(0, /*shareable=*/false);
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemCreate(&handle, kTwoMib, &prop, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_before - free_after, kTwoMib);
  int fd = -1;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemExportToShareableHandle(
                                          &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemRelease(handle));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_after, free_before);

  prop = VmmProperties();
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemCreate(&handle, kTwoMib, &prop, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_FABRIC, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemExportToShareableHandle(
                              &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  EXPECT_GE(fd, 0);
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemRelease(handle));
  EXPECT_EQ(::close(fd), 0);  // the caller's own descriptor
}

// cuMemMap: only on a reservation, "only ... on VA range reservations that
// are not currently mapped"; the stand-in maps whole allocations only. A
// reservation still mapped is not freed (assumed).
TEST_F(StandinDriverTest, AMappingTakesAWholeAllocationAtAReservedRangeNotMappedYet) {
  const CUmemAllocationProp prop = VmmProperties();
  CUmemGenericAllocationHandle handle = 0, other = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemCreate(&handle, 2 * kTwoMib, &prop, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemCreate(&other, kTwoMib, &prop, 0));
  CUdeviceptr ptr = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemAddressReserve(&ptr, 4 * kTwoMib, 0, 0, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(ptr, kTwoMib, 0, handle, 0));  // part of it
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(ptr + 3 * kTwoMib, 2 * kTwoMib, 0, handle, 0));
  CUdeviceptr allocated = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemAlloc(&allocated, kTwoMib));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(allocated, kTwoMib, 0, other, 0));  // unreserved
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemMap(ptr, 2 * kTwoMib, 0, handle, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(ptr + kTwoMib, kTwoMib, 0, other, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(ptr, 2 * kTwoMib, 0, handle, 0));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemMap(ptr + 2 * kTwoMib, kTwoMib, 0, other, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemAddressFree(ptr, 4 * kTwoMib));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemFree(ptr));  // not cuMemAlloc's
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemUnmap(ptr, 3 * kTwoMib));  // both mappings, whole
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemAddressFree(ptr, 4 * kTwoMib));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemRelease(handle));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemRelease(other));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemFree(allocated));
}

// cuMemUnmap: "cannot unmap a sub-range of an address range mapped by
// cuMemCreate / cuMemMap"; what is unmapped is a reservation again.
TEST_F(StandinDriverTest, UnmappingPartOfAMappingIsInvalidValue) {
  const VmmMapping m = CreateAndMap(2 * kTwoMib);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemUnmap(m.ptr, kTwoMib));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemUnmap(m.ptr + kTwoMib, kTwoMib));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemUnmap(m.ptr, 3 * kTwoMib));
  EXPECT_EQ(FirstByte(m.ptr), 0xcd);  // still mapped, not zeroed
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemUnmap(m.ptr, m.size));
  EXPECT_EQ(FirstByte(m.ptr), -1);  // an address the driver knows no memory at
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemMap(m.ptr, m.size, 0, m.handle, 0));
  UnmapAndRelease(m);
}

// cuMemRelease: "The generic memory handle can be freed when there are still
// outstanding mappings"; the memory goes with the last of them. Releasing
// a handle twice is undefined: reported.
TEST_F(StandinDriverTest, ReleasedVmmMemoryStaysUntilItsLastMappingIsUnmapped) {
  size_t free_before = 0, free_now = 0, total = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemGetInfo(&free_before, &total));
  const VmmMapping m = CreateAndMap(kTwoMib);
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemsetD8Async(m.ptr, 0x3c, kTwoMib, nullptr));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemRelease(m.handle));
  EXPECT_EQ(FirstByte(m.ptr), 0x3c);
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemGetInfo(&free_now, &total));
  EXPECT_EQ(free_before - free_now, kTwoMib);
  UnmapAndRelease(m, /*release=*/false);
  EXPECT_TRUE(Eventually([&] {  // the last copy may still hold the mapping a moment
    return cu.cuMemGetInfo(&free_now, &total) == CUDA_SUCCESS && free_now == free_before;
  }));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemRelease(m.handle));
  ExpectOneViolation("cuMemRelease of handle");
}

// Wherever cuMemAlloc's memory works: copies of every kind, memset, stream
// memory operations, pointer attributes, address ranges, the test hook.
TEST_F(StandinDriverTest, VmmMemoryWorksWhereverCuMemAllocMemoryDoes) {
  const VmmMapping a = CreateAndMap(kTwoMib);
  const VmmMapping b = CreateAndMap(kTwoMib);
  CUstream stream = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<uint8_t> bytes(4096, 0x11), seen(4096, 0);
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemcpyHtoDAsync(a.ptr + 4096, bytes.data(), 4096, stream));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemcpyDtoDAsync(b.ptr, a.ptr + 4096, 4096, stream));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemsetD8Async(b.ptr + 100, 0x22, 1, stream));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemcpyAsync(a.ptr, b.ptr, 4096, stream));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamWriteValue32(stream, a.ptr + 8192, 5, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamWaitValue32(stream, a.ptr + 8192, 5, CU_STREAM_WAIT_VALUE_EQ));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemcpyDtoHAsync(seen.data(), a.ptr, 4096, stream));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamSynchronize(stream));
  EXPECT_EQ(seen[0], 0x11);
  EXPECT_EQ(seen[100], 0x22);
  const auto* host = static_cast<const uint8_t*>(cu.host_address(a.ptr));
  EXPECT_EQ(host[100], 0x22);
  EXPECT_EQ(reinterpret_cast<const uint32_t*>(host)[8192 / 4], 5u);

  unsigned type = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a.ptr));
  EXPECT_EQ(type, CU_MEMORYTYPE_DEVICE);
  int ordinal = -1;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* data[] = {&ordinal};
  ASSERT_CU(CUDA_SUCCESS, cu.cuPointerGetAttributes(1, attributes, data, a.ptr + 4096));
  EXPECT_EQ(ordinal, 0);
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemGetAddressRange(&base, &size, b.ptr + 12345));
  EXPECT_EQ(base, b.ptr);
  EXPECT_EQ(size, kTwoMib);
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamDestroy(stream));
  UnmapAndRelease(a);
  UnmapAndRelease(b);
  EXPECT_EQ(cu.violation_count(), 0) << LastViolation();
}

// The GPU's answer to an access it has no rights to: a fault, sticky in the
// context of the stream whose work touched it. Device 1's copy touches a
// mapping only device 0 may access; then device 0's, one nobody may.
int RunVmmWithoutAccess(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(1).empty(), 2);
  const Driver& cu = LoadDriver();
  const VmmMapping shared = CreateAndMap(kTwoMib, {0});
  std::vector<uint8_t> bytes(4096, 1);
  const CUresult queued = cu.cuMemcpyHtoDAsync(shared.ptr, bytes.data(), 4096, nullptr);
  BLOCKSWAP_STANDIN_ROLE_CHECK(queued == CUDA_SUCCESS || queued == CUDA_ERROR_ILLEGAL_ADDRESS, 3);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS, 4);
  CUdeviceptr more = 0;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemAlloc(&more, 4096) == CUDA_ERROR_ILLEGAL_ADDRESS, 5);

  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 6);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemsetD8Async(shared.ptr, 7, 4096, nullptr) == CUDA_SUCCESS,
                               7);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuCtxSynchronize() == CUDA_SUCCESS, 8);
  const VmmMapping closed = CreateAndMap(kTwoMib, {});
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemcpyDtoDAsync(shared.ptr, closed.ptr, 4096, nullptr) !=
                                   CUDA_ERROR_INVALID_VALUE, 9);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS, 10);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-vmm-without-access", RunVmmWithoutAccess);

// cuMemMap: "calling cuMemMap does not make the address accessible, the
// caller needs to update accessibility ... by calling cuMemSetAccess".
TEST_F(StandinDriverTest, TouchingAMappingWithoutAccessSetFaultsTheStreamsContext) {
  Peer peer = SpawnPeer("standin-vmm-without-access");
  EXPECT_EQ(ExitCode(peer), 0);
}

// Imports descriptor 5 (as uid argv[0] when given), maps it and says what the
// import gave and the first byte; the descriptor stays its own.
int RunVmmImporter(const std::vector<std::string>& args) {
  if (!args.empty()) BLOCKSWAP_STANDIN_ROLE_CHECK(BecomeUser(std::stoll(args.at(0))).ok(), 20);
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  const Channel channel = ChildChannel();
  CUmemGenericAllocationHandle handle = 0;
  const CUresult imported = cu.cuMemImportFromShareableHandle(
      &handle, reinterpret_cast<void*>(uintptr_t{5}), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  BLOCKSWAP_STANDIN_ROLE_CHECK(::close(5) == 0, 3);  // not taken by the import
  if (imported != CUDA_SUCCESS) {
    channel.Send(Name(imported));
    return 0;
  }
  const VmmMapping m = Map(handle, kTwoMib);
  channel.Send(absl::StrCat(Name(imported), " ", FirstByte(m.ptr)));
  UnmapAndRelease(m);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-vmm-importer", RunVmmImporter);

// What a process of uid `uid` gets importing 2 MiB of 0x5e this process
// exported as a descriptor, with `env` added to its environment.
std::string ImportAs(int uid, std::map<std::string, std::string> env) {
  const Driver& cu = LoadDriver();
  const VmmMapping m = CreateAndMap(kTwoMib);
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemsetD8Async(m.ptr, 0x5e, kTwoMib, nullptr));
  EXPECT_CU(CUDA_SUCCESS, cu.cuCtxSynchronize());
  int fd = -1;
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemExportToShareableHandle(
                              &fd, m.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  UniqueFd owned(fd);
  Peer peer = SpawnPeer("standin-vmm-importer", {std::to_string(uid)}, std::move(env),
                        {{owned.get(), 5}});
  const std::string result = peer.channel().Receive();
  EXPECT_EQ(ExitCode(peer), 0);
  UnmapAndRelease(m);
  return result;
}

// An assumption: the reference implies that whoever holds the descriptor
// may import it and says nothing of users. BLOCKSWAP_STANDIN_VMM_SAME_UID_ONLY=1
// refuses an importer of another uid than the memory's creator.
TEST_F(StandinDriverTest, AnExportedDescriptorImportsInAProcessOfAnyUidUnlessSameUidOnly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to export as one user, import as another)";
  EXPECT_EQ(ImportAs(65534, {}), "CUDA_SUCCESS 94");  // 0x5e
  EXPECT_EQ(ImportAs(65534, {{"BLOCKSWAP_STANDIN_VMM_SAME_UID_ONLY", "1"}}),
            "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(ImportAs(0, {{"BLOCKSWAP_STANDIN_VMM_SAME_UID_ONLY", "1"}}), "CUDA_SUCCESS 94");
}

// Creates 2 MiB of 0x77, sends its descriptor on the socket at descriptor
// 5, and exits once the socket closes.
int RunVmmExporter(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  const VmmMapping m = CreateAndMap(kTwoMib);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemsetD8Async(m.ptr, 0x77, kTwoMib, nullptr) == CUDA_SUCCESS,
                               3);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuCtxSynchronize() == CUDA_SUCCESS, 4);
  int fd = -1;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemExportToShareableHandle(
                                   &fd, m.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
                                   CUDA_SUCCESS, 5);
  const UniqueFd socket(5), exported(fd);
  BLOCKSWAP_STANDIN_ROLE_CHECK(SendWithFds(socket, "memory", {exported.get()}).ok(), 6);
  (void)ReceiveWithFds(socket);  // until the test closes it
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-vmm-exporter", RunVmmExporter);

// An assumption (the reference says the memory is freed once every mapping
// and handle, "including it's shareable counterparts", is gone, and says
// nothing of the exporting process): an importer's mapping keeps the bytes
// after the process that created and exported them has exited.
TEST_F(StandinDriverTest, AnImportersMappingKeepsTheBytesAfterTheExporterExited) {
  int sockets[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets), 0);
  UniqueFd here(sockets[0]), there(sockets[1]);
  Peer exporter = SpawnPeer("standin-vmm-exporter", {}, {}, {{there.get(), 5}});
  there.Reset();
  absl::StatusOr<ReceivedMessage> message = ReceiveWithFds(here);
  ASSERT_TRUE(message.ok()) << message.status();
  ASSERT_EQ(message->fds.size(), 1u);
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemImportFromShareableHandle(
                              &handle, reinterpret_cast<void*>(uintptr_t(message->fds[0].get())),
                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  message->fds.clear();
  const VmmMapping m = Map(handle, kTwoMib);
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemRelease(handle));  // the mapping alone holds it now
  here.Reset();
  ASSERT_EQ(ExitCode(exporter), 0);
  EXPECT_EQ(FirstByte(m.ptr + kTwoMib - 1), 0x77);
  UnmapAndRelease(m, /*release=*/false);
}

// Says the value of device attribute argv[0] on device 0.
int RunAttributeReader(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  int value = -1;
  BLOCKSWAP_STANDIN_ROLE_CHECK(
      LoadDriver().cuDeviceGetAttribute(
          &value, static_cast<CUdevice_attribute>(std::stoi(args.at(0))), 0) == CUDA_SUCCESS,
      3);
  ChildChannel().Send(std::to_string(value));
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-attribute-reader", RunAttributeReader);

// Device attribute `attribute` of a process with `env` added to its environment.
std::string AttributeWith(CUdevice_attribute attribute, std::map<std::string, std::string> env) {
  Peer peer = SpawnPeer("standin-attribute-reader", {std::to_string(attribute)}, std::move(env));
  const std::string value = peer.channel().Receive();
  EXPECT_EQ(ExitCode(peer), 0);
  return value;
}

// With BLOCKSWAP_STANDIN_VMM=0 (its environment): no virtual memory
// management, as on a device without it.
int RunWithoutVmm(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  const CUmemAllocationProp prop = VmmProperties();
  CUmemGenericAllocationHandle handle = 0;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemCreate(&handle, kTwoMib, &prop, 0) ==
                                   CUDA_ERROR_NOT_SUPPORTED, 3);
  BLOCKSWAP_STANDIN_ROLE_CHECK(
      cu.cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(uintptr_t{0}),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
          CUDA_ERROR_NOT_SUPPORTED, 4);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-without-vmm", RunWithoutVmm);

TEST_F(StandinDriverTest, DevicesSupportVmmAndDescriptorsUnlessVmmIsOff) {
  for (CUdevice_attribute attribute : {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                       CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED}) {
    int value = -1;
    ASSERT_CU(CUDA_SUCCESS, cu.cuDeviceGetAttribute(&value, attribute, 1));
    EXPECT_EQ(value, 1) << attribute;
    EXPECT_EQ(AttributeWith(attribute, {{"BLOCKSWAP_STANDIN_VMM", "0"}}), "0") << attribute;
  }
  Peer peer = SpawnPeer("standin-without-vmm", {}, {{"BLOCKSWAP_STANDIN_VMM", "0"}});
  EXPECT_EQ(ExitCode(peer), 0);
}

// A read-only mapping is pinned only with CU_MEMHOSTREGISTER_READ_ONLY (the
// flag's documentation: required "to register memory mapped to the CPU as
// read-only" on this kind of platform), and the device never writes what
// was pinned so (assumed: refused at the copy's call). A writable mapping
// takes either.
TEST_F(StandinDriverTest, AReadOnlyMappingIsPinnedOnlyReadOnlyAndTheDeviceNeverWritesIt) {
  void* page = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemHostRegister(page, 4096, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.cuMemHostRegister(page, 4096, CU_MEMHOSTREGISTER_PORTABLE));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostRegister(page, 4096, CU_MEMHOSTREGISTER_READ_ONLY));
  CUdeviceptr device = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemAlloc(&device, 4096));
  CUstream stream = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemcpyHtoDAsync(device, page, 4096, stream)) << "reading it";
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemcpyDtoHAsync(page, device, 4096, stream));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamSynchronize(stream));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostUnregister(page));

  std::vector<std::byte> writable(4096);
  ASSERT_CU(CUDA_SUCCESS,
            cu.cuMemHostRegister(writable.data(), 4096, CU_MEMHOSTREGISTER_READ_ONLY));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.cuMemcpyDtoHAsync(writable.data(), device, 4096, stream))
      << "pinned read-only: the device may not write it, however it is mapped";
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostUnregister(writable.data()));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostRegister(writable.data(), 4096, 0));
  EXPECT_CU(CUDA_SUCCESS, cu.cuMemcpyDtoHAsync(writable.data(), device, 4096, stream));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamSynchronize(stream));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemHostUnregister(writable.data()));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamDestroy(stream));
  ASSERT_CU(CUDA_SUCCESS, cu.cuMemFree(device));
  ::munmap(page, 4096);
}

// CU_MEMHOSTREGISTER_READ_ONLY is supported where registration is.
TEST_F(StandinDriverTest, ReadOnlyHostRegistrationIsSupportedWhereHostRegistrationIs) {
  int value = -1;
  ASSERT_CU(CUDA_SUCCESS, cu.cuDeviceGetAttribute(
                              &value, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, 0));
  EXPECT_EQ(value, 1);
  EXPECT_EQ(AttributeWith(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED,
                          {{"BLOCKSWAP_STANDIN_HOST_REGISTER", "0"}}),
            "0");
}

// ------------------------------------------------------------------ host functions, sticky errors

struct HostFunctionCall {
  const Driver* cu;
  CUevent event;
  CUresult result;
};

TEST_F(StandinDriverTest, ADriverCallFromInsideAHostFunctionIsNotPermittedAndReported) {
  CUevent event = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  CUstream stream = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  HostFunctionCall call{&cu, event, CUDA_SUCCESS};
  ASSERT_CU(CUDA_SUCCESS, cu.cuLaunchHostFunc(
                              stream,
                              [](void* data) {
                                auto* c = static_cast<HostFunctionCall*>(data);
                                c->result = c->cu->cuEventQuery(c->event);
                              },
                              &call));
  ASSERT_CU(CUDA_SUCCESS, cu.cuStreamSynchronize(stream));
  EXPECT_CU(CUDA_ERROR_NOT_PERMITTED, call.result);
  ExpectOneViolation("from inside a host function");
  EXPECT_CU(CUDA_SUCCESS, cu.cuStreamDestroy(stream));
  EXPECT_CU(CUDA_SUCCESS, cu.cuEventDestroy(event));
}

// With BLOCKSWAP_STANDIN_STICKY_AT=0:2 (its environment): the second copy
// on device 0 faults; from then on every call in that context returns the
// fault, and device 1's context is untouched.
int RunStickyCopier(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  CUdeviceptr device = 0;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemAlloc(&device, 4096) == CUDA_SUCCESS, 3);
  std::vector<uint8_t> bytes(4096, 1);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemcpyHtoDAsync(device, bytes.data(), 4096, nullptr) ==
                                   CUDA_SUCCESS, 4);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuCtxSynchronize() == CUDA_SUCCESS, 5);
  // Faults when it runs, which may be before the call returns: an
  // asynchronous error may be returned by any later call, this one included.
  const CUresult queued = cu.cuMemcpyHtoDAsync(device, bytes.data(), 4096, nullptr);
  BLOCKSWAP_STANDIN_ROLE_CHECK(queued == CUDA_SUCCESS || queued == CUDA_ERROR_ILLEGAL_ADDRESS, 6);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS, 7);
  CUdeviceptr more = 0;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemAlloc(&more, 4096) == CUDA_ERROR_ILLEGAL_ADDRESS, 8);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemFree(device) == CUDA_ERROR_ILLEGAL_ADDRESS, 9);
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(1).empty(), 10);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuMemAlloc(&more, 4096) == CUDA_SUCCESS, 11);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-sticky-copier", RunStickyCopier);

TEST_F(StandinDriverTest, AnInjectedStickyErrorPoisonsThatDevicesContextForGood) {
  Peer peer = SpawnPeer("standin-sticky-copier", {}, {{"BLOCKSWAP_STANDIN_STICKY_AT", "0:2"}});
  EXPECT_EQ(ExitCode(peer), 0);
}

TEST_F(StandinDriverTest, APoisonedContextFailsEveryCallWithItsStickyError) {
  // In a child: this process's own context must stay usable for the others.
  Peer peer = SpawnPeer("standin-poisoned");
  EXPECT_EQ(ExitCode(peer), 0);
}

int RunPoisoned(const std::vector<std::string>& args) {
  BLOCKSWAP_STANDIN_ROLE_CHECK(UseDevice(0).empty(), 2);
  const Driver& cu = LoadDriver();
  CUstream stream = nullptr;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuStreamCreate(&stream, 0) == CUDA_SUCCESS, 3);
  cu.poison_device(0, CUDA_ERROR_LAUNCH_FAILED);
  CUevent event = nullptr;
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuEventCreate(&event, 0) == CUDA_ERROR_LAUNCH_FAILED, 4);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuStreamSynchronize(stream) == CUDA_ERROR_LAUNCH_FAILED, 5);
  BLOCKSWAP_STANDIN_ROLE_CHECK(cu.cuCtxSynchronize() == CUDA_ERROR_LAUNCH_FAILED, 6);
  return 0;
}
BLOCKSWAP_CHILD_ROLE("standin-poisoned", RunPoisoned);

}  // namespace
}  // namespace blockswap::testing
