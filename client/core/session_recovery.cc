#include "client/core/session_recovery.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/core/socket_path.h"
#include "shared/base/status.h"

namespace blockswap::client {

SessionRecovery::~SessionRecovery() { StopWatch(); }

void SessionRecovery::StopWatch() {
  stop_.store(true);
  if (watch_.joinable()) watch_.join();
  stop_.store(false);
  answered_.store(false);
}

absl::Status SessionRecovery::RecoverInBackground(const absl::Status& cause) {
  if (!enabled()) {
    return absl::UnavailableError(
        absl::StrCat("lost blockswapd (", cause.message(), "); reconnection is off"));
  }
  if (!watch_.joinable()) {
    watch_ = std::thread([this, path = connection_.socket_path(),
                          interval = options_.retry_interval] {
      while (!stop_.load() && !SocketAnswers(path).value_or(false)) absl::SleepFor(interval);
      answered_.store(true);
    });
  }
  if (!answered_.load()) {
    return absl::UnavailableError(absl::StrCat("waiting for blockswapd at ",
                                               connection_.socket_path(), " to come back (",
                                               cause.message(), ")"));
  }
  StopWatch();
  return Recover(cause);
}

absl::Status SessionRecovery::Recover(const absl::Status& cause) {
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::Status attached = absl::UnavailableError("no attempt was made (timeout 0)");
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    attached = connection_.Reconnect(std::min(left, kCallTimeout));
    // UNAVAILABLE: nobody answers on the socket yet (or the daemon is
    // shutting down); DEADLINE_EXCEEDED: it did not answer in time.
    if (attached.ok() || (!absl::IsUnavailable(attached) && !absl::IsDeadlineExceeded(attached))) {
      break;
    }
    absl::SleepFor(std::min(options_.retry_interval, deadline - absl::Now()));
  }
  if (attached.ok()) {
    absl::StatusOr<std::unique_ptr<Model>> reopened = Model::Open(connection_, model_.id());
    if (!reopened.ok()) {
      attached = Annotate(reopened.status(),
                          absl::StrCat("reopening model ", model_.id(),
                                       " (a restarted blockswapd adopts a model only from the "
                                       "same --shm-prefix)"));
    } else {
      reopened_ = *std::move(reopened);
      attached = Annotate(ring_.Recreate(), "re-creating the ring");
    }
  }
  if (attached.ok()) {
    ++recoveries_;
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "lost blockswapd at ", connection_.socket_path(), " (", cause.message(),
      ") and could not bring the session back within ", absl::FormatDuration(options_.timeout),
      ": ", attached.message()));
}

}  // namespace blockswap::client
