// The cuda backend end to end: a real blockswapd --backend=cuda and client
// processes (gpu_roles.cc) that consume every slot with real kernels, or, in
// the cases of the GPU check's first call (the two clients, the daemon's
// death), with copies to the host compared there, which need no CUDA
// runtime newer than the product's lowest driver (docs/gpu.md). Without
// a usable GPU every test skips, saying why. BLOCKSWAP_GPU_TEST_BACKEND=host
// runs the same tests on the host backend (the kernels become host
// functions): a dry run of this suite where there is no GPU.
//
// Anything that can hang on a GPU (a dead peer, a stuck copy) runs in a
// child process waited for with a deadline; a test that runs out of time
// says what it saw instead of hanging (and ctest's TIMEOUT backs that up).
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "shared/backend/backend.h"
#include "shared/base/monotonic_clock.h"
#include "shared/protocol/load_protocol.h"
#include "tests/gpu/gpu_roles.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_roles_test.h"
#include "tests/support/skip_without_test_hooks.h"

namespace blockswap::gpu_testing {
namespace {

using testing::ChildProcess;
using testing::DaemonFlags;
using testing::FirstValue;
using testing::NumberValue;

std::string TestBackend() {
  const char* backend = std::getenv("BLOCKSWAP_GPU_TEST_BACKEND");
  return backend != nullptr && *backend != '\0' ? backend : "cuda";
}

// BLOCKSWAP_GPU_TEST_CLIENT_USER, a uid or a user name (the GPU check's
// BLOCKSWAP_DEVICE_CHECK_CLIENT_USER): the user the two-client case runs its
// clients as; nullopt when unset.
absl::StatusOr<std::optional<uid_t>> ClientUser() {
  const char* user = std::getenv("BLOCKSWAP_GPU_TEST_CLIENT_USER");
  if (user == nullptr || *user == '\0') return std::nullopt;
  if (uint32_t uid = 0; absl::SimpleAtoi(user, &uid)) return uid;
  const passwd* entry = ::getpwnam(user);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("BLOCKSWAP_GPU_TEST_CLIENT_USER: no user named '", user, "'"));
  }
  return entry->pw_uid;
}

// BLOCKSWAP_GPU_TEST_NO_HOST_REGISTER=1: the devices are known to refuse host
// registration (the stand-in's BLOCKSWAP_STANDIN_HOST_REGISTER=0), so every
// master is staged, and the tests check that they are.
bool DevicesRefuseHostRegistration() {
  const char* refuse = std::getenv("BLOCKSWAP_GPU_TEST_NO_HOST_REGISTER");
  return refuse != nullptr && std::string(refuse) == "1";
}

// How many devices the suite may spread clients over; 0 with the reason
// when the backend cannot be opened (no GPU: the tests skip).
struct Devices {
  size_t count = 0;
  std::string why_none;
};
const Devices& AvailableDevices() {
  static const Devices devices = [] {
    Devices found;
    absl::StatusOr<BackendChoice> choice = ParseBackendChoice(TestBackend());
    if (!choice.ok()) {
      found.why_none = std::string(choice.status().message());
      return found;
    }
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        OpenBackend(*choice, HostBackendOptions{.device_count = 2});
    if (!backend.ok()) {
      found.why_none = absl::StrCat("no usable GPU: ", backend.status().message());
      return found;
    }
    found.count = (*backend)->devices().size();
    return found;
  }();
  return devices;
}

class GpuTest : public testing::DaemonRolesTest {
 protected:
  // The dry run's daemon presents two host devices, to spread clients over.
  GpuTest() : DaemonRolesTest({{"BLOCKSWAP_HOST_DEVICES", "2"}}) {}

  void SetUp() override {
    if (AvailableDevices().count == 0) GTEST_SKIP() << AvailableDevices().why_none;
    DaemonRolesTest::SetUp();
  }

  void StartDaemon(std::map<std::string, std::string> env = {},
                   std::vector<std::string> extra_args = {}) {
    DaemonRolesTest::StartDaemon(DaemonFlags{.extra_args = std::move(extra_args),
                                             .env = std::move(env),
                                             .backend = TestBackend()});
  }

  // For clients of `uid` (whose group is gid `uid`, BecomeUser), as beside
  // the system service: the daemon in its own group and umask (no Group=, no
  // UMask=: device memory and pages reach the clients only as descriptors
  // over the socket), the socket in the clients' group; the way to the
  // socket and the clients' report files open to them. The args that make a
  // role that user.
  std::vector<std::string> StartDaemonForUser(uid_t uid, const std::vector<std::string>& names) {
    StartDaemon({}, {absl::StrCat("--socket-group=", uid)});
    EXPECT_EQ(::chmod(dirs_->temp_dir().c_str(), 0755), 0);
    for (const std::string& name : names) {
      std::ofstream(ReportPath(name)).flush();
      EXPECT_EQ(::chmod(ReportPath(name).c_str(), 0666), 0);
    }
    return {absl::StrCat("--as-uid=", uid)};
  }

  int ModelCount() { return Models().models_size(); }
  bool ClientAttached(const std::string& name) {
    const v1::ClientsReply reply = Clients();
    for (const v1::ClientInfo& client : reply.clients()) {
      if (client.client_name() == name) return true;
    }
    return false;
  }
};

// --- byte-exact streaming --------------------------------------------------

class GpuStreamingTest : public GpuTest, public ::testing::WithParamInterface<int> {};

TEST_P(GpuStreamingTest, TwoClientsStreamRandomBlocksByteExact) {
  const int slots = GetParam();
  const absl::StatusOr<std::optional<uid_t>> user = ClientUser();
  ASSERT_TRUE(user.ok()) << user.status();
  std::vector<std::string> as_user;
  if (user->has_value()) {
    as_user = StartDaemonForUser(**user, {"client0", "client1"});
    std::cerr << "clients run as uid " << **user << "\n";
  } else {
    StartDaemon();
  }
  std::vector<ChildProcess> clients;
  for (int c = 0; c < 2; ++c) {
    // One model (same seed), clients spread over the GPUs where there are
    // several.
    std::vector<std::string> args = {
        "--loads=600", "--blocks=12", "--compute-us=100", "--compute=copies",
        absl::StrCat("--slots=", slots),
        absl::StrCat("--device=", c % AvailableDevices().count)};
    args.insert(args.end(), as_user.begin(), as_user.end());
    clients.push_back(Spawn("gpu-stream", absl::StrCat("client", c), std::move(args)));
  }
  for (int c = 0; c < 2; ++c) {
    const std::string name = absl::StrCat("client", c);
    EXPECT_EQ(Finish(clients[c], name), kGpuClientOk) << name << ": " << Describe(name);
    testing::ReportLines report = Report(name);
    EXPECT_EQ(FirstValue(report, "wrong"), "0");
    EXPECT_EQ(FirstValue(report, "loads"), "600");
    std::cerr << name << " on " << FirstValue(report, "device") << ": "
              << FirstValue(report, "gbps") << " GB/s\n";
  }
  const v1::ModelsReply models = Models();
  ASSERT_EQ(models.models_size(), 1);
  if (DevicesRefuseHostRegistration()) {
    EXPECT_EQ(models.models(0).staged_blocks(), models.models(0).block_count())
        << "every block staged: the device cannot pin any";
  }
}

INSTANTIATE_TEST_SUITE_P(Slots, GpuStreamingTest, ::testing::Values(2, 4),
                         [](const auto& info) { return absl::StrCat(info.param, "Slots"); });

// A consumer whose compute sometimes takes 20 ms on the GPU: the next copy
// into that slot must wait for it (the daemon gates on `free`), or the
// comparison after the long kernel sees the next block.
// The stall a pass reports is the compute stream's idle time at its waits
// (WaitTimer): on cuda two timing events around the wait, placed on the host
// clock by the device's anchor. In process: no daemon needed.
TEST(GpuWaitTimer, AStreamBehindAnotherStreamsWorkMeasuresItsIdleTimeOnTheHostClock) {
  if (AvailableDevices().count == 0) GTEST_SKIP() << AvailableDevices().why_none;
  constexpr absl::Duration kBusy = absl::Milliseconds(20);
  std::unique_ptr<Backend> backend = OpenBackend(ParseBackendChoice(TestBackend()).value()).value();
  Device& device = *backend->devices()[0];
  std::unique_ptr<Stream> busy = device.CreateStream().value();
  std::unique_ptr<Stream> waiter = device.CreateStream().value();
  std::unique_ptr<Event> event = device.CreateEvent().value();
  std::unique_ptr<WaitTimer> timer = device.CreateWaitTimer().value();

  const uint64_t issued_ns = MonotonicNanos();
  ASSERT_TRUE(busy->LaunchHostFunc([kBusy] { absl::SleepFor(kBusy); }).ok());
  ASSERT_TRUE(busy->Record(*event).ok());
  ASSERT_TRUE(waiter->WaitTimed(*event, *timer).ok());
  std::optional<WaitIdle> idle = timer->Await().value();
  ASSERT_TRUE(idle.has_value());
  EXPECT_GE(idle->idle, kBusy - absl::Milliseconds(5));
  EXPECT_LT(idle->idle, absl::Seconds(5));
  // The anchor's error is a synchronisation's latency: well under 2 ms.
  EXPECT_GE(idle->began_ns + 2'000'000, issued_ns);
  EXPECT_LE(idle->began_ns, MonotonicNanos());

  ASSERT_TRUE(busy->Synchronize().ok());
  ASSERT_TRUE(waiter->WaitTimed(*event, *timer).ok());
  EXPECT_LT(timer->Await().value()->idle, absl::Milliseconds(5)) << "the record had completed";
}

// The staging buffers' memory is allocated pinned by the driver, so it comes
// also where the device refuses to register host memory; that refusal says
// the device cannot register host memory, not that a limit is too small. In
// process: no daemon needed.
TEST(GpuPinnedMemory, PinnedBuffersNeedNoHostRegistrationAndARefusalSaysTheDeviceCannot) {
  if (AvailableDevices().count == 0) GTEST_SKIP() << AvailableDevices().why_none;
  std::unique_ptr<Backend> backend = OpenBackend(ParseBackendChoice(TestBackend()).value()).value();
  Device& device = *backend->devices()[0];
  constexpr size_t kBytes = size_t{1} << 20;
  absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> buffer =
      device.AllocatePinnedHostBuffer(kBytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  for (size_t i = 0; i < kBytes; ++i) (*buffer)->data()[i] = static_cast<std::byte>(i * 7);
  std::unique_ptr<DeviceMemory> memory = device.Allocate(kBytes).value();
  std::unique_ptr<Stream> stream = device.CreateStream().value();
  std::vector<std::byte> back(kBytes);
  ASSERT_TRUE(stream->CopyHostToDevice(memory->data(), (*buffer)->data(), kBytes).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(back.data(), memory->data(), kBytes).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(std::memcmp(back.data(), (*buffer)->data(), kBytes), 0);

  std::vector<std::byte> pageable(kBytes);
  absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
      device.RegisterHostMemory(pageable.data(), kBytes);
  if (!DevicesRefuseHostRegistration()) {
    EXPECT_TRUE(registration.ok()) << registration.status();
    return;
  }
  EXPECT_TRUE(absl::IsUnimplemented(registration.status())) << registration.status();
  EXPECT_TRUE(absl::StrContains(registration.status().message(),
                                absl::StrCat(device.info().uuid, ") cannot register host memory")))
      << registration.status();
  EXPECT_TRUE(absl::StrContains(registration.status().message(), "CUDA_ERROR_NOT_SUPPORTED"))
      << registration.status();
}

TEST_F(GpuTest, SlowKernelConsumerNeverReadsAStaleSlot) {
  StartDaemon();
  ChildProcess client =
      Spawn("gpu-stream", "slow", {"--loads=240", "--blocks=6", "--slow-every=4", "--slow-ms=20"});
  EXPECT_EQ(Finish(client, "slow"), kGpuClientOk) << Describe("slow");
  EXPECT_EQ(FirstValue(Report("slow"), "wrong"), "0");
}

// The same workload with one record, wait or publish of the protocol
// switched off in the daemon or the client: the GPU must expose it.
class GpuMutationTest : public GpuTest, public ::testing::WithParamInterface<ProtocolStep> {};

TEST_P(GpuMutationTest, SkippingTheStepIsCaught) {
  BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS("BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS");
  const std::string step(ProtocolStepName(GetParam()));
  const std::map<std::string, std::string> skip = {{"BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS", step}};
  const bool daemon_step = absl::StartsWith(step, "daemon");
  StartDaemon(daemon_step ? skip : std::map<std::string, std::string>{});
  ChildProcess client =
      Spawn("gpu-stream", "mutant",
            {"--loads=240", "--blocks=6", "--slow-every=4", "--slow-ms=20", "--timeout-ms=3000"},
            daemon_step ? std::map<std::string, std::string>{} : skip);
  const int code = Finish(client, "mutant");
  EXPECT_NE(code, kGpuClientOk) << "skipping " << step << " went unnoticed on the GPU";
  std::cerr << "skipping " << step << ": exit " << code << ", " << Describe("mutant") << "\n";
}

INSTANTIATE_TEST_SUITE_P(EveryStep, GpuMutationTest, ::testing::ValuesIn(kSafetyProtocolSteps),
                         [](const auto& info) { return ProtocolStepIdentifier(info.param); });

// The same with each client copying its own blocks (BLOCKSWAP_COPY=trainer)
// and one of the two waits of its copies switched off.
class GpuTrainerMutationTest : public GpuTest, public ::testing::WithParamInterface<ProtocolStep> {};

TEST_P(GpuTrainerMutationTest, SkippingTheStepIsCaught) {
  BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS("BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS");
  const std::string step(ProtocolStepName(GetParam()));
  StartDaemon();
  ChildProcess client =
      Spawn("gpu-stream", "mutant",
            {"--loads=240", "--blocks=6", "--slow-every=4", "--slow-ms=20", "--timeout-ms=3000"},
            {{"BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS", step}, {"BLOCKSWAP_COPY", "trainer"}});
  const int code = Finish(client, "mutant");
  EXPECT_EQ(FirstValue(Report("mutant"), "ready_path"), "trainer") << Describe("mutant");
  EXPECT_NE(code, kGpuClientOk) << "skipping " << step << " went unnoticed on the GPU";
  std::cerr << "skipping " << step << ": exit " << code << ", " << Describe("mutant") << "\n";
}

INSTANTIATE_TEST_SUITE_P(EveryTrainerStep, GpuTrainerMutationTest,
                         ::testing::ValuesIn(kTrainerCopySteps),
                         [](const auto& info) { return ProtocolStepIdentifier(info.param); });

// --- failures ------------------------------------------------------------

// A client killed while a 2 s kernel runs on its slot, after it recorded
// `free` behind that kernel (so the daemon holds a copy back for it): the
// other client never waits on it, and the dead client's session and ring
// are gone soon after.
TEST_F(GpuTest, ClientKilledDuringALongKernelStallsNobody) {
  StartDaemon();
  const std::vector<std::string> work = {"--loads=800", "--blocks=8", "--compute-us=500"};
  ChildProcess solo = Spawn("gpu-stream", "solo", work);
  ASSERT_EQ(Finish(solo, "solo"), kGpuClientOk) << Describe("solo");

  constexpr int kHoldMs = 2000;
  ChildProcess holder =
      Spawn("gpu-hold", "holder", {absl::StrCat("--hold-ms=", kHoldMs), "--blocks=8"});
  ASSERT_TRUE(AwaitReport("holder", "holding")) << Describe("holder");
  ChildProcess other = Spawn("gpu-stream", "other", work);
  absl::SleepFor(absl::Milliseconds(300));  // inside the 2 s kernel
  holder.Kill(SIGKILL);
  const absl::Time killed = absl::Now();
  ASSERT_EQ(Finish(holder, "holder", absl::Seconds(10)), 128 + SIGKILL);
  bool gone = false;
  while (!gone && absl::Now() - killed < absl::Seconds(5)) {
    gone = !ClientAttached("holder");
    if (!gone) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(gone) << "the killed client's session was still listed 5 s later";
  std::cerr << "killed client gone from Admin after " << absl::Now() - killed << "\n";

  EXPECT_EQ(Finish(other, "other"), kGpuClientOk) << Describe("other");
  const testing::ReportLines report = Report("other");
  EXPECT_EQ(FirstValue(report, "wrong"), "0");
  // A daemon that waited for the dead client's copy would have held this
  // client's fills back for the rest of the kernel (1.7 s of it): its
  // longest wait stays within the same client's longest wait alone (measured
  // above, on this GPU) plus half the kernel.
  EXPECT_LT(NumberValue(report, "max_wait_ms"),
            NumberValue(Report("solo"), "max_wait_ms") + kHoldMs / 2)
      << Describe("other") << "\n"
      << Describe("solo");
  std::cerr << "throughput beside the dying client / alone: " << NumberValue(report, "gbps")
            << " / " << NumberValue(Report("solo"), "gbps") << " GB/s\n";
}

// The daemon dies under a streaming client: the client's next step fails
// with UNAVAILABLE within its timeout, and its own stream stays sound and
// drains: its waits are on the daemon's ready words, which the client's
// watchdog releases when it loses the daemon (docs/protocol.md, "A dead
// daemon"); where the device has no stream memory operations its stream
// waits for nothing (the client waits on the host for landed_seq).
TEST_F(GpuTest, DaemonKilledUnderAClientFailsItsStepWithUnavailable) {
  StartDaemon();
  ChildProcess client =
      Spawn("gpu-stream", "orphan",
            {"--loads=10000000", "--compute-us=200", "--timeout-ms=5000", "--compute=copies"});
  ASSERT_TRUE(AwaitReport("orphan", "streaming")) << Describe("orphan");
  ASSERT_TRUE(daemon_->Stop(SIGKILL).ok());
  const absl::Time killed = absl::Now();
  const int code = Finish(client, "orphan", absl::Seconds(20));
  const absl::Duration noticed = absl::Now() - killed;
  const testing::ReportLines report = Report("orphan");
  EXPECT_EQ(code, kGpuClientFailed) << Describe("orphan");
  EXPECT_TRUE(absl::StartsWith(FirstValue(report, "error"), "14 ")) << Describe("orphan");
  // The watchdog released the stream: it drains, without a fault.
  EXPECT_EQ(FirstValue(report, "sync"), "ok") << Describe("orphan");
  EXPECT_LE(noticed, absl::Seconds(7));  // the 5 s timeout, and the stream drained at once
  std::cerr << "client failed " << noticed
            << " after the daemon was killed: " << FirstValue(report, "error") << "\n";
}

}  // namespace
}  // namespace blockswap::gpu_testing
