// IdleExit: when a blockswapd started on demand (the private daemon a client
// library starts for its user, docs/architecture.md, "The private daemon") has
// served no session for `idle_exit`, it exits, so that nothing stays behind
// after the job.
//
// The race it closes: a client that has just found the daemon answering is
// about to attach while the daemon decides it is idle. Clients hold the start
// lock (a file, `lock_path`) shared while they attach and exclusive while they
// start a daemon; the daemon takes it exclusive before it decides, so a
// session either exists when it looks (and it stays) or attaches after the
// daemon has stopped accepting (and that client starts the next daemon). The
// lock, once taken for exiting, is held until the process exits, so no new
// daemon starts while this one still holds the masters' directory.
//
// Used from one thread (main's signal loop).
#ifndef BLOCKSWAP_DAEMON_IDLE_EXIT_H_
#define BLOCKSWAP_DAEMON_IDLE_EXIT_H_

#include <cstddef>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

class IdleExit {
 public:
  // `idle_exit` zero: never. `lock_path` empty: no lock (a daemon started by
  // hand with --idle-exit); otherwise the file is opened (created 0600) now,
  // so that a bad path fails at start-up.
  static absl::StatusOr<IdleExit> Create(absl::Duration idle_exit, const std::string& lock_path);

  bool enabled() const { return idle_exit_ > absl::ZeroDuration(); }
  // How often the caller should ask (a fraction of the timeout, at most 1 s).
  absl::Duration poll_interval() const;

  // Whether to exit now; `sessions` counts the attached sessions. True only
  // once no session has been attached for `idle_exit` and, with the start
  // lock held exclusively (then kept), still none is.
  bool ShouldExit(absl::FunctionRef<size_t()> sessions, absl::Time now);

 private:
  IdleExit(absl::Duration idle_exit, UniqueFd lock, absl::Time now)
      : idle_exit_(idle_exit), lock_(std::move(lock)), idle_since_(now) {}

  absl::Duration idle_exit_;
  UniqueFd lock_;  // invalid: no lock
  absl::Time idle_since_;
  bool was_busy_ = false;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_IDLE_EXIT_H_
