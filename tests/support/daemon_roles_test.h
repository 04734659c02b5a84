// A GoogleTest fixture for tests that run a real blockswapd and client roles
// spawned from the test binary (tests/support/child_process.h): private
// directories, the daemon, the roles' "key value" reports
// (tests/support/role_report.h), and the Admin service's view. Used by the
// integration tests (host backend, with jitter) and the GPU tests.
#ifndef BLOCKSWAP_TESTS_SUPPORT_DAEMON_ROLES_TEST_H_
#define BLOCKSWAP_TESTS_SUPPORT_DAEMON_ROLES_TEST_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {

class DaemonRolesTest : public ::testing::Test {
 protected:
  using Env = std::map<std::string, std::string>;
  // Variables every daemon (`daemon_env`) and every spawned role
  // (`role_env`) gets unless the call sets them itself.
  explicit DaemonRolesTest(Env daemon_env = {}, Env role_env = {})
      : daemon_env_(std::move(daemon_env)), role_env_(std::move(role_env)) {}

  void SetUp() override {
    auto dirs = ScratchDirs::Create();
    ASSERT_TRUE(dirs.ok()) << dirs.status();
    dirs_ = *std::move(dirs);
  }

  void StartDaemon(DaemonFlags flags = {}) {
    flags.env.insert(daemon_env_.begin(), daemon_env_.end());  // keeps the caller's
    auto daemon = DaemonProcess::Start(*dirs_, std::move(flags));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
  }

  std::string ReportPath(const std::string& name) const {
    return dirs_->temp_dir() + "/" + name + ".report";
  }
  ReportLines Report(const std::string& name) const { return ReadRoleReport(ReportPath(name)); }
  // Everything the role reported (the last value of each key), for messages.
  std::string Describe(const std::string& name) const {
    std::string text;
    for (const auto& [key, values] : Report(name)) absl::StrAppend(&text, key, "=", values.back(), " ");
    return text.empty() ? "(nothing)" : text;
  }

  // Spawns `role` with --socket, --report and --name added.
  ChildProcess Spawn(const std::string& role, const std::string& name,
                     std::vector<std::string> args, Env env = {}) {
    args.push_back("--socket=" + dirs_->socket_path());
    args.push_back("--report=" + ReportPath(name));
    args.push_back("--name=" + name);
    env.insert(role_env_.begin(), role_env_.end());
    auto child = ChildProcess::Spawn(role, {.args = std::move(args), .env = std::move(env)});
    EXPECT_TRUE(child.ok()) << child.status();
    return *std::move(child);
  }

  // The exit code of a spawned role, or -1 (and a failure saying what it had
  // reported) when it did not end within `timeout` (it is killed then).
  int Finish(ChildProcess& child, const std::string& name,
             absl::Duration timeout = absl::Seconds(120)) {
    absl::StatusOr<int> code = child.Wait(timeout);
    if (!code.ok()) {
      ADD_FAILURE() << name << " did not finish within " << timeout << " (killed): "
                    << code.status() << "; it reported: " << Describe(name);
      return -1;
    }
    return *code;
  }

  // Runs a role to its end and returns its exit code.
  int Run(const std::string& role, const std::string& name, std::vector<std::string> args,
          Env env = {}) {
    ChildProcess child = Spawn(role, name, std::move(args), std::move(env));
    return Finish(child, name);
  }

  // Waits until the role's report has `key`.
  bool AwaitReport(const std::string& name, const std::string& key,
                   absl::Duration timeout = absl::Seconds(30)) {
    for (absl::Time until = absl::Now() + timeout; absl::Now() < until;) {
      if (Report(name).contains(key)) return true;
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

 private:
  const Env daemon_env_;
  const Env role_env_;
};

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_DAEMON_ROLES_TEST_H_
