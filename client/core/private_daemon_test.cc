// The private per-user daemon: its directory's checks, the binary's version
// check, the detached start, the logind RemoveIPC detection, and, against
// the blockswapd built beside this test, a start by Connection::Connect with
// no socket configured and the daemon's idle exit.
#include "client/core/private_daemon.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/core/connection.h"
#include "client/core/daemon_launcher.h"
#include "client/core/remove_ipc.h"
#include "client/core/socket_path.h"
#include "shared/base/env_settings.h"
#include "tests/support/proc_stat.h"
#include "tests/support/read_file.h"

namespace blockswap::client {
namespace {

using ::testing::HasSubstr;

// Sets (or unsets) one environment variable for a test and restores it after.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = ::getenv(name)) saved_ = old;
    Set(value);
  }
  ~ScopedEnvironment() { Set(saved_); }

 private:
  void Set(const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name_, value->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  const char* name_;
  std::optional<std::string> saved_;
};

using ::blockswap::testing::ProcStatFields;
using ::blockswap::testing::ReadFile;

void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

class PrivateDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/dev/shm/blockswap-test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    scratch_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(scratch_); }

  std::string scratch_;
};

TEST_F(PrivateDaemonTest, AnAbsentDirectoryIsCreatedWithMode0700) {
  ::umask(022);
  const std::string dir = scratch_ + "/d";
  ASSERT_TRUE(OpenPrivateDirectory(dir).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
}

TEST_F(PrivateDaemonTest, ADirectoryWithAnotherModeIsRefusedNamingTheMode) {
  const std::string dir = scratch_ + "/d";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  auto opened = OpenPrivateDirectory(dir);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(), HasSubstr("has mode 0755; it must be 0700"));
}

TEST_F(PrivateDaemonTest, ADirectoryOfAnotherOwnerIsRefusedNamingTheOwner) {
  // Root gives a directory of its own to nobody (65534); a user cannot, and
  // a directory of root's (/dev/shm itself) stands in for another user's.
  std::string dir = "/dev/shm";
  uid_t owner = 0;
  if (::geteuid() == 0) {
    dir = scratch_ + "/d";
    owner = 65534;
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chown(dir.c_str(), owner, owner), 0);
  }
  auto opened = OpenPrivateDirectory(dir);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(),
              HasSubstr(absl::StrCat(dir, " belongs to uid ", owner, ", not to this user (uid ",
                                     ::geteuid(), ")")));
}

// A directory pre-created where this user cannot open it: root gives the
// test's directory to itself with mode 0700 and probes as nobody (65534) in
// a child; a user takes its own directory's bits away.
TEST_F(PrivateDaemonTest, AnUnreadablePreCreatedDirectoryIsRefusedNamingTheVariable) {
  ASSERT_EQ(::chmod(scratch_.c_str(), 0755), 0);
  const std::string dir = scratch_ + "/d";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    const bool root = ::geteuid() == 0;
    if (root ? (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)
             : ::chmod(dir.c_str(), 0) != 0) {
      ::_exit(2);
    }
    auto opened = OpenPrivateDirectory(dir);
    const std::string text =
        absl::StrCat(static_cast<int>(opened.status().code()), " ", opened.status().message());
    ssize_t written = ::write(pipe_fds[1], text.data(), text.size());
    ::_exit(written == static_cast<ssize_t>(text.size()) ? 0 : 3);
  }
  ::close(pipe_fds[1]);
  std::string text;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) text.append(buffer, n);
  ::close(pipe_fds[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  ::chmod(dir.c_str(), 0700);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "the probe could not run";
  EXPECT_THAT(text, HasSubstr(absl::StrCat(static_cast<int>(absl::StatusCode::kFailedPrecondition),
                                           " the private blockswapd's directory ", dir,
                                           " cannot be opened")));
  EXPECT_THAT(text, HasSubstr("$BLOCKSWAP_AUTOSTART_DIR"));
}

TEST_F(PrivateDaemonTest, ASymbolicLinkIsNotFollowed) {
  const std::string target = scratch_ + "/target";
  const std::string link = scratch_ + "/link";
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  auto opened = OpenPrivateDirectory(link);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(), HasSubstr("is not a directory (a symbolic link?)"));
}

TEST_F(PrivateDaemonTest, TheEnvironmentNamesTheDirectoryAndTheIdleExit) {
  ScopedEnvironment dir(EnvName(EnvSetting::kAutostartDir), "/dev/shm/elsewhere");
  ScopedEnvironment idle(EnvName(EnvSetting::kAutostartIdleExit), "7.5");
  auto options = PrivateDaemonOptionsFromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->directory, "/dev/shm/elsewhere");
  EXPECT_EQ(options->idle_exit, absl::Milliseconds(7500));
  EXPECT_EQ(options->socket_path(), "/dev/shm/elsewhere/blockswapd.sock");
}

TEST_F(PrivateDaemonTest, ByDefaultTheDirectoryIsPerUserInDevShm) {
  ScopedEnvironment dir(EnvName(EnvSetting::kAutostartDir), std::nullopt);
  ScopedEnvironment idle(EnvName(EnvSetting::kAutostartIdleExit), std::nullopt);
  auto options = PrivateDaemonOptionsFromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->directory, absl::StrCat("/dev/shm/blockswap-", ::geteuid()));
  EXPECT_EQ(options->idle_exit, absl::Seconds(300));
}

TEST_F(PrivateDaemonTest, ABadIdleExitNamesTheVariable) {
  ScopedEnvironment idle(EnvName(EnvSetting::kAutostartIdleExit), "soon");
  auto options = PrivateDaemonOptionsFromEnvironment();
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.status().message(), HasSubstr("$BLOCKSWAP_AUTOSTART_IDLE_EXIT"));
}

TEST_F(PrivateDaemonTest, TheDaemonBesideThisBinaryIsFoundAndHasItsVersion) {
  auto binary = FindDaemonBinary();
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_THAT(*binary, ::testing::EndsWith("/blockswapd"));
  EXPECT_TRUE(CheckDaemonVersion(*binary).ok()) << CheckDaemonVersion(*binary);
}

TEST_F(PrivateDaemonTest, ADaemonOfAnotherVersionIsRefusedNamingBoth) {
  const std::string fake = scratch_ + "/blockswapd";
  WriteFile(fake, "#!/bin/sh\necho 'blockswapd 0.0.1'\necho 'C ABI version: 1'\n", 0700);
  absl::Status checked = CheckDaemonVersion(fake);
  EXPECT_EQ(checked.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(checked.message(), HasSubstr("is version '0.0.1' (C ABI version '1'), this client "
                                           "library is version "));
}

TEST_F(PrivateDaemonTest, TheDaemonsEnvironmentLosesThePerRankDeviceRestrictions) {
  std::string a = "CUDA_VISIBLE_DEVICES=3", b = "PATH=/bin", c = "HIP_VISIBLE_DEVICES=1",
              d = "CUDA_VISIBLE_DEVICES_X=keep";
  char* environment[] = {a.data(), b.data(), c.data(), d.data(), nullptr};
  EXPECT_THAT(DaemonEnvironment(environment),
              ::testing::ElementsAre("PATH=/bin", "CUDA_VISIBLE_DEVICES_X=keep"));
}

TEST_F(PrivateDaemonTest, ALaunchedProcessIsDetachedAndInheritsOnlyItsStdio) {
  int leaked = ::open("/dev/null", O_RDONLY);  // not close-on-exec
  ASSERT_GE(leaked, 0);
  DetachedLaunch launch;
  launch.binary = "/bin/sh";
  const std::string done = scratch_ + "/done";
  // The shell's own descriptors, listed by a child (no pipe of a command
  // substitution open in the shell meanwhile).
  launch.arguments = {"-c", absl::StrCat("echo ppid=$PPID sid=$(cut -d' ' -f6 /proc/$$/stat); "
                                         "echo fds; ls /proc/$$/fd; echo end; touch ",
                                         done)};
  launch.environment = {"PATH=/bin:/usr/bin"};
  launch.log_path = scratch_ + "/log";
  auto pid = LaunchDetached(launch);
  ::close(leaked);
  ASSERT_TRUE(pid.ok()) << pid.status();
  for (absl::Time until = absl::Now() + absl::Seconds(10);
       !std::filesystem::exists(done) && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const std::string log = ReadFile(launch.log_path);
  EXPECT_THAT(log, ::testing::Not(HasSubstr(absl::StrCat("ppid=", ::getpid(), " "))));
  EXPECT_THAT(log, ::testing::Not(HasSubstr(absl::StrCat("sid=", ::getsid(0), "\n"))));
  EXPECT_THAT(log, HasSubstr("fds\n0\n1\n2\nend\n")) << "only stdio: no descriptor of the caller";
}

TEST_F(PrivateDaemonTest, AMissingBinaryIsTheLaunchError) {
  DetachedLaunch launch{.binary = scratch_ + "/none", .log_path = scratch_ + "/log"};
  auto pid = LaunchDetached(launch);
  EXPECT_THAT(pid.status().message(), HasSubstr(absl::StrCat("executing ", scratch_, "/none")));
}

TEST(RemoveIpcTest, LogindsDefaultIsYesAndTheLastLoginAssignmentWins) {
  EXPECT_TRUE(RemoveIpcEnabled({""}));
  EXPECT_TRUE(RemoveIpcEnabled({"[Login]\n#RemoveIPC=no\n"}));
  EXPECT_FALSE(RemoveIpcEnabled({"[Login]\nRemoveIPC=no\n"}));
  EXPECT_TRUE(RemoveIpcEnabled({"[Login]\nRemoveIPC=no\n", "[Login]\nRemoveIPC = yes\n"}));
  EXPECT_TRUE(RemoveIpcEnabled({"[Other]\nRemoveIPC=no\n"}));
}

TEST_F(PrivateDaemonTest, RemoveIpcIsReportedOnlyWhereLogindRunsForARegularUser) {
  const std::string& root = scratch_;
  EXPECT_EQ(RemoveIpcWarning(1000, root), "") << "no logind";
  std::filesystem::create_directories(root + "/run/systemd/seats");
  std::filesystem::create_directories(root + "/etc/systemd/logind.conf.d");
  EXPECT_THAT(RemoveIpcWarning(1000, root), HasSubstr("RemoveIPC=yes"));
  EXPECT_EQ(RemoveIpcWarning(999, root), "") << "a system user";
  WriteFile(root + "/etc/systemd/logind.conf.d/50-keep.conf", "[Login]\nRemoveIPC=no\n");
  EXPECT_EQ(RemoveIpcWarning(1000, root), "");
}

// Connection::Connect with no socket configured, on the blockswapd beside
// this binary. The system socket must not answer (skipped where it does).
class AutostartTest : public PrivateDaemonTest {
 protected:
  void SetUp() override {
    PrivateDaemonTest::SetUp();
    auto system = SocketAnswers(kDefaultSocketPath);
    if (!system.ok() || *system) GTEST_SKIP() << "a system blockswapd answers here";
    dir_ = scratch_ + "/private";
  }
  void TearDown() override {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
    PrivateDaemonTest::TearDown();
  }
  // The running daemon: the process with the private socket on its command
  // line (0: none).
  pid_t DaemonPid() const {
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string cmdline = ReadFile(entry.path().string() + "/cmdline");
      if (cmdline.find("--socket=" + dir_ + "/blockswapd.sock") == std::string::npos) continue;
      const pid_t pid = std::stoi(entry.path().filename().string());
      const std::vector<std::string> stat = ProcStatFields(pid);
      if (!stat.empty() && stat[0] == "Z") continue;  // exited, not yet reaped
      return pid;
    }
    return 0;
  }
  // Whether the daemon (pid_) has exited within `within`.
  bool DaemonGone(absl::Duration within) {
    for (absl::Time until = absl::Now() + within; absl::Now() < until;) {
      if (::kill(pid_, 0) != 0 && errno == ESRCH) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  std::string dir_;
  pid_t pid_ = 0;
  ScopedEnvironment no_socket_{EnvName(EnvSetting::kSocket), std::nullopt};
  ScopedEnvironment autostart_{EnvName(EnvSetting::kAutostart), std::nullopt};
};

TEST_F(AutostartTest, WithNoSocketConfiguredAPrivateDaemonIsStartedAndExitsWhenIdle) {
  ScopedEnvironment dir(EnvName(EnvSetting::kAutostartDir), dir_);
  ScopedEnvironment idle(EnvName(EnvSetting::kAutostartIdleExit), "1");
  ScopedEnvironment device_mask("CUDA_VISIBLE_DEVICES", "7");
  {
    auto connection = Connection::Connect("", "autostart-test");
    ASSERT_TRUE(connection.ok()) << connection.status();
    EXPECT_EQ((*connection)->socket_path(), dir_ + "/blockswapd.sock");
    const std::string log = ReadFile(dir_ + "/blockswapd.log");
    EXPECT_THAT(log, HasSubstr("ready on " + dir_ + "/blockswapd.sock"));
    EXPECT_THAT(log, HasSubstr("masters in " + dir_ + "/masters"));
    pid_ = DaemonPid();
    ASSERT_GT(pid_, 0) << "no blockswapd with the private socket runs";
    EXPECT_THAT(ReadFile(absl::StrCat("/proc/", pid_, "/environ")),
                ::testing::Not(HasSubstr("CUDA_VISIBLE_DEVICES=")));
    // A second connection joins the same daemon.
    auto second = Connection::Connect("", "autostart-test-2");
    ASSERT_TRUE(second.ok()) << second.status();
    absl::SleepFor(absl::Seconds(2));  // past the idle exit, with sessions attached
    EXPECT_EQ(::kill(pid_, 0), 0) << "it exited with sessions attached";
  }
  EXPECT_TRUE(DaemonGone(absl::Seconds(15))) << ReadFile(dir_ + "/blockswapd.log");
  EXPECT_THAT(ReadFile(dir_ + "/blockswapd.log"), HasSubstr("(--idle-exit): shutting down"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/blockswapd.sock"));
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/masters")) << "masters stay for the next";
  pid_ = 0;
}

TEST_F(AutostartTest, AfterThePrivateDaemonDiesReconnectStartsANewOne) {
  ScopedEnvironment dir(EnvName(EnvSetting::kAutostartDir), dir_);
  auto connection = Connection::Connect("", "autostart-test");
  ASSERT_TRUE(connection.ok()) << connection.status();
  pid_ = DaemonPid();
  ASSERT_GT(pid_, 0);
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  ASSERT_TRUE(DaemonGone(absl::Seconds(10)));
  const pid_t dead = pid_;
  absl::Status reconnected = (*connection)->Reconnect(absl::Seconds(20));
  ASSERT_TRUE(reconnected.ok()) << reconnected;
  pid_ = DaemonPid();
  EXPECT_GT(pid_, 0);
  EXPECT_NE(pid_, dead);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/blockswapd.log.1")) << "the dead one's log stays";
}

TEST_F(AutostartTest, AConfiguredSocketThatDoesNotAnswerIsAnErrorAndStartsNothing) {
  ScopedEnvironment dir(EnvName(EnvSetting::kAutostartDir), dir_);
  auto connection = Connection::Connect(scratch_ + "/absent.sock", "autostart-test");
  EXPECT_EQ(connection.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(connection.status().message(), HasSubstr(scratch_ + "/absent.sock"));
  ScopedEnvironment from_environment(EnvName(EnvSetting::kSocket), scratch_ + "/absent.sock");
  connection = Connection::Connect("", "autostart-test");
  EXPECT_EQ(connection.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(std::filesystem::exists(dir_)) << "no private daemon for a configured socket";
}

TEST_F(AutostartTest, AutostartZeroLeavesOnlyTheSystemDaemon) {
  ScopedEnvironment dir(EnvName(EnvSetting::kAutostartDir), dir_);
  ScopedEnvironment off(EnvName(EnvSetting::kAutostart), "0");
  auto connection = Connection::Connect("", "autostart-test");
  EXPECT_EQ(connection.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(connection.status().message(), HasSubstr(kDefaultSocketPath));
  EXPECT_THAT(connection.status().message(),
              HasSubstr("BLOCKSWAP_AUTOSTART=0, so no private blockswapd is started"));
  EXPECT_FALSE(std::filesystem::exists(dir_));
}

TEST_F(AutostartTest, APrivateDirectoryWithAnotherModeIsRefusedAndNothingStarts) {
  ScopedEnvironment dir(EnvName(EnvSetting::kAutostartDir), dir_);
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0750), 0);
  auto connection = Connection::Connect("", "autostart-test");
  EXPECT_EQ(connection.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(connection.status().message(), HasSubstr("has mode 0750; it must be 0700"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/blockswapd.sock"));
}

}  // namespace
}  // namespace blockswap::client
