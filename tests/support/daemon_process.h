// A real blockswapd for integration tests: the binary beside the test
// binary, on a socket and a master directory of its own, killed and cleaned
// up when the test ends whatever happened.
#ifndef BLOCKSWAP_TESTS_SUPPORT_DAEMON_PROCESS_H_
#define BLOCKSWAP_TESTS_SUPPORT_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.grpc.pb.h"
#include "tests/support/child_process.h"

namespace blockswap::testing {

// A private temp directory (for the socket) and a private master directory
// under /dev/shm; both removed on destruction. Kept apart from the daemon so
// that a test can restart a daemon on the same masters.
class ScratchDirs {
 public:
  static absl::StatusOr<std::unique_ptr<ScratchDirs>> Create();
  ~ScratchDirs();
  std::string socket_path() const { return temp_dir_ + "/blockswapd.sock"; }
  const std::string& temp_dir() const { return temp_dir_; }
  const std::string& shm_dir() const { return shm_dir_; }
  // Names of the entries in the master directory.
  std::vector<std::string> ShmEntries() const;

 private:
  std::string temp_dir_;
  std::string shm_dir_;
};

struct DaemonFlags {
  std::vector<std::string> extra_args = {};   // e.g. --max-pinned-bytes=...
  std::map<std::string, std::string> env = {};  // e.g. BLOCKSWAP_HOST_JITTER_US
  // When set, the daemon's stdout and stderr go to this file (created or
  // truncated, mode 0600) instead of the test's, e.g. to check its log.
  std::string output_path = {};
  std::string backend = "host";  // --backend: host or cuda
  // When set, a cgroup.procs file: the daemon starts inside that cgroup (its
  // launcher writes its own pid there, then execs blockswapd), so that what
  // it allocates from its first instruction on is charged to the cgroup.
  std::string cgroup_procs = {};
  // When set, the daemon's group (real and effective gid, no supplementary
  // groups), as the systemd unit's Group= gives it: the files it creates
  // under its umask, those behind CUDA's IPC events included, are that
  // group's, so that clients in it can open them. Needs root.
  std::optional<gid_t> group = std::nullopt;
  // When set, the daemon's descriptor limit (RLIMIT_NOFILE, soft and hard),
  // as a unit's LimitNOFILE= sets it.
  uint64_t max_open_files = 0;
};

class DaemonProcess {
 public:
  // Starts blockswapd --backend=flags.backend on `dirs` (socket dirs.socket_path(),
  // masters in dirs.shm_dir()) and waits until it accepts connections (at
  // most 10 s).
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(const ScratchDirs& dirs,
                                                              DaemonFlags flags = {});
  pid_t pid() const { return process_.pid(); }
  // Sends `signal` and waits for the exit: the exit code (128+N for a signal).
  absl::StatusOr<int> Stop(int signal, absl::Duration timeout = absl::Seconds(20));
  // The exit code (128+N for a signal) once the daemon has exited on its
  // own; nullopt while it runs.
  std::optional<int> Exited() { return process_.TryWait(); }
  // The descriptors the daemon has open (/proc/PID/fd); -1 when unknown.
  int OpenDescriptors() const;

  // An Admin stub on the daemon's socket (the test process is root: allowed).
  // Defined in daemon_process_admin.cc: only in blockswap_daemon_process, not
  // in blockswap_daemon_launcher (for binaries that link libblockswap.so).
  std::unique_ptr<v1::Admin::Stub> Admin() const;

 private:
  DaemonProcess(ChildProcess process, std::string socket_path)
      : process_(std::move(process)), socket_path_(std::move(socket_path)) {}
  ChildProcess process_;  // SIGKILLed on destruction if still running
  std::string socket_path_;
};

// The directory of the running test binary (where blockswapd is built too).
std::string BinaryDirectory();

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_DAEMON_PROCESS_H_
