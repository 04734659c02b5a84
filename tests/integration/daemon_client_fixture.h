// The fixture of the daemon/client integration tests (daemon_client_test.cc,
// reliability_test.cc, staged_test.cc, ...): a real blockswapd on the host
// backend, client roles (client_roles.cc, rogue_roles.cc) and the C ABI's
// client (SpawnAbiClient), all with jitter in the host backend's streams
// unless a test sets BLOCKSWAP_HOST_JITTER_US itself.
#ifndef BLOCKSWAP_TESTS_INTEGRATION_DAEMON_CLIENT_FIXTURE_H_
#define BLOCKSWAP_TESTS_INTEGRATION_DAEMON_CLIENT_FIXTURE_H_

#include <sys/stat.h>

#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/client_roles.h"
#include "tests/support/daemon_roles_test.h"

namespace blockswap::testing {

inline constexpr char kJitterUs[] = "100";

class DaemonClientTest : public DaemonRolesTest {
 protected:
  DaemonClientTest()
      : DaemonRolesTest({{"BLOCKSWAP_HOST_JITTER_US", kJitterUs}},
                        {{"BLOCKSWAP_HOST_JITTER_US", kJitterUs}}) {}

  // The C ABI's test client (tests/integration/abi_client.cc) on this
  // daemon, reporting as `name`, with the host backend's jitter; `args` are
  // its own flags. As Spawn does, a failure to start it fails the test.
  ChildProcess SpawnAbiClient(const std::string& name, std::vector<std::string> args) {
    args.push_back("--socket=" + dirs_->socket_path());
    args.push_back("--report=" + ReportPath(name));
    auto child = ChildProcess::SpawnProgram(
        BinaryDirectory() + "/blockswap_abi_client",
        {.args = std::move(args), .env = {{"BLOCKSWAP_HOST_JITTER_US", kJitterUs}}});
    EXPECT_TRUE(child.ok()) << child.status();
    return *std::move(child);
  }

  // A daemon that uids 65534 and 65533 may reach besides root (the test
  // runs as root and its roles act as those users, as attackers and their
  // neighbours), with the report files of `roles` writable by them.
  void StartSharedDaemon(DaemonFlags flags, const std::vector<std::string>& roles) {
    flags.extra_args.insert(flags.extra_args.end(), {"--allow-uid=65534", "--allow-uid=65533"});
    StartDaemon(std::move(flags));
    ASSERT_EQ(::chmod(dirs_->temp_dir().c_str(), 0755), 0);
    ASSERT_EQ(::chmod(dirs_->socket_path().c_str(), 0666), 0);
    for (const std::string& role : roles) {
      std::ofstream(ReportPath(role)).close();
      ASSERT_EQ(::chmod(ReportPath(role).c_str(), 0666), 0);
    }
  }

  // Runs each rogue case (rogue_roles.cc: each checks its own precise error)
  // while a well-behaved client streams, and expects the streamer to finish
  // undisturbed: bad input disturbs nobody else.
  void ExpectRoguesBesideAStreamer(std::initializer_list<const char*> rogues,
                                   int streamer_passes = 400) {
    ChildProcess streamer =
        Spawn("stream", "streamer", {absl::StrCat("--passes=", streamer_passes)});
    ASSERT_TRUE(AwaitReport("streamer", "streaming"));
    for (const char* rogue : rogues) {
      EXPECT_EQ(Run("rogue", absl::StrCat("rogue-", rogue), {absl::StrCat("--case=", rogue)}),
                kClientOk)
          << "case " << rogue;
    }
    auto code = streamer.Wait(absl::Seconds(120));
    ASSERT_TRUE(code.ok());
    EXPECT_EQ(*code, kClientOk) << "the well-behaved client was disturbed";
  }
};

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_INTEGRATION_DAEMON_CLIENT_FIXTURE_H_
