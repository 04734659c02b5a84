// What a test's children hold of it (stdio and what they are given), and
// what a test leaves behind when it is killed (a ctest timeout): its roles
// and the daemons it started end with it.
#include "tests/support/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "shared/base/unique_fd.h"
#include "tests/support/daemon_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/open_descriptors.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {
namespace {

int RunSleeper(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  RoleReport(args.Str("report")).Add("pid", absl::StrCat(::getpid()));
  while (true) ::pause();
}
BLOCKSWAP_CHILD_ROLE("child-process-sleeper", RunSleeper);

// Spawns what the test asks for (a sleeper role, or a daemon), reports its
// pid, and waits to be killed.
int RunSpawner(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  std::unique_ptr<ScratchDirs> dirs;
  std::unique_ptr<DaemonProcess> daemon;
  std::optional<ChildProcess> sleeper;
  if (args.Str("spawn") == "daemon") {
    absl::StatusOr<std::unique_ptr<ScratchDirs>> made = ScratchDirs::Create();
    if (!made.ok()) return 1;
    dirs = std::move(*made);
    absl::StatusOr<std::unique_ptr<DaemonProcess>> started = DaemonProcess::Start(*dirs);
    if (!started.ok()) return 1;
    daemon = std::move(*started);
    // Killed, this process never runs the destructor that removes them:
    // the test does, once the daemon is gone.
    report.Add("temp_dir", dirs->temp_dir());
    report.Add("shm_dir", dirs->shm_dir());
    report.Add("pid", absl::StrCat(daemon->pid()));
  } else {
    absl::StatusOr<ChildProcess> spawned =
        ChildProcess::Spawn("child-process-sleeper", {.args = {"--report=" + args.Str("report")}});
    if (!spawned.ok()) return 1;
    sleeper.emplace(std::move(*spawned));
  }
  while (true) ::pause();
}
BLOCKSWAP_CHILD_ROLE("child-process-spawner", RunSpawner);

// The pid a role wrote to `report`, once it has (0 after 20 s without).
pid_t AwaitReportedPid(const std::string& report) {
  for (absl::Time until = absl::Now() + absl::Seconds(20); absl::Now() < until;
       absl::SleepFor(absl::Milliseconds(10))) {
    const double reported = NumberValue(ReadRoleReport(report), "pid");
    if (reported > 0) return static_cast<pid_t>(reported);
  }
  return 0;
}

// Kills a spawner that started `what`, and expects what it started to be
// gone soon after (it is init's child then: watched through a pidfd).
void ExpectGoneWithItsParent(const std::string& what) {
  const std::string report =
      absl::StrCat(::testing::TempDir(), "/spawner-", what, "-", ::getpid(), ".report");
  ::unlink(report.c_str());
  absl::StatusOr<ChildProcess> spawner = ChildProcess::Spawn(
      "child-process-spawner", {.args = {"--report=" + report, "--spawn=" + what}});
  ASSERT_TRUE(spawner.ok()) << spawner.status();
  const pid_t pid = AwaitReportedPid(report);
  ASSERT_GT(pid, 0) << "the spawner never reported its child's pid";
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  ASSERT_TRUE(pidfd.valid()) << "the " << what << " exited on its own";
  spawner->Kill(SIGKILL);
  ASSERT_TRUE(spawner->Wait(absl::Seconds(10)).ok());
  pollfd pfd{pidfd.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 10'000), 1)
      << "the " << what << " (pid " << pid << ") outlived the process that spawned it by 10 s";
  if (pfd.revents == 0) ::kill(pid, SIGKILL);
  const ReportLines reported = ReadRoleReport(report);
  for (const char* key : {"temp_dir", "shm_dir"}) {
    if (std::string dir = FirstValue(reported, key); !dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
  ::unlink(report.c_str());
}

// A descriptor this process opened without close-on-exec stays here: a
// child holds stdio and what it is given, no more.
TEST(ChildProcessTest, AChildHoldsOnlyWhatItIsGiven) {
  int leaky[2];
  ASSERT_EQ(::pipe(leaky), 0);
  UniqueFd leaky_read(leaky[0]), leaky_write(leaky[1]);
  int given[2];
  ASSERT_EQ(::pipe2(given, O_CLOEXEC), 0);
  UniqueFd given_read(given[0]), given_write(given[1]);
  const std::string report =
      absl::StrCat(::testing::TempDir(), "/only-given-", ::getpid(), ".report");
  ::unlink(report.c_str());
  absl::StatusOr<ChildProcess> sleeper =
      ChildProcess::Spawn("child-process-sleeper",
                          {.args = {"--report=" + report}, .inherit = {{given_read.get(), 5}}});
  ASSERT_TRUE(sleeper.ok()) << sleeper.status();
  const pid_t pid = AwaitReportedPid(report);
  ASSERT_GT(pid, 0) << "the sleeper never reported its pid";
  const std::map<int, std::string> mine = OpenDescriptors(::getpid());
  const std::map<int, std::string> its = OpenDescriptors(pid);
  ASSERT_FALSE(its.empty());
  ASSERT_TRUE(its.contains(5)) << "the child lost the descriptor it was given";
  EXPECT_EQ(its.at(5), mine.at(given_read.get()));
  for (int leaked : {leaky_read.get(), leaky_write.get()}) {
    for (const auto& [fd, target] : its) {
      EXPECT_NE(target, mine.at(leaked)) << "the child holds fd " << fd << ", this process's fd "
                                         << leaked << ", which it was not given";
    }
  }
  sleeper->Kill(SIGKILL);
  ::unlink(report.c_str());
}

TEST(ChildProcessTest, ARoleEndsWithTheProcessThatSpawnedIt) { ExpectGoneWithItsParent("role"); }

TEST(ChildProcessTest, ADaemonEndsWithTheTestThatStartedIt) { ExpectGoneWithItsParent("daemon"); }

}  // namespace
}  // namespace blockswap::testing
