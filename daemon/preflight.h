// Preflight: what the daemon would trip on with these options on this
// machine, checked before it starts and by `blockswapd --check-config`, so
// that an operator learns of a missing group or a budget the tmpfs cannot
// hold from the check, not from a failed start or a full tmpfs later.
#ifndef BLOCKSWAP_DAEMON_PREFLIGHT_H_
#define BLOCKSWAP_DAEMON_PREFLIGHT_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/options.h"

namespace blockswap::daemon {

struct PreflightReport {
  std::vector<absl::Status> errors;   // the daemon would not start, or could not serve
  std::vector<std::string> warnings;  // allowed, but probably not what was meant
  std::vector<std::string> notes;     // as meant, and worth knowing
  // What the masters directory is (daemon/store/masters_directory.h), when it
  // passes; otherwise its error is among `errors`.
  std::string masters_directory;
};

// The socket's group (a name or a number), as the daemon resolves it.
absl::StatusOr<gid_t> ResolveSocketGroup(const std::string& group);

// Errors: the socket group does not exist; the masters directory is one the
// daemon would refuse (checked as the calling uid: run it as the service's
// user); max_pinned_bytes is more than the filesystem of shm_prefix holds.
// Warnings: the socket's directory is missing or not writable by the caller
// (the unit creates it; the service user, not the operator, must write it);
// allow_uids/allow_gids name no account here (a container may use bare
// numbers); a masters' limit that could exceed what vm.max_map_count or
// RLIMIT_NOFILE allow (AssessMasterLimits). Notes: which limit bounds models
// of small blocks.
PreflightReport Preflight(const DaemonOptions& options);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_PREFLIGHT_H_
