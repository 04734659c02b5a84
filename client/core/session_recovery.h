// SessionRecovery: brings a trainer's session back after its blockswapd went
// away (killed, crashed, restarted on the same socket): re-attaches, reopens
// the model by id — a restarted daemon adopts the sealed masters from its
// --shm-prefix, so nothing is uploaded again — and re-creates the ring, or
// gives up with UNAVAILABLE once its timeout has passed. RingSlotDriver
// (client/scheduler/ring_slot_driver.h) calls it when a call failed because the daemon
// was lost, and then reloads what its slots held.
//
// Only the model and ring given here are carried over; other models and
// rings of the same connection keep failing (their daemon is gone).
#ifndef BLOCKSWAP_CLIENT_CORE_SESSION_RECOVERY_H_
#define BLOCKSWAP_CLIENT_CORE_SESSION_RECOVERY_H_

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "client/core/ring.h"

namespace blockswap::client {

inline constexpr absl::Duration kDefaultReconnectTimeout = absl::Seconds(30);

struct ReconnectOptions {
  // How long one recovery keeps trying to re-attach; zero: never reconnect
  // (the daemon's loss is returned to the caller at once).
  absl::Duration timeout = kDefaultReconnectTimeout;
  // Pause between attempts while the socket does not answer.
  absl::Duration retry_interval = absl::Milliseconds(100);
};

// Thread-compatible: the thread that drives the ring calls it. `connection`,
// `model` and `ring` must outlive it.
class SessionRecovery {
 public:
  SessionRecovery(Connection& connection, const Model& model, Ring& ring,
                  ReconnectOptions options = {})
      : connection_(connection), model_(model), ring_(ring), options_(options) {}
  // Stops the background watch, if one runs.
  ~SessionRecovery();

  const ReconnectOptions& options() const { return options_; }
  void set_timeout(absl::Duration timeout) { options_.timeout = timeout; }
  bool enabled() const { return options_.timeout > absl::ZeroDuration(); }
  // How many times the session was brought back.
  int recoveries() const { return recoveries_; }

  // Whether `error`, from a call on the ring, means the daemon was lost (as
  // opposed to an error of the call itself): UNAVAILABLE — the Load stream
  // ended, the ring's daemon restarted (boot id) or fell silent (heartbeat),
  // an event's recorder died, the daemon is shutting down.
  static bool IsDaemonLost(const absl::Status& error) { return absl::IsUnavailable(error); }

  // Re-attaches (retrying while the daemon does not answer), reopens the
  // model and re-creates the ring. On failure: UNAVAILABLE naming the socket,
  // the timeout and the last error, after `cause` (what was lost); an error
  // that retrying cannot cure (the model is not in the restarted daemon, its
  // devices differ) ends it at once.
  absl::Status Recover(const absl::Status& cause);

  // Recover without ever waiting for the daemon, for a ring this process
  // fills itself (copy path "trainer"), whose passes need no daemon: the
  // first call starts a thread that waits, off the caller's thread, until
  // the socket answers again, and returns UNAVAILABLE; the first call after
  // it answered re-attaches (Recover: quick, the daemon is up) and returns
  // its outcome. Disabled recovery: UNAVAILABLE naming `cause`.
  absl::Status RecoverInBackground(const absl::Status& cause);

 private:
  Connection& connection_;
  const Model& model_;
  Ring& ring_;
  ReconnectOptions options_;
  int recoveries_ = 0;
  // Keeps the model open in the current session; `model_` (its id, layout
  // and master view) is still what callers use.
  std::unique_ptr<Model> reopened_;
  // RecoverInBackground's watch: it sets `answered_` once a connect to the
  // socket succeeds; `stop_` ends it early.
  std::thread watch_;
  std::atomic<bool> answered_{false};
  std::atomic<bool> stop_{false};
  void StopWatch();
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_SESSION_RECOVERY_H_
