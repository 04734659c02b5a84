#include "client/core/private_daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/core/daemon_launcher.h"
#include "client/core/socket_path.h"
#include "shared/base/env_settings.h"
#include "shared/base/status.h"

namespace blockswap::client {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(20);
constexpr size_t kLogTailBytes = 2000;

std::string OctalMode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// flock with a deadline (a holder that hangs must not hang every rank).
absl::Status LockUntil(const UniqueFd& lock, int operation, absl::Time deadline,
                       const std::string& path) {
  while (::flock(lock.get(), operation | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      return ErrnoStatus(errno, absl::StrCat("locking ", path));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "timed out waiting for ", path,
          " (another process holds it while it starts or attaches to the private blockswapd)"));
    }
    absl::SleepFor(kPollInterval);
  }
  return absl::OkStatus();
}

std::string LogTail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  if (all.size() > kLogTailBytes) all = "..." + all.substr(all.size() - kLogTailBytes);
  return all.empty() ? "(nothing)" : all;
}

// Waits until the started daemon accepts on `socket`; an error when it exits
// first or the deadline passes, with the end of its log.
absl::Status AwaitSocket(const std::string& socket, pid_t pid, absl::Time deadline,
                         const std::string& log_path) {
  // A pidfd turns readable when the process exits (it is not our child, so
  // waitpid cannot tell); without one (Linux < 5.3), kill(pid, 0).
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  while (true) {
    BLOCKSWAP_ASSIGN_OR_RETURN(bool answers, SocketAnswers(socket));
    if (answers) return absl::OkStatus();
    bool exited = false;
    if (pidfd.valid()) {
      pollfd watch{pidfd.get(), POLLIN, 0};
      exited = ::poll(&watch, 1, static_cast<int>(absl::ToInt64Milliseconds(kPollInterval))) > 0;
    } else {
      exited = ::kill(pid, 0) != 0 && errno == ESRCH;
      absl::SleepFor(kPollInterval);
    }
    if (exited) {
      return absl::FailedPreconditionError(absl::StrCat("the private blockswapd (pid ", pid,
                                                        ") exited at start-up; ", log_path,
                                                        " says:\n", LogTail(log_path)));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the private blockswapd (pid ", pid,
                                                      ") did not answer at ", socket, " in time; ",
                                                      log_path, " says:\n", LogTail(log_path)));
    }
  }
}

absl::StatusOr<pid_t> StartDaemon(const PrivateDaemonOptions& options) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::string binary, FindDaemonBinary());
  BLOCKSWAP_RETURN_IF_ERROR(CheckDaemonVersion(binary));
  const std::string& dir = options.directory;
  const std::string log_path = absl::StrCat(dir, "/", kPrivateLogName);
  // The previous daemon's log stays, once, beside the new one.
  (void)::rename(log_path.c_str(), absl::StrCat(log_path, ".1").c_str());
  DetachedLaunch launch;
  launch.binary = binary;
  // --config=/dev/null: an installed system service's config is not this
  // daemon's (its socket, allow list, metrics port).
  launch.arguments = {"--config=/dev/null", absl::StrCat("--socket=", options.socket_path()),
                      absl::StrCat("--shm-prefix=", dir, "/", kPrivateMastersName),
                      absl::StrCat("--idle-exit=", absl::ToDoubleSeconds(options.idle_exit)),
                      absl::StrCat("--idle-exit-lock=", dir, "/", kPrivateLockName)};
  launch.environment = DaemonEnvironment(environ);
  launch.log_path = log_path;
  return LaunchDetached(launch);
}

}  // namespace

std::string PrivateDaemonOptions::socket_path() const {
  return absl::StrCat(directory, "/", kPrivateSocketName);
}

bool AutostartEnabled() { return EnvValue(EnvSetting::kAutostart) != "0"; }

absl::StatusOr<PrivateDaemonOptions> PrivateDaemonOptionsFromEnvironment() {
  PrivateDaemonOptions options;
  if (const std::optional<std::string> dir = EnvValue(EnvSetting::kAutostartDir)) {
    if ((*dir)[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          "$", EnvName(EnvSetting::kAutostartDir), " must be an absolute path, got '", *dir, "'"));
    }
    options.directory = *dir;
  } else {
    options.directory = absl::StrCat("/dev/shm/blockswap-", ::geteuid());
  }
  if (const std::optional<std::string> idle = EnvValue(EnvSetting::kAutostartIdleExit)) {
    double seconds = 0;
    if (!absl::SimpleAtod(*idle, &seconds) || !std::isfinite(seconds) || seconds < 0 ||
        seconds > 7 * 24 * 3600) {
      return absl::InvalidArgumentError(absl::StrCat("$", EnvName(EnvSetting::kAutostartIdleExit),
                                                     " must be seconds between 0 and 604800, got '",
                                                     *idle, "'"));
    }
    options.idle_exit = absl::Seconds(seconds);
  }
  return options;
}

absl::StatusOr<UniqueFd> OpenPrivateDirectory(const std::string& path) {
  bool created = ::mkdir(path.c_str(), 0700) == 0;
  if (!created && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("creating the private blockswapd's directory ", path));
  }
  UniqueFd directory(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!directory.valid()) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat("the private blockswapd's directory ", path,
                       " is not a directory (a symbolic link?); remove it, or name another with $",
                       EnvName(EnvSetting::kAutostartDir)));
    }
    if (errno == EACCES || errno == EPERM) {
      // Pre-created by someone else, or with its owner's bits taken away.
      const int error = errno;
      struct stat st {};
      std::string whose;
      if (::lstat(path.c_str(), &st) == 0) {
        whose = absl::StrCat(" (it belongs to uid ", st.st_uid, ", mode ", OctalMode(st.st_mode),
                             ")");
      }
      return absl::FailedPreconditionError(
          absl::StrCat("the private blockswapd's directory ", path, " cannot be opened by uid ",
                       ::geteuid(), ": ", std::strerror(error), whose,
                       "; remove it, or name another with $", EnvName(EnvSetting::kAutostartDir)));
    }
    return ErrnoStatus(errno, absl::StrCat("opening the private blockswapd's directory ", path));
  }
  // A umask may have taken owner bits from the directory just created.
  if (created && ::fchmod(directory.get(), 0700) != 0) {
    return ErrnoStatus(errno, absl::StrCat("setting mode 0700 on ", path));
  }
  struct stat st {};
  if (::fstat(directory.get(), &st) != 0)
    return ErrnoStatus(errno, absl::StrCat("fstat of ", path));
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the private blockswapd's directory ", path, " belongs to uid ", st.st_uid,
                     ", not to this user (uid ", ::geteuid(),
                     "): refusing to use it (another user's socket "
                     "and masters); remove it, or name another with $",
                     EnvName(EnvSetting::kAutostartDir)));
  }
  if ((st.st_mode & 07777) != 0700) {
    return absl::FailedPreconditionError(
        absl::StrCat("the private blockswapd's directory ", path, " has mode ",
                     OctalMode(st.st_mode), "; it must be 0700 so that only uid ", ::geteuid(),
                     " reaches its socket and masters "
                     "(chmod 0700 ",
                     path, ")"));
  }
  return directory;
}

absl::StatusOr<PrivateDaemonUse> AttachToPrivateDaemon(
    const PrivateDaemonOptions& options,
    absl::FunctionRef<absl::Status(const std::string& socket_path)> attach) {
  const absl::Time deadline = absl::Now() + options.start_timeout;
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd directory, OpenPrivateDirectory(options.directory));
  const std::string lock_path = absl::StrCat(options.directory, "/", kPrivateLockName);
  UniqueFd lock(
      ::openat(directory.get(), kPrivateLockName, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock.valid()) return ErrnoStatus(errno, absl::StrCat("opening ", lock_path));
  const std::string socket = options.socket_path();

  // Shared: attach to the daemon that answers; its idle exit waits meanwhile.
  BLOCKSWAP_RETURN_IF_ERROR(LockUntil(lock, LOCK_SH, deadline, lock_path));
  BLOCKSWAP_ASSIGN_OR_RETURN(bool answers, SocketAnswers(socket));
  if (answers) {
    absl::Status attached = attach(socket);
    if (attached.ok()) return PrivateDaemonUse{};
    if (!absl::IsUnavailable(attached)) return attached;
  }
  // Exclusive: start one, unless whoever held the lock before just did.
  ::flock(lock.get(), LOCK_UN);
  BLOCKSWAP_RETURN_IF_ERROR(LockUntil(lock, LOCK_EX, deadline, lock_path));
  BLOCKSWAP_ASSIGN_OR_RETURN(answers, SocketAnswers(socket));
  if (answers) {
    BLOCKSWAP_RETURN_IF_ERROR(attach(socket));
    return PrivateDaemonUse{};
  }
  absl::StatusOr<pid_t> pid = StartDaemon(options);
  if (!pid.ok()) {
    return Annotate(pid.status(), "starting it");
  }
  BLOCKSWAP_RETURN_IF_ERROR(
      AwaitSocket(socket, *pid, deadline, absl::StrCat(options.directory, "/", kPrivateLogName)));
  BLOCKSWAP_RETURN_IF_ERROR(attach(socket));
  return PrivateDaemonUse{.started = true, .pid = *pid};
}

}  // namespace blockswap::client
