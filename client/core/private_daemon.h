// The private daemon (docs/architecture.md): with no socket configured and no system
// daemon answering, the client library attaches to a private blockswapd of
// its own user, starting it when none runs.
//
// Its directory, /dev/shm/blockswap-<uid> ($BLOCKSWAP_AUTOSTART_DIR), holds
// everything: the socket, the masters (masters/, which the next daemon
// adopts), the daemon's log and the start lock. It must be a directory of
// this uid with mode 0700 (created so when absent); anything else is refused
// with what it is, since only that directory keeps other users out.
//
// The start lock makes N processes starting at once (the ranks of one
// torchrun job) start exactly one daemon: each holds it shared while it
// attaches to a daemon that answers, and exclusive while it starts one
// (looking again first: the previous holder may have started it). The
// daemon runs with --idle-exit and takes the lock exclusive before it
// decides it is idle (daemon/idle_exit.h), so nobody attaches to a daemon
// on its way out.
#ifndef BLOCKSWAP_CLIENT_CORE_PRIVATE_DAEMON_H_
#define BLOCKSWAP_CLIENT_CORE_PRIVATE_DAEMON_H_

#include <sys/types.h>

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shared/base/unique_fd.h"

namespace blockswap::client {

// Names inside the directory.
inline constexpr char kPrivateSocketName[] = "blockswapd.sock";
inline constexpr char kPrivateMastersName[] = "masters";
inline constexpr char kPrivateLogName[] = "blockswapd.log";
inline constexpr char kPrivateLockName[] = "start.lock";

struct PrivateDaemonOptions {
  std::string directory;
  absl::Duration idle_exit = absl::Seconds(300);
  // How long starting may take: the lock, the daemon's start-up, the attach.
  absl::Duration start_timeout = absl::Seconds(60);

  std::string socket_path() const;
};

// False when $BLOCKSWAP_AUTOSTART is "0".
bool AutostartEnabled();
// From the environment; INVALID_ARGUMENT naming the variable for a bad value.
absl::StatusOr<PrivateDaemonOptions> PrivateDaemonOptionsFromEnvironment();

// Opens `path` as the private daemon's directory, creating it (mode 0700)
// when absent. FAILED_PRECONDITION when it is not a directory (a symbolic
// link is not followed), not owned by this uid, or has another mode than 0700.
absl::StatusOr<UniqueFd> OpenPrivateDirectory(const std::string& path);

struct PrivateDaemonUse {
  bool started = false;  // this call started it
  pid_t pid = 0;         // when started
};

// Calls `attach(socket_path)` on the private daemon, starting the daemon
// first when none answers (the binary beside this library, version-checked:
// client/core/daemon_launcher.h). An error of `attach` is returned as it
// is, except UNAVAILABLE from a daemon that went away meanwhile (its idle
// exit), which leads to starting the next one.
absl::StatusOr<PrivateDaemonUse> AttachToPrivateDaemon(
    const PrivateDaemonOptions& options,
    absl::FunctionRef<absl::Status(const std::string& socket_path)> attach);

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_PRIVATE_DAEMON_H_
