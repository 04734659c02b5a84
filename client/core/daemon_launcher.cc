#include "client/core/daemon_launcher.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"
#include "shared/build_info/build_info.h"

namespace blockswap::client {
namespace {

// The directory of the object (shared library or executable) holding this code.
absl::StatusOr<std::string> OwnDirectory() {
  Dl_info info{};
  std::string object;
  if (::dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) != 0 && info.dli_fname != nullptr) {
    object = info.dli_fname;
  }
  char resolved[PATH_MAX];
  // dladdr names the main executable as it was invoked (maybe relative).
  if (object.empty() || object.find('/') == std::string::npos ||
      ::realpath(object.c_str(), resolved) == nullptr) {
    ssize_t n = ::readlink("/proc/self/exe", resolved, sizeof(resolved) - 1);
    if (n <= 0) return ErrnoStatus(errno, "finding the client library's own path");
    resolved[n] = '\0';
  }
  std::string path = resolved;
  return path.substr(0, path.rfind('/'));
}

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The value of a `--version` line "KEY: value" or "blockswapd VERSION".
std::string VersionField(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, key)) return std::string(absl::StripAsciiWhitespace(line));
  }
  return "";
}

// A message the launcher's two children send up the report pipe.
struct Report {
  enum Kind : int32_t { kPid = 1, kSetsidFailed, kForkFailed, kExecFailed } kind;
  int32_t value;  // the pid, or errno
};

void SendReport(int fd, Report::Kind kind, int32_t value) {
  Report report{kind, value};
  (void)!::write(fd, &report, sizeof(report));  // one write under PIPE_BUF: atomic
}

// Closes every descriptor from `first` on (async-signal-safe).
void CloseFrom(int first) {
  if (::close_range(first, ~0U, 0) == 0) return;
  for (int fd = first; fd < 65536; ++fd) ::close(fd);
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

absl::StatusOr<std::string> FindDaemonBinary() {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::string own, OwnDirectory());
  std::vector<std::string> looked;
  for (const char* relative : {"/blockswapd", "/../bin/blockswapd", "/../../bin/blockswapd"}) {
    std::string candidate = own + relative;
    char resolved[PATH_MAX];
    if (::realpath(candidate.c_str(), resolved) != nullptr && IsExecutableFile(resolved)) {
      return std::string(resolved);
    }
    looked.push_back(candidate);
  }
  return absl::NotFoundError(absl::StrCat(
      "no blockswapd beside the client library (looked at ", absl::StrJoin(looked, ", "),
      "); install blockswapd with the library, or run the system service"));
}

absl::Status CheckDaemonVersion(const std::string& binary) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return ErrnoStatus(errno, "creating a pipe");
  UniqueFd read_end(out[0]);
  UniqueFd write_end(out[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
  std::vector<std::string> args = {binary, "--version"};
  std::vector<char*> argv = Pointers(args);
  pid_t pid = 0;
  int spawned = ::posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  write_end.Reset();
  if (spawned != 0) return ErrnoStatus(spawned, absl::StrCat("running ", binary, " --version"));
  std::string text;
  char buffer[1024];
  for (ssize_t n; (n = ::read(read_end.get(), buffer, sizeof(buffer))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
  }
  const BuildInfo& mine = ThisBuild();
  const std::string version = VersionField(text, "blockswapd ");
  const std::string abi = VersionField(text, "C ABI version:");
  if (version != mine.version || abi != absl::StrCat(mine.abi_version)) {
    return absl::FailedPreconditionError(absl::StrCat(
        binary, " is version '", version, "' (C ABI version '", abi,
        "'), this client library is version ", mine.version, " (C ABI version ", mine.abi_version,
        "): install the blockswapd of the library's own build beside it"));
  }
  return absl::OkStatus();
}

std::vector<std::string> DaemonEnvironment(char** environment) {
  std::vector<std::string> out;
  for (char** entry = environment; entry != nullptr && *entry != nullptr; ++entry) {
    absl::string_view variable(*entry);
    bool per_rank = false;
    for (const char* name : kPerRankDeviceVariables) {
      per_rank |= absl::StartsWith(variable, absl::StrCat(name, "="));
    }
    if (!per_rank) out.emplace_back(variable);
  }
  return out;
}

absl::StatusOr<pid_t> LaunchDetached(const DetachedLaunch& launch) {
  UniqueFd log(
      ::open(launch.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!log.valid()) return ErrnoStatus(errno, absl::StrCat("opening the log ", launch.log_path));
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null.valid()) return ErrnoStatus(errno, "opening /dev/null");
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoStatus(errno, "creating a pipe");
  UniqueFd report_read(pipe_fds[0]);
  UniqueFd report_write(pipe_fds[1]);

  // Everything the children use is prepared here: between fork and exec
  // only async-signal-safe calls (this process may have many threads).
  std::vector<std::string> args = {launch.binary};
  args.insert(args.end(), launch.arguments.begin(), launch.arguments.end());
  std::vector<std::string> env = launch.environment;
  std::vector<char*> argv = Pointers(args);
  std::vector<char*> envp = Pointers(env);
  const int log_fd = log.get();
  const int null_fd = null.get();
  const int report_fd = report_write.get();
  constexpr int kReportFdInChild = 3;

  // _Fork: no atfork handlers (torch's and gRPC's) run in the children.
  pid_t leader = ::_Fork();
  if (leader < 0) return ErrnoStatus(errno, "forking to start blockswapd");
  if (leader == 0) {
    if (::setsid() < 0) {
      SendReport(report_fd, Report::kSetsidFailed, errno);
      ::_exit(1);
    }
    pid_t daemon = ::_Fork();
    if (daemon < 0) {
      SendReport(report_fd, Report::kForkFailed, errno);
      ::_exit(1);
    }
    if (daemon > 0) {
      SendReport(report_fd, Report::kPid, daemon);
      ::_exit(0);
    }
    // The daemon: a clean signal state, stdio, and no inherited descriptor
    // but the report pipe (close-on-exec: it tells the caller exec worked).
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int signal_number : {SIGPIPE, SIGCHLD, SIGINT, SIGTERM, SIGHUP}) {
      ::signal(signal_number, SIG_DFL);
    }
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::dup3(report_fd, kReportFdInChild, O_CLOEXEC);
    CloseFrom(kReportFdInChild + 1);
    ::umask(077);
    ::execve(argv[0], argv.data(), envp.data());
    SendReport(kReportFdInChild, Report::kExecFailed, errno);
    ::_exit(127);
  }
  report_write.Reset();
  int leader_status = 0;
  while (::waitpid(leader, &leader_status, 0) < 0 && errno == EINTR) {
  }
  pid_t daemon = 0;
  absl::Status failure;
  Report report{};
  for (ssize_t n; (n = ::read(report_read.get(), &report, sizeof(report))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(report))) break;
    switch (report.kind) {
      case Report::kPid:
        daemon = report.value;
        break;
      case Report::kSetsidFailed:
        failure = ErrnoStatus(report.value, "setsid for blockswapd");
        break;
      case Report::kForkFailed:
        failure = ErrnoStatus(report.value, "forking blockswapd");
        break;
      case Report::kExecFailed:
        failure = ErrnoStatus(report.value, absl::StrCat("executing ", launch.binary));
        break;
    }
  }
  if (!failure.ok()) return failure;
  if (daemon <= 0) return absl::InternalError("blockswapd's launcher exited without reporting");
  return daemon;
}

}  // namespace blockswap::client
