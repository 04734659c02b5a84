// The masters directory (shm_prefix, /dev/shm/blockswap by default): the
// daemon's alone. /dev/shm is world-writable, so any local user could create
// the directory first; one the daemon does not own, or that others may
// enter, would let that user read the masters, plant files for the daemon to
// adopt, or keep it from starting. Such a directory is refused with what to
// remove and why; deploy/systemd/blockswapd-tmpfiles.conf creates the
// right one at boot, before any user can.
#ifndef BLOCKSWAP_DAEMON_STORE_MASTERS_DIRECTORY_H_
#define BLOCKSWAP_DAEMON_STORE_MASTERS_DIRECTORY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

// Opens `path` (creating it mode 0700 when absent) without following a
// symbolic link, and checks it: a directory owned by this process's euid with
// no group or other permissions. FAILED_PRECONDITION otherwise, naming the
// owner and mode found, what to remove and why.
absl::StatusOr<UniqueFd> OpenMastersDirectory(const std::string& path);

// The same check without creating anything, for `blockswapd --check-config`:
// a line describing the directory ("absent: ..." or "owned by uid ..."), or
// the error OpenMastersDirectory would give.
absl::StatusOr<std::string> InspectMastersDirectory(const std::string& path);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MASTERS_DIRECTORY_H_
