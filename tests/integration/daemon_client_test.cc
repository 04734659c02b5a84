// blockswapd and its clients as real processes: the daemon binary on the
// host backend (with jitter), clients spawned from this binary
// (client_roles.cc, rogue_roles.cc) through the client library.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "shared/protocol/load_protocol.h"
#include "tests/integration/client_roles.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/skip_without_test_hooks.h"

namespace blockswap::testing {
namespace {

TEST_F(DaemonClientTest, TwoClientsStreamOneSharedModelByteExact) {
  StartDaemon();
  ChildProcess async_client = Spawn("stream", "async", {"--passes=40", "--slots=2"});
  ChildProcess abi_client = SpawnAbiClient("abi", {"--passes=40", "--slots=3"});
  auto async_code = async_client.Wait(absl::Seconds(120));
  auto abi_code = abi_client.Wait(absl::Seconds(120));
  ASSERT_TRUE(async_code.ok() && abi_code.ok());
  EXPECT_EQ(*async_code, kClientOk);
  EXPECT_EQ(*abi_code, kClientOk);
  std::string model = FirstValue(ReadRoleReport(ReportPath("async")), "model");
  EXPECT_EQ(model, FirstValue(ReadRoleReport(ReportPath("abi")), "model"))
      << "identical content must be one model";
  v1::ModelsReply models = Models();
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).model_id(), model);
  EXPECT_EQ(CountShm(".manifest"), 1) << "one model";
  EXPECT_LE(CountShm(".block"), static_cast<int>(models.models(0).block_count()))
      << "one master per distinct block";
}

// The daemon and a trainer of another uid, as under the
// system service (the daemon user blockswap, trainers in the socket's group):
// the trainer reaches the socket through the group, imports its ring (every
// part a descriptor) and streams byte-exact, and neither breaks a lifetime
// rule.
TEST_F(DaemonClientTest, AClientOfAnotherUidInTheSocketsGroupStreamsByteExact) {
  StartDaemon({.extra_args = {"--socket-group=65534"}});
  // The way to the socket (and to the role's report) for uid 65534; the
  // socket itself stays 0660, reachable through its group only.
  ASSERT_EQ(::chmod(dirs_->temp_dir().c_str(), 0755), 0);
  std::ofstream(ReportPath("other-uid")).flush();
  ASSERT_EQ(::chmod(ReportPath("other-uid").c_str(), 0666), 0);
  struct stat socket_stat {};
  ASSERT_EQ(::stat(dirs_->socket_path().c_str(), &socket_stat), 0);
  EXPECT_EQ(socket_stat.st_mode & 07777, 0660u);
  EXPECT_EQ(socket_stat.st_gid, 65534u);

  ChildProcess trainer = Spawn("stream", "other-uid", {"--passes=20", "--as-uid=65534"});
  EXPECT_EQ(Finish(trainer, "other-uid"), kClientOk) << Describe("other-uid");
  EXPECT_EQ(FirstValue(Report("other-uid"), "wrong"), "0");
  auto code = daemon_->Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << "the daemon did not stop cleanly after the other uid's session";
}

// Whatever umask it inherits, the daemon's own files get the modes it
// chooses: its masters directory 0700, nothing in it open to others.
TEST_F(DaemonClientTest, UnderAPermissiveUmaskTheDaemonsFilesKeepTheirModes) {
  const mode_t previous = ::umask(0);
  StartDaemon();
  ::umask(previous);
  EXPECT_EQ(Run("stream", "modes", {"--passes=1"}), kClientOk);
  struct stat entry {};
  ASSERT_EQ(::stat(dirs_->socket_path().c_str(), &entry), 0);
  EXPECT_EQ(entry.st_mode & 0007, 0u) << "the socket is open to others";
  ASSERT_EQ(::stat(dirs_->shm_dir().c_str(), &entry), 0);
  EXPECT_EQ(entry.st_mode & 07777, 0700u);
  const std::vector<std::string> files = dirs_->ShmEntries();
  EXPECT_FALSE(files.empty());
  for (const std::string& name : files) {
    ASSERT_EQ(::stat((dirs_->shm_dir() + "/" + name).c_str(), &entry), 0) << name;
    EXPECT_EQ(entry.st_mode & 0077, 0u)
        << name << " has mode " << std::oct << (entry.st_mode & 07777);
  }
}

TEST_F(DaemonClientTest, AFileRegisteredThroughTheCAbiIsTheModelAnUploadGets) {
  StartDaemon();
  const std::string file = dirs_->temp_dir() + "/abi.safetensors";
  ASSERT_TRUE(blockswap::testing::WriteSafetensorsFile(
                  file, blockswap::testing::TransformerTensors(3, 2, 8), /*seed=*/9)
                  .ok());
  auto abi_client = ChildProcess::SpawnProgram(
      BinaryDirectory() + "/blockswap_abi_client",
      {.args = {"--socket=" + dirs_->socket_path(), "--file=" + file,
                R"(--block-pattern=^transformer_blocks\.(\d+)\.)", R"(--select=\.weight$)",
                "--report=" + ReportPath("file")},
       .env = {}});
  ASSERT_TRUE(abi_client.ok()) << abi_client.status();
  auto code = abi_client->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, kClientOk);
  ReportLines report = ReadRoleReport(ReportPath("file"));
  EXPECT_EQ(FirstValue(report, "blocks"), "3");
  EXPECT_EQ(FirstValue(report, "wrong"), "0");
  EXPECT_NE(FirstValue(report, "extras"), "none");
  ASSERT_EQ(report["tensor"].size(), 6u);
  EXPECT_EQ(report["tensor"][1], "0 attn.w1.weight F32 2048");

  // This process uploads the same weights: the same model.
  auto connection = client::Connection::Connect(dirs_->socket_path(), "uploader");
  ASSERT_TRUE(connection.ok()) << connection.status();
  std::vector<std::string> bytes;
  bytes.reserve(6);
  std::vector<std::vector<client::TensorUpload>> blocks(3);
  for (int b = 0; b < 3; ++b) {
    for (int w = 0; w < 2; ++w) {
      bytes.push_back(blockswap::testing::TensorContent(
          absl::StrCat("transformer_blocks.", b, ".attn.w", w, ".weight"), 8 * 64 * 4, 9));
      blocks[b].push_back(
          {.spec = {.name = absl::StrCat("attn.w", w, ".weight"), .dtype = "F32", .shape = {8, 64}},
           .data = bytes.back().data()});
    }
  }
  auto uploaded = client::Model::Register(**connection, "upload", blocks);
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_EQ((*uploaded)->id(), FirstValue(report, "model"));
}

TEST_F(DaemonClientTest, SchedulerThroughTheCAbiStreamsEveryBlockRight) {
  StartDaemon();
  // 10 transformer blocks, the model's 4 blocks streaming through 2 slots.
  ChildProcess client = SpawnAbiClient(
      "scheduler", {"--scheduler-blocks=10", "--blocks=4", "--slots=2", "--passes=5"});
  auto code = client.Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  ReportLines report = ReadRoleReport(ReportPath("scheduler"));
  EXPECT_EQ(FirstValue(report, "wrong"), "0");
  // Ground truth N=10 S=4 B=2: 2 loads in forward, 2 in backward per step.
  EXPECT_EQ(FirstValue(report, "forward_loads"), "2");
  EXPECT_EQ(FirstValue(report, "backward_loads"), "2");
  EXPECT_EQ(FirstValue(report, "stall_consistent"), "1");
}

TEST_F(DaemonClientTest, TheCAbisOffloaderStreamsTheGroundTruthAndRefusesATrainableTensor) {
  StartDaemon();
  ChildProcess client = SpawnAbiClient("offloader", {"--offloader=1", "--blocks=10"});
  auto code = client.Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  ReportLines report = ReadRoleReport(ReportPath("offloader"));
  EXPECT_EQ(FirstValue(report, "wrong"), "0");
  EXPECT_TRUE(absl::StrContains(FirstValue(report, "trainable"),
                                "3 abi block 1 tensor 'proj.weight' requires grad, but streamed "
                                "tensors must be frozen"))
      << FirstValue(report, "trainable");
  // Ground truth N=10 S=4 B=2, as "block slot previous": prepare loads 1->0
  // and 3->1, forward 6->0 and 8->1, backward 3->1 and 1->0.
  std::vector<std::string> loads;
  for (const std::string& bind : report["bind"]) {
    if (absl::EndsWith(bind, " 1")) loads.push_back(bind.substr(0, bind.size() - 2));
  }
  EXPECT_EQ(loads,
            (std::vector<std::string>{"1 0 -", "3 1 -", "6 0 1", "8 1 3", "3 1 8", "1 0 6"}));
}

TEST_F(DaemonClientTest, APassesCopySecondsAreTheDaemonsMeasuredCopyTime) {
  StartDaemon();
  // 4 MiB blocks, so that a copy takes longer than the daemon takes to
  // notice its completion. No jitter: it would delay the copies themselves.
  // Each hook sleeps 1 ms (the compute), so a pass is longer than its copies.
  auto client = ChildProcess::SpawnProgram(
      BinaryDirectory() + "/blockswap_abi_client",
      {.args = {"--scheduler-blocks=10", "--blocks=4", "--elements=700000", "--slots=2",
                "--passes=4", "--hook-sleep-us=1000", "--socket=" + dirs_->socket_path(),
                "--report=" + ReportPath("copies")}});
  ASSERT_TRUE(client.ok()) << client.status();
  auto code = client->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  ReportLines report = ReadRoleReport(ReportPath("copies"));
  const double forward = NumberValue(report, "forward_copy_s");
  const double backward = NumberValue(report, "backward_copy_s");
  const double bytes = NumberValue(report, "block_bytes") * (NumberValue(report, "forward_loads") +
                                                             NumberValue(report, "backward_loads"));
  // The copy rate the daemon measured on its device over the whole run (it
  // served no other ring), and the client's own memcpy rate: no copy of the
  // same bytes is much faster than that.
  v1::StatsReply stats = Stats();
  ASSERT_EQ(stats.devices_size(), 1);
  const double device_rate = stats.devices(0).bytes_copied() / stats.devices(0).copy_seconds();
  const double memcpy_rate = NumberValue(report, "memcpy_bytes_per_s");
  const std::string numbers = absl::StrCat(
      "forward ", forward, " s in ", NumberValue(report, "forward_wall_s"), " s, backward ",
      backward, " s in ", NumberValue(report, "backward_wall_s"), " s; ", bytes, " bytes take ",
      bytes / device_rate, " s at the device's rate, ", bytes / memcpy_rate, " s at memcpy's");
  EXPECT_GT(forward, 0) << numbers;
  EXPECT_GT(backward, 0) << numbers;
  // One copy stream: its busy time fits in the step's wall time, plus the
  // copies that were in flight when the step's clock started (a pass's last
  // prefetches count in the next pass; at most one per slot of the 2-slot
  // ring). Not per pass: a short pass may carry more copy time than its own
  // wall time.
  EXPECT_LE(forward + backward, NumberValue(report, "forward_wall_s") +
                                    NumberValue(report, "backward_wall_s") +
                                    2 * NumberValue(report, "block_bytes") / device_rate)
      << numbers;
  // Roughly the step's bytes at the device's rate: a pass's last prefetches
  // count in the next pass, and single copies vary (on a loaded machine a
  // copy thread waits for a core).
  EXPECT_GT(forward + backward, bytes / device_rate / 3) << numbers;
  EXPECT_LT(forward + backward, 3 * bytes / device_rate) << numbers;
  EXPECT_GT(forward + backward, 0.5 * bytes / memcpy_rate) << numbers;
  std::cerr << "copy seconds: " << numbers << "\n";
}

TEST_F(DaemonClientTest, ForkedChildrenOfAnAttachedTrainerAreRefusedAndLeaveItsSessionAlone) {
  StartDaemon();
  ChildProcess trainer = SpawnAbiClient("fork", {"--fork=1", "--passes=4", "--slots=2"});
  auto code = trainer.Wait(absl::Seconds(90));
  ASSERT_TRUE(code.ok()) << code.status();
  ReportLines report = ReadRoleReport(ReportPath("fork"));
  EXPECT_EQ(*code, 0) << absl::StrJoin(report, "\n", [](std::string* out, const auto& line) {
    absl::StrAppend(out, line.first, " ", absl::StrJoin(line.second, " | "));
  });
  // Every call the child made was refused, naming itself and the parent.
  EXPECT_EQ(FirstValue(report, "checked"), "20");
  EXPECT_EQ(FirstValue(report, "not_refused"), "");
  // Both children ended on their own: neither hung in an RPC of the parent's.
  EXPECT_EQ(FirstValue(report, "checker_exit"), "0");
  EXPECT_EQ(FirstValue(report, "quitter_exit"), "0");
  // The parent streamed on byte-exact and its session still answers.
  EXPECT_EQ(FirstValue(report, "reopened"), "1");
  EXPECT_EQ(FirstValue(report, "wrong"), "0");
}

TEST_F(DaemonClientTest, MisbehavingClientsGetPreciseErrorsWhileAnotherStreams) {
  StartDaemon({.extra_args = {"--max-pinned-bytes=8388608", "--pinning=always"}});
  // Make the socket reachable for the uid-65534 case: the allow list, not
  // the file mode, must be what refuses it.
  ASSERT_EQ(::chmod(dirs_->temp_dir().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dirs_->socket_path().c_str(), 0666), 0);
  ExpectRoguesBesideAStreamer({"unfreed-slot", "unknown-ring", "bad-slot", "bad-block",
                               "unknown-model", "foreign-ring", "too-big", "denied-uid"});
}

TEST_F(DaemonClientTest, GarbageInARequestRingFailsOnlyThatRingWithAPreciseError) {
  StartDaemon();
  ExpectRoguesBesideAStreamer({"shm-bad-slot", "shm-unknown-handle", "shm-bad-block",
                               "shm-wrong-generation", "shm-tail-overrun", "shm-foreign-handle"});
}

TEST_F(DaemonClientTest, AClientsLoadsAreCountedWhicheverTransportCarriesThem) {
  StartDaemon();
  ChildProcess streamer = Spawn("stream", "counted", {"--passes=400"});
  ASSERT_TRUE(AwaitReport("counted", "streaming"));
  uint64_t loads = 0;
  for (absl::Time until = absl::Now() + absl::Seconds(30); loads == 0 && absl::Now() < until;) {
    const v1::ClientsReply clients = Clients();
    for (const v1::ClientInfo& client : clients.clients()) {
      if (client.pid() == static_cast<uint32_t>(streamer.pid())) loads = client.loads();
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GT(loads, 0u) << "Admin.Clients shows no loads of a streaming client";
  auto code = streamer.Wait(absl::Seconds(120));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, kClientOk);
}

TEST_F(DaemonClientTest, EveryClientQuotaIsEnforcedNamingItsKey) {
  StartDaemon({.extra_args = {"--max-rings-per-client=2", "--max-device-bytes-per-client=1MiB",
                              "--max-staging-bytes-per-client=1MiB"}});
  ExpectRoguesBesideAStreamer({"ring-quota", "device-bytes-quota", "staging-quota"},
                              /*streamer_passes=*/200);
}

TEST_F(DaemonClientTest, ASessionTokenWorksOnlyForItsOwnProcess) {
  StartDaemon();
  // This test process holds a live session; the rogue tries its token.
  auto owner = client::Connection::Connect(dirs_->socket_path(), "token-owner");
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(
      Run("rogue", "rogue-stolen-token", {"--case=stolen-token", "--token=" + (*owner)->token()}),
      kClientOk);
  EXPECT_EQ(Run("rogue", "rogue-guessed-token", {"--case=guessed-token"}), kClientOk);
  EXPECT_EQ(Run("rogue", "rogue-foreign-destroy", {"--case=foreign-destroy"}), kClientOk);
}

double LoadsPerSecond(const ReportLines& report) {
  double loads = 0, seconds = 0;
  if (!absl::SimpleAtod(FirstValue(report, "loads"), &loads) ||
      !absl::SimpleAtod(FirstValue(report, "seconds"), &seconds) || seconds <= 0) {
    return 0;
  }
  return loads / seconds;
}

TEST_F(DaemonClientTest, ClientHoldingASlotDoesNotSlowAnother) {
  // No jitter: this compares throughputs.
  StartDaemon({.env = {{"BLOCKSWAP_HOST_JITTER_US", "0"}}});
  std::map<std::string, std::string> no_jitter = {{"BLOCKSWAP_HOST_JITTER_US", "0"}};
  // The client computes 200 us per block (as a trainer's kernels would), so
  // that its throughput measures whether the daemon keeps serving it, not the
  // CPU share left to it on a 2-core machine. Solo runs and runs beside a hog
  // alternate five times; the medians are compared.
  auto rate = [&](const std::string& run) {
    EXPECT_EQ(Run("stream", run, {"--passes=300", "--compute-us=200"}, no_jitter), kClientOk);
    return LoadsPerSecond(ReadRoleReport(ReportPath(run)));
  };
  std::vector<double> solo_rates, hog_rates;
  for (int i = 0; i < 5; ++i) {
    solo_rates.push_back(rate(absl::StrCat("solo", i)));
    std::string hog_name = absl::StrCat("hog", i);
    ChildProcess hog = Spawn("hog", hog_name, {}, no_jitter);
    ASSERT_TRUE(AwaitReport(hog_name, "holding"));
    hog_rates.push_back(rate(absl::StrCat("beside-hog", i)));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double solo = median(solo_rates);
  const double beside_hog = median(hog_rates);
  EXPECT_GT(solo, 0);
  // A daemon that waited for the hog's held-back copy would stall this client
  // outright (its waits time out, the rate drops to nothing); half the solo
  // rate leaves room for the noise of a loaded 2-core machine (0.80 measured
  // once beside another full test run).
  EXPECT_GE(beside_hog, 0.5 * solo)
      << "solo " << solo << " loads/s, beside the hog " << beside_hog << " loads/s";
  std::cerr << "throughput: solo " << solo << " loads/s, beside a hog " << beside_hog
            << " loads/s (" << beside_hog / solo << ")\n";
}

TEST_F(DaemonClientTest, ClientWhoseDaemonDiesGetsAnErrorWithinItsTimeout) {
  StartDaemon();
  ChildProcess client = Spawn("stream", "orphan", {"--passes=1000000", "--wait-timeout-ms=2000"});
  ASSERT_TRUE(AwaitReport("orphan", "streaming"));
  ASSERT_TRUE(daemon_->Stop(SIGKILL).ok());
  const absl::Time killed = absl::Now();
  auto code = client.Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << "the client hung: " << code.status();
  EXPECT_TRUE(*code == kClientFailed || *code == kClientTimedOut)
      << "exit " << *code
      << "; report: " << FirstValue(ReadRoleReport(ReportPath("orphan")), "error");
  EXPECT_LE(absl::Now() - killed, absl::Seconds(5));
  std::cerr << "client exited " << absl::Now() - killed << " after the daemon was killed\n";
  std::cerr << "client reported: " << FirstValue(ReadRoleReport(ReportPath("orphan")), "error")
            << "\n";
}

// A ring closed before its daemon dies: the connection's loss watch for it
// went with it (the role exits 1 under AddressSanitizer otherwise).
TEST_F(DaemonClientTest, ARingClosedBeforeItsDaemonDiesIsNotTouchedWhenTheDaemonIsLost) {
  StartDaemon();
  ChildProcess client = Spawn("close-then-lose", "closer", {});
  ASSERT_TRUE(AwaitReport("closer", "closed"));
  ASSERT_TRUE(daemon_->Stop(SIGKILL).ok());
  EXPECT_EQ(Finish(client, "closer"), kClientOk) << Describe("closer");
  EXPECT_EQ(FirstValue(Report("closer"), "lost"), "1");
}

TEST_F(DaemonClientTest, SigtermWithClientsAttachedExitsZeroAndKeepsOnlySealedModels) {
  StartDaemon({.extra_args = {"--shutdown-grace=1"}});
  ChildProcess idle = Spawn("idle", "idle", {});
  ASSERT_TRUE(AwaitReport("idle", "attached"));
  auto code = daemon_->Stop(SIGTERM, absl::Seconds(15));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  std::vector<std::string> left = dirs_->ShmEntries();
  for (const std::string& name : left) {
    EXPECT_TRUE(name == ".lock" || absl::EndsWith(name, ".block") ||
                absl::EndsWith(name, ".manifest"))
        << "left behind: " << name;
  }
  EXPECT_GE(CountShm(".block"), 1);
  EXPECT_EQ(CountShm(".manifest"), 1);
}

TEST_F(DaemonClientTest, RestartedDaemonAdoptsSealedModels) {
  StartDaemon();
  ASSERT_EQ(Run("stream", "first", {"--passes=1"}), kClientOk);
  std::string model = FirstValue(ReadRoleReport(ReportPath("first")), "model");
  ASSERT_EQ(model.size(), 64u);
  ASSERT_EQ(*daemon_->Stop(SIGTERM), 0);
  StartDaemon();
  // Opened by id: no upload is possible, the masters must be adopted.
  EXPECT_EQ(Run("stream", "second", {"--passes=5", "--model-id=" + model}), kClientOk);
  v1::ModelsReply models = Models();
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).model_id(), model);
  EXPECT_EQ(CountShm(".manifest"), 1);
}

// A model opened in an earlier session (before its daemon was killed and
// restarted) is loaded over the transport BLOCKSWAP_LOAD_TRANSPORT chose, as
// any other: through the request ring by default, by its handle in the
// ring's new session (not the old one, which names nothing there).
TEST_F(DaemonClientTest, AModelOpenedInAnEarlierSessionLoadsOverTheChosenTransport) {
  StartDaemon();
  ChildProcess trainer = Spawn("stream", "reopened", {"--passes=5", "--blocks=4", "--reopen=1"});
  ASSERT_TRUE(AwaitReport("reopened", "ready"));
  ASSERT_TRUE(daemon_->Stop(SIGKILL).ok());
  StartDaemon();
  auto code = trainer.Wait(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, kClientOk) << FirstValue(ReadRoleReport(ReportPath("reopened")), "error");
  const ReportLines report = ReadRoleReport(ReportPath("reopened"));
  EXPECT_EQ(FirstValue(report, "wrong"), "0");
  const char* transport = std::getenv("BLOCKSWAP_LOAD_TRANSPORT");
  const bool grpc = transport != nullptr && std::string(transport) == "grpc";
  EXPECT_EQ(FirstValue(report, "ring_requests"), grpc ? "0" : FirstValue(report, "loads"))
      << "loads through the request ring (the rest went over the gRPC Load stream)";
}

// A copy waits for its slot's release when the client asks for the slot
// while its compute still uses it (here: 3 ms per block, loads two blocks
// ahead). The client library's notifier publishes each release once the
// client's own `free` event has completed, and the daemon copies on that
// word alone: every copy is counted once, and the ones that waited were
// released by the client's notification.
struct ReleaseCounts {
  uint64_t at_request = 0, notified = 0, loads = 0;
};
ReleaseCounts ReleasesOf(const v1::StatsReply& stats) {
  ReleaseCounts counts;
  for (const v1::DeviceStats& device : stats.devices()) {
    counts.at_request += device.releases_at_request();
    counts.notified += device.releases_notified();
    counts.loads += device.loads();
  }
  return counts;
}
constexpr int kReleaseTestLoads = 40;  // --passes=10 of --blocks=4

TEST_F(DaemonClientTest, EveryWaitedForReleaseOfAWellBehavedClientComesByNotification) {
  StartDaemon({.env = {{"BLOCKSWAP_HOST_JITTER_US", "0"}}});
  ASSERT_EQ(Run("stream", "notifying", {"--passes=10", "--blocks=4", "--compute-us=3000"},
                {{"BLOCKSWAP_HOST_JITTER_US", "0"}}),
            kClientOk);
  const ReleaseCounts counts = ReleasesOf(Stats());
  EXPECT_EQ(counts.loads, kReleaseTestLoads);
  EXPECT_EQ(counts.at_request + counts.notified, counts.loads)
      << "every copy's release is counted once";
  EXPECT_GE(counts.notified, counts.loads / 2) << "the slots were not in use when requested";
}

// Every record, wait and publish of the protocol, switched off in the real
// daemon or client library: a streaming client must notice.
class ProtocolMutationTest : public DaemonClientTest,
                             public ::testing::WithParamInterface<ProtocolStep> {};

TEST_P(ProtocolMutationTest, SkippingTheStepFailsTheStream) {
  BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS("BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS");
  const std::string step(ProtocolStepName(GetParam()));
  std::map<std::string, std::string> skip = {{"BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS", step},
                                             {"BLOCKSWAP_HOST_JITTER_US", "200"}};
  const bool daemon_step = absl::StartsWith(step, "daemon");
  StartDaemon({.env = daemon_step ? skip
                                  : std::map<std::string, std::string>{
                                        {"BLOCKSWAP_HOST_JITTER_US", "200"}}});
  int code = Run(
      "stream", "mutant", {"--passes=150", "--blocks=5", "--wait-timeout-ms=2000"},
      daemon_step ? std::map<std::string, std::string>{{"BLOCKSWAP_HOST_JITTER_US", "200"}} : skip);
  EXPECT_NE(code, kClientOk) << "skipping " << step << " went unnoticed";
  std::cerr << "skipping " << step << ": client exit " << code << ", "
            << FirstValue(ReadRoleReport(ReportPath("mutant")), "error")
            << " wrong=" << FirstValue(ReadRoleReport(ReportPath("mutant")), "wrong") << "\n";
}

INSTANTIATE_TEST_SUITE_P(EveryStep, ProtocolMutationTest, ::testing::ValuesIn(kSafetyProtocolSteps),
                         [](const auto& info) { return ProtocolStepIdentifier(info.param); });

}  // namespace
}  // namespace blockswap::testing
