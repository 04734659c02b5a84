// Starting the blockswapd that ships beside the client library, for the
// private per-user daemon (client/core/private_daemon.h): which binary, that
// it is this library's version, and a start detached from the caller.
#ifndef BLOCKSWAP_CLIENT_CORE_DAEMON_LAUNCHER_H_
#define BLOCKSWAP_CLIENT_CORE_DAEMON_LAUNCHER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blockswap::client {

// Environment variables that restrict which GPUs a process sees. A trainer's
// rank has them set to its own GPU; the daemon it starts must see every GPU
// (ranks name GPUs by UUID), so they are removed from its environment.
inline constexpr const char* kPerRankDeviceVariables[] = {
    "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"};

// The blockswapd beside the object this code is linked into (libblockswap.so,
// or an executable that links the client statically): the same directory
// (the Python bundle's blockswap/_lib), then ../bin and ../../bin (a build
// tree's lib/ and bin/, an install's lib/<multiarch>/ and bin/). NOT_FOUND
// naming every place looked at.
absl::StatusOr<std::string> FindDaemonBinary();

// Runs `binary --version`: OK when it reports this build's version and C ABI
// version, FAILED_PRECONDITION naming both otherwise.
absl::Status CheckDaemonVersion(const std::string& binary);

// `environment` (NAME=value entries) without kPerRankDeviceVariables.
std::vector<std::string> DaemonEnvironment(char** environment);

struct DetachedLaunch {
  std::string binary;
  std::vector<std::string> arguments;    // without argv[0]
  std::vector<std::string> environment;  // NAME=value
  std::string log_path;                  // stdout and stderr; created 0600, truncated
};

// Starts it as nobody's child: a new session (setsid) whose leader exits at
// once, so the daemon is reparented to init (or the nearest subreaper) and
// outlives the caller without becoming its zombie. Its stdin is /dev/null,
// its stdout and stderr the log, and it inherits no other descriptor.
// Returns the daemon's pid once it has been executed (an exec failure is the
// error).
absl::StatusOr<pid_t> LaunchDetached(const DetachedLaunch& launch);

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_DAEMON_LAUNCHER_H_
