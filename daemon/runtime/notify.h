// The systemd notification protocol (sd_notify(3)), written out rather than
// linked from libsystemd: one datagram of "KEY=VALUE\n" lines to the unix
// socket named by $NOTIFY_SOCKET (a path, or "@name" for the abstract
// namespace). Without $NOTIFY_SOCKET (not started by systemd with
// Type=notify) every call is a no-op.
#ifndef BLOCKSWAP_DAEMON_RUNTIME_NOTIFY_H_
#define BLOCKSWAP_DAEMON_RUNTIME_NOTIFY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blockswap::daemon {

// Sends `state` (e.g. "READY=1\nSTATUS=serving") to `socket_path`.
absl::Status NotifyTo(absl::string_view socket_path, absl::string_view state);

// Sends `state` to $NOTIFY_SOCKET; OK and nothing sent when it is unset.
absl::Status NotifySystemd(absl::string_view state);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_RUNTIME_NOTIFY_H_
