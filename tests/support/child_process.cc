#include "tests/support/child_process.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

extern char** environ;

namespace blockswap::testing {
namespace {

constexpr char kChildFlag[] = "--blockswap-child";
// The pid of the process that spawned a role, so that the role ends with it:
// a test killed by its timeout must not leave clients streaming (and a
// daemon serving them) for ever, skewing whatever runs next.
constexpr char kParentPidVariable[] = "BLOCKSWAP_TEST_PARENT_PID";
// Ends a program spawned from the test's main thread with the test:
// PR_SET_PDEATHSIG fires when the spawning *thread* exits, so a child of any
// other thread goes without.
constexpr char kSetpriv[] = "/usr/bin/setpriv";

// Kills this role when the process that spawned it has exited. The variable
// is dropped, so that anything this role starts by other means does not
// watch its grandparent.
void EndWithParent() {
  const char* value = std::getenv(kParentPidVariable);
  pid_t parent = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &parent) || parent <= 0) return;
  ::unsetenv(kParentPidVariable);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, parent, 0));
  if (pidfd < 0) {
    if (errno == ESRCH) ::raise(SIGKILL);  // it is gone already
    return;
  }
  std::thread([pidfd] {
    pollfd pfd{pidfd, POLLIN, 0};
    while (::poll(&pfd, 1, -1) < 0 && errno == EINTR) {
    }
    ::raise(SIGKILL);
  }).detach();
}

bool OnMainThread() { return ::syscall(SYS_gettid) == ::getpid(); }

std::map<std::string, ChildRole>& Roles() {
  static auto* roles = new std::map<std::string, ChildRole>();
  return *roles;
}

}  // namespace

bool RegisterChildRole(const char* name, ChildRole role) {
  Roles()[name] = role;
  return true;
}

int MaybeRunChildRole(int argc, char** argv) {
  if (argc < 3 || std::strcmp(argv[1], kChildFlag) != 0) return -1;
  auto it = Roles().find(argv[2]);
  if (it == Roles().end()) {
    std::cerr << "unknown child role " << argv[2] << "\n";
    return 2;
  }
  EndWithParent();
  return it->second(std::vector<std::string>(argv + 3, argv + argc));
}

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const std::string& role, SpawnOptions options) {
  std::vector<std::string> args = {kChildFlag, role};
  args.insert(args.end(), options.args.begin(), options.args.end());
  options.args = std::move(args);
  options.env.emplace(kParentPidVariable, absl::StrCat(::getpid()));
  return SpawnProgram("/proc/self/exe", std::move(options));
}

absl::StatusOr<ChildProcess> ChildProcess::SpawnProgramEndingWithTest(const std::string& path,
                                                                      SpawnOptions options) {
  if (!OnMainThread() || ::access(kSetpriv, X_OK) != 0) {
    return SpawnProgram(path, std::move(options));
  }
  options.args.insert(options.args.begin(), {"--pdeathsig", "KILL", "--", path});
  return SpawnProgram(kSetpriv, std::move(options));
}

absl::StatusOr<ChildProcess> ChildProcess::SpawnProgram(const std::string& path,
                                                        SpawnOptions options) {
  std::vector<std::string> args = {path};
  args.insert(args.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string key = entry.substr(0, entry.find('='));
    if (!options.env.contains(key)) env_strings.push_back(std::move(entry));
  }
  for (const auto& [key, value] : options.env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // A child holds stdio and what it is given, nothing else of this process:
  // a descriptor a library opened without close-on-exec (gRPC's wakeup pipe)
  // would otherwise pass into every daemon the test starts, and read as one
  // the daemon opened.
  int given_above = STDERR_FILENO;
  for (auto [from, to] : options.inherit) {
    posix_spawn_file_actions_adddup2(&actions, from, to);
    given_above = std::max(given_above, to);
  }
  for (int fd = STDERR_FILENO + 1; fd < given_above; ++fd) {
    const bool given =
        std::any_of(options.inherit.begin(), options.inherit.end(),
                    [fd](std::pair<int, int> inherited) { return inherited.second == fd; });
    if (!given) posix_spawn_file_actions_addclose(&actions, fd);  // EBADF is ignored
  }
  posix_spawn_file_actions_addclosefrom_np(&actions, given_above + 1);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return ErrnoStatus(rc, absl::StrCat("spawning ", path));
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    int error = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return ErrnoStatus(error, "pidfd_open of a child");
  }
  return ChildProcess(pid, UniqueFd(pidfd));
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::optional<int> ChildProcess::TryWait() {
  if (pid_ <= 0) return std::nullopt;
  int wstatus = 0;
  if (::waitpid(pid_, &wstatus, WNOHANG) != pid_) return std::nullopt;
  pid_ = -1;
  return WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : WEXITSTATUS(wstatus);
}

void ChildProcess::Kill(int signal) {
  if (pid_ > 0) ::kill(pid_, signal);
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("child already reaped");
  pollfd pfd{pidfd_.get(), POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return absl::DeadlineExceededError(
        absl::StrCat("child did not exit within ", absl::FormatDuration(timeout), "; killed"));
  }
  int wstatus = 0;
  if (::waitpid(pid_, &wstatus, 0) < 0) return ErrnoStatus(errno, "waitpid");
  pid_ = -1;
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return WEXITSTATUS(wstatus);
}

}  // namespace blockswap::testing
