// A GoogleTest fixture for tests that run a real blockswapd and client roles
// spawned from the test binary (tests/support/child_process.h): private
// directories, the daemon, the roles' "key value" reports
// (tests/support/role_report.h), and the Admin service's view. Used by the
// integration tests (host backend, with jitter) and the GPU tests.
#ifndef BLOCKSWAP_TESTS_SUPPORT_DAEMON_ROLES_TEST_H_
#define BLOCKSWAP_TESTS_SUPPORT_DAEMON_ROLES_TEST_H_

#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

  // A daemon that aborted (a host-backend lifetime check, say: its stderr
  // has the line) fails the test even when nothing asked it anything after.
  void TearDown() override {
    if (daemon_ == nullptr) return;
    if (std::optional<int> code = daemon_->Exited(); code.has_value() && *code == 128 + SIGABRT) {
      ADD_FAILURE() << "blockswapd aborted during the test (its stderr says why)";
    }
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
    for (const auto& [key, values] : Report(name))
      absl::StrAppend(&text, key, "=", values.back(), " ");
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
      ADD_FAILURE() << name << " did not finish within " << timeout
                    << " (killed): " << code.status() << "; it reported: " << Describe(name);
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
    return AdminCall<v1::ClientsRequest, v1::ClientsReply>(&Stub::Clients);
  }
  v1::ModelsReply Models() { return AdminCall<v1::ModelsRequest, v1::ModelsReply>(&Stub::Models); }
  v1::StatsReply Stats() { return AdminCall<v1::StatsRequest, v1::StatsReply>(&Stub::Stats); }
  v1::StatusReply Status() { return AdminCall<v1::StatusRequest, v1::StatusReply>(&Stub::Status); }
  v1::ResidencyReply Residency() {
    return AdminCall<v1::ResidencyRequest, v1::ResidencyReply>(&Stub::Residency);
  }

  using Stub = v1::Admin::Stub;
  // One Admin call with an empty request; a failed call fails the test.
  template <typename Request, typename Reply>
  Reply AdminCall(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Reply*)) {
    Reply reply;
    grpc::ClientContext context;
    std::unique_ptr<Stub> stub = daemon_->Admin();
    grpc::Status status = ((*stub).*method)(&context, Request(), &reply);
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
