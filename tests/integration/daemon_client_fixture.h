// The fixture of the daemon/client integration tests (daemon_client_test.cc,
// reliability_test.cc): a real blockswapd on the host backend with jitter,
// client roles spawned from the test binary, their "key value" reports, and
// the Admin service's view.
#ifndef BLOCKSWAP_TESTS_INTEGRATION_DAEMON_CLIENT_FIXTURE_H_
#define BLOCKSWAP_TESTS_INTEGRATION_DAEMON_CLIENT_FIXTURE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {

inline constexpr char kJitterUs[] = "100";

class DaemonClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dirs = ScratchDirs::Create();
    ASSERT_TRUE(dirs.ok()) << dirs.status();
    dirs_ = *std::move(dirs);
  }

  void StartDaemon(DaemonFlags flags = {}) {
    if (!flags.env.contains("BLOCKSWAP_HOST_JITTER_US")) {
      flags.env["BLOCKSWAP_HOST_JITTER_US"] = kJitterUs;
    }
    auto daemon = DaemonProcess::Start(*dirs_, std::move(flags));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
  }

  std::string ReportPath(const std::string& name) const {
    return dirs_->temp_dir() + "/" + name + ".report";
  }

  ChildProcess Spawn(const std::string& role, const std::string& name,
                     std::vector<std::string> args,
                     std::map<std::string, std::string> env = {}) {
    args.push_back("--socket=" + dirs_->socket_path());
    args.push_back("--report=" + ReportPath(name));
    args.push_back("--name=" + name);
    if (!env.contains("BLOCKSWAP_HOST_JITTER_US")) env["BLOCKSWAP_HOST_JITTER_US"] = kJitterUs;
    auto child = ChildProcess::Spawn(role, {.args = args, .env = env});
    EXPECT_TRUE(child.ok()) << child.status();
    return *std::move(child);
  }

  // Runs a role to its end and returns its exit code.
  int Run(const std::string& role, const std::string& name, std::vector<std::string> args,
          std::map<std::string, std::string> env = {}) {
    ChildProcess child = Spawn(role, name, std::move(args), std::move(env));
    absl::StatusOr<int> code = child.Wait(absl::Seconds(120));
    EXPECT_TRUE(code.ok()) << name << ": " << code.status();
    return code.ok() ? *code : -1;
  }

  // Waits until the role's report has `key`.
  bool AwaitReport(const std::string& name, const std::string& key,
                   absl::Duration timeout = absl::Seconds(30)) {
    for (absl::Time until = absl::Now() + timeout; absl::Now() < until;) {
      if (ReadRoleReport(ReportPath(name)).contains(key)) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  v1::ClientsReply Clients() {
    v1::ClientsReply reply;
    grpc::ClientContext context;
    grpc::Status status = daemon_->Admin()->Clients(&context, v1::ClientsRequest(), &reply);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return reply;
  }
  v1::ModelsReply Models() {
    v1::ModelsReply reply;
    grpc::ClientContext context;
    grpc::Status status = daemon_->Admin()->Models(&context, v1::ModelsRequest(), &reply);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return reply;
  }
  v1::ResidencyReply Residency() {
    v1::ResidencyReply reply;
    grpc::ClientContext context;
    grpc::Status status = daemon_->Admin()->Residency(&context, v1::ResidencyRequest(), &reply);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return reply;
  }

  int CountShm(absl::string_view suffix) const {
    int count = 0;
    for (const std::string& name : dirs_->ShmEntries()) count += absl::EndsWith(name, suffix);
    return count;
  }

  std::unique_ptr<ScratchDirs> dirs_;
  std::unique_ptr<DaemonProcess> daemon_;
};

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_INTEGRATION_DAEMON_CLIENT_FIXTURE_H_
