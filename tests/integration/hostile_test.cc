// An allowed local user who tries to take the service from the others
// (issue 19): each attempt (hostile_roles.cc) fails alone with a precise
// error while a well-behaved client keeps streaming and verifying.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/integration/client_roles.h"
#include "tests/integration/daemon_client_fixture.h"

namespace blockswap::testing {
namespace {

class HostileClientTest : public DaemonClientTest {
 protected:
  // Runs `hostile --case=NAME` beside a streaming client; both must succeed.
  void ExpectFailsAloneBesideAStreamer(const std::string& name, std::vector<std::string> args = {},
                                       int streamer_passes = 200) {
    ChildProcess streamer =
        Spawn("stream", "streamer", {absl::StrCat("--passes=", streamer_passes)});
    ASSERT_TRUE(AwaitReport("streamer", "streaming"));
    args.push_back("--case=" + name);
    EXPECT_EQ(Run("hostile", "hostile-" + name, std::move(args)), kClientOk) << "case " << name;
    EXPECT_EQ(Finish(streamer, "streamer"), kClientOk) << "the well-behaved client was disturbed";
  }
};

TEST_F(HostileClientTest, ReadOnlyDescriptorsCannotBeReopenedWritable) {
  StartDaemon();
  ExpectFailsAloneBesideAStreamer("reopen-read-only");
}

TEST_F(HostileClientTest, BadAndHugeStatisticsReportsAreRefusedAndStatsStillAnswers) {
  StartDaemon();
  ExpectFailsAloneBesideAStreamer("bad-and-huge-reports");
  // And for everybody else, after it.
  v1::StatsReply stats = Stats();
  EXPECT_GE(stats.devices_size(), 1);
}

}  // namespace
}  // namespace blockswap::testing
