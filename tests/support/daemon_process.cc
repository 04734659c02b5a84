#include "tests/support/daemon_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"

namespace blockswap::testing {

std::string BinaryDirectory() {
  char path[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return ".";
  path[length] = '\0';
  return std::filesystem::path(path).parent_path().string();
}

absl::StatusOr<std::unique_ptr<ScratchDirs>> ScratchDirs::Create() {
  auto dirs = std::make_unique<ScratchDirs>();
  char temp[] = "/tmp/blockswap-test-XXXXXX";
  if (::mkdtemp(temp) == nullptr) return ErrnoStatus(errno, "mkdtemp");
  dirs->temp_dir_ = temp;
  // The daemon creates the master directory itself (mode 0700); only the
  // name must be unique.
  dirs->shm_dir_ = absl::StrCat("/dev/shm/",
                                std::filesystem::path(temp).filename().string());
  return dirs;
}

ScratchDirs::~ScratchDirs() {
  std::error_code ignored;
  std::filesystem::remove_all(temp_dir_, ignored);
  std::filesystem::remove_all(shm_dir_, ignored);
}

std::vector<std::string> ScratchDirs::ShmEntries() const {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(shm_dir_, error)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

namespace {

bool Connectable(const std::string& path) {
  UniqueFd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
  return ::connect(socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(const ScratchDirs& dirs,
                                                                    DaemonFlags flags) {
  // --config=/dev/null: a machine's /etc/blockswap/blockswapd.toml (an
  // installed service) must not change a test's daemon.
  std::vector<std::string> args = {"--config=/dev/null", "--backend=" + flags.backend,
                                   "--socket=" + dirs.socket_path(),
                                   "--shm-prefix=" + dirs.shm_dir()};
  args.insert(args.end(), flags.extra_args.begin(), flags.extra_args.end());
  UniqueFd output;  // only the child keeps it open
  std::vector<std::pair<int, int>> inherit;
  if (!flags.output_path.empty()) {
    output.Reset(::open(flags.output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!output.valid()) return ErrnoStatus(errno, absl::StrCat("open ", flags.output_path));
    inherit = {{output.get(), 1}, {output.get(), 2}};
  }
  std::string program = BinaryDirectory() + "/blockswapd";
  if (flags.group.has_value()) {
    args.insert(args.begin(), {absl::StrCat("--regid=", *flags.group), "--clear-groups", "--",
                               program});
    program = "/usr/bin/setpriv";
  }
  if (!flags.cgroup_procs.empty() || flags.max_open_files != 0) {
    // sh's pid is blockswapd's after the exec; an empty $0 joins no cgroup.
    const std::string nofile =
        flags.max_open_files == 0 ? "" : absl::StrCat("ulimit -n ", flags.max_open_files, " && ");
    args.insert(args.begin(), {"-c",
                               absl::StrCat("{ [ -z \"$0\" ] || echo $$ > \"$0\"; } && ", nofile,
                                            "exec \"$@\""),
                               flags.cgroup_procs, program});
    program = "/bin/sh";
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(ChildProcess process, ChildProcess::SpawnProgramEndingWithTest(
                                                       program, {.args = std::move(args),
                                                                 .inherit = std::move(inherit),
                                                                 .env = std::move(flags.env)}));
  const std::string output_note =
      flags.output_path.empty() ? "see its stderr above" : "see " + flags.output_path;
  std::unique_ptr<DaemonProcess> daemon(new DaemonProcess(std::move(process), dirs.socket_path()));
  for (absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
    if (Connectable(dirs.socket_path())) return daemon;
    if (std::optional<int> code = daemon->process_.TryWait(); code.has_value()) {
      return absl::InternalError(absl::StrCat("blockswapd exited during start-up (code ", *code,
                                              "); ", output_note));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("blockswapd did not accept connections within 10 s; ", output_note));
}

int DaemonProcess::OpenDescriptors() const {
  DIR* dir = ::opendir(absl::StrCat("/proc/", pid(), "/fd").c_str());
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = ::readdir(dir)) count += entry->d_name[0] != '.';
  ::closedir(dir);
  return count;
}

absl::StatusOr<int> DaemonProcess::Stop(int signal, absl::Duration timeout) {
  process_.Kill(signal);
  return process_.Wait(timeout);
}

}  // namespace blockswap::testing
