// Masters that are not pinned stream through the daemon's staging
// buffers (shared/copy/staged_copier.h) with the same load protocol and the
// same client code. The real daemon on the host backend, whose staging path
// is real code (a bounce through pinned buffers filled by staging threads,
// with the host backend's jitter on both sides), and real client processes.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "shared/protocol/load_protocol.h"
#include "tests/integration/client_roles.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/skip_without_test_hooks.h"

namespace blockswap::testing {
namespace {

// Buffers of 4 KiB: each block of the test model (some 50 KiB) is a dozen
// chunks, so that a block's copy reuses every buffer several times.
const std::vector<std::string> kSmallStaging = {"--staging-buffer-bytes=4096",
                                                "--staging-buffers=3", "--staging-threads=2"};

std::vector<std::string> With(std::vector<std::string> args, std::vector<std::string> more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

class StagedTest : public DaemonClientTest {
 protected:
  std::string LogPath() const { return dirs_->temp_dir() + "/daemon.log"; }
  std::string Log() const {
    std::stringstream text;
    text << std::ifstream(LogPath()).rdbuf();
    return text.str();
  }
  uint64_t StagedLoads() {
    uint64_t staged = 0;
    const v1::StatsReply stats = Stats();
    for (const v1::DeviceStats& device : stats.devices()) staged += device.staged_loads();
    return staged;
  }
};

TEST_F(StagedTest, TwoClientsStreamStagedMastersByteExactWithJitter) {
  StartDaemon({.extra_args = With({"--pinning=never"}, kSmallStaging)});
  ChildProcess async_client = Spawn("stream", "async", {"--passes=40", "--slots=2"});
  ChildProcess abi_client = SpawnAbiClient("abi", {"--passes=40", "--slots=3"});
  EXPECT_EQ(Finish(async_client, "async"), kClientOk) << Describe("async");
  auto abi_code = abi_client.Wait(absl::Seconds(120));
  ASSERT_TRUE(abi_code.ok());
  EXPECT_EQ(*abi_code, kClientOk);
  EXPECT_EQ(FirstValue(Report("async"), "wrong"), "0");
  EXPECT_EQ(FirstValue(ReadRoleReport(ReportPath("abi")), "wrong"), "0");
  v1::ModelsReply models = Models();
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).staged_blocks(), models.models(0).block_count());
  EXPECT_FALSE(models.models(0).pinned());
  v1::StatsReply stats = Stats();
  ASSERT_EQ(stats.devices_size(), 1);
  EXPECT_GT(stats.devices(0).loads(), 0u);
  EXPECT_EQ(stats.devices(0).staged_loads(), stats.devices(0).loads()) << "every load staged";
  EXPECT_EQ(stats.devices(0).staged_bytes(), stats.devices(0).bytes_copied());
}

// The device (here: the host backend's pin limit, as a small
// RLIMIT_MEMLOCK) refuses to pin the model's masters: under "auto" the
// model is staged, with one log line, and streams byte-exact.
TEST_F(StagedTest, UnderAutoAModelTheDeviceRefusesToPinIsStagedWithOneLogLine) {
  BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS("BLOCKSWAP_HOST_PIN_LIMIT_BYTES");
  StartDaemon({.extra_args = kSmallStaging,
               .env = {{"BLOCKSWAP_HOST_PIN_LIMIT_BYTES", "20000"}},
               .output_path = LogPath()});
  EXPECT_EQ(Run("stream", "refused", {"--passes=20"}), kClientOk) << Describe("refused");
  EXPECT_EQ(FirstValue(Report("refused"), "wrong"), "0");
  v1::ModelsReply models = Models();
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).staged_blocks(), models.models(0).block_count());
  EXPECT_GT(StagedLoads(), 0u);
  // The same model again: already present, so no second pinning and no line.
  EXPECT_EQ(Run("stream", "again", {"--passes=2"}), kClientOk) << Describe("again");
  const std::string log = Log();
  size_t lines = 0;
  for (size_t at = log.find("could not pin"); at != std::string::npos;
       at = log.find("could not pin", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << log;
  EXPECT_TRUE(absl::StrContains(log, "staged through pinned buffers (pinning = \"auto\")")) << log;
}

// max_pinned_bytes below the model under "auto": the blocks it takes are
// pinned, the rest staged, in one model whose loads take both paths
// byte-exact; Admin says which.
TEST_F(StagedTest, UnderAutoTheBlocksOverMaxPinnedBytesAreStagedAndStreamWithThePinned) {
  StartDaemon({.extra_args = With({"--max-pinned-bytes=150000"}, kSmallStaging)});
  EXPECT_EQ(Run("stream", "mixed", {"--passes=20", "--slots=2"}), kClientOk) << Describe("mixed");
  EXPECT_EQ(FirstValue(Report("mixed"), "wrong"), "0");
  v1::ModelsReply models = Models();
  ASSERT_EQ(models.models_size(), 1);
  const v1::ModelInfo& model = models.models(0);
  EXPECT_GT(model.staged_blocks(), 0u);
  EXPECT_LT(model.staged_blocks(), model.block_count());
  const v1::StatusReply status = Status();
  EXPECT_EQ(status.pinning(), "auto");
  EXPECT_EQ(status.staged_blocks(), model.staged_blocks());
  EXPECT_LE(status.pinned_bytes(), 150000u);
  EXPECT_EQ(status.pinned_bytes() + status.staged_bytes(), model.bytes());
  const v1::StatsReply stats = Stats();
  ASSERT_EQ(stats.devices_size(), 1);
  EXPECT_GT(stats.devices(0).staged_loads(), 0u);
  EXPECT_LT(stats.devices(0).staged_loads(), stats.devices(0).loads()) << "some loads direct";
}

TEST_F(StagedTest, UnderAlwaysAModelThatCannotBePinnedIsRefusedSayingWhy) {
  BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS("BLOCKSWAP_HOST_PIN_LIMIT_BYTES");
  StartDaemon(
      {.extra_args = {"--pinning=always"}, .env = {{"BLOCKSWAP_HOST_PIN_LIMIT_BYTES", "20000"}}});
  EXPECT_NE(Run("stream", "always", {"--passes=1"}), kClientOk);
  const std::string error = FirstValue(Report("always"), "error");
  EXPECT_TRUE(absl::StrContains(error, "refused to pin")) << error;
  EXPECT_TRUE(absl::StrContains(error, "(pinning = \"always\")")) << error;
  EXPECT_EQ(Models().models_size(), 0) << "nothing left behind";
  // Nobody else is disturbed: a model that fits the limit still streams.
  EXPECT_EQ(Run("stream", "small", {"--passes=5", "--blocks=1", "--elements=256"}), kClientOk)
      << Describe("small");
}

// The two waits of a staged copy, each switched off in the real daemon
// (BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS): a streaming client must notice.
class StagedMutationTest : public StagedTest, public ::testing::WithParamInterface<ProtocolStep> {};

TEST_P(StagedMutationTest, SkippingTheStepFailsTheStream) {
  BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS("BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS");
  const std::string step(ProtocolStepName(GetParam()));
  StartDaemon(
      {.extra_args = {"--pinning=never", "--staging-buffer-bytes=4096", "--staging-buffers=2",
                      "--staging-threads=2"},
       .env = {{"BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS", step}, {"BLOCKSWAP_HOST_JITTER_US", "200"}}});
  int code = Run("stream", "mutant", {"--passes=150", "--blocks=5", "--wait-timeout-ms=2000"},
                 {{"BLOCKSWAP_HOST_JITTER_US", "200"}});
  EXPECT_NE(code, kClientOk) << "skipping " << step << " went unnoticed";
  std::cerr << "skipping " << step << ": client exit " << code << ", "
            << FirstValue(Report("mutant"), "error")
            << " wrong=" << FirstValue(Report("mutant"), "wrong") << "\n";
}

INSTANTIATE_TEST_SUITE_P(EveryStagingStep, StagedMutationTest,
                         ::testing::ValuesIn(kStagingProtocolSteps),
                         [](const auto& info) { return ProtocolStepIdentifier(info.param); });

}  // namespace
}  // namespace blockswap::testing
