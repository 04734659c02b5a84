// Whether systemd-logind removes a user's /dev/shm files at their last
// logout (logind.conf's RemoveIPC=, "yes" by default), which takes the
// private daemon's masters with it: the next run then uploads anew instead
// of starting warm. Detected so that the client can say so when it starts
// the daemon (client/core/private_daemon.h).
#ifndef BLOCKSWAP_CLIENT_CORE_REMOVE_IPC_H_
#define BLOCKSWAP_CLIENT_CORE_REMOVE_IPC_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace blockswap::client {

// RemoveIPC as logind reads it from these files' texts, in the order logind
// reads them (logind.conf, then its drop-ins): the last assignment in a
// [Login] section wins; none means logind's default, yes.
bool RemoveIpcEnabled(const std::vector<std::string>& config_texts);

// Where this machine's logind would remove `uid`'s /dev/shm files at its
// last logout, one line that says so and how to avoid it; empty where it
// would not (no logind running, root or a system user, RemoveIPC=no). Reads
// the files under `root` ("" for the real machine; tests pass a fake tree).
std::string RemoveIpcWarning(uid_t uid, const std::string& root = "");

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_REMOVE_IPC_H_
