// Connection: one attached session with blockswapd — the gRPC channel, the
// session token, the descriptor side channel, the process's own view of the
// daemon's devices (a local backend of the same kind), and the Load stream.
#ifndef BLOCKSWAP_CLIENT_CORE_CONNECTION_H_
#define BLOCKSWAP_CLIENT_CORE_CONNECTION_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.grpc.pb.h"
#include "client/core/private_daemon.h"
#include "client/core/side_channel_client.h"
#include "client/core/socket_path.h"
#include "shared/backend/backend.h"
#include "shared/protocol/copy_path.h"

namespace blockswap::client {

// The copy path BLOCKSWAP_COPY asks for ("daemon" or "trainer"); nullopt
// when it is unset or empty; INVALID_ARGUMENT for another value.
absl::StatusOr<std::optional<CopyPath>> CopyPathFromEnvironment();

// How long a unary call to the daemon may take (an upload's commit hashes
// and copies the model, so it gets its own, longer limit).
inline constexpr absl::Duration kCallTimeout = absl::Seconds(30);
inline constexpr absl::Duration kCommitTimeout = absl::Minutes(30);
// A pass's statistics are best effort and reported from the training
// thread: a daemon that stalls (paused, swapped out) may hold that thread no
// longer than half the rings' heartbeat limit (ConsumerOptions), so that
// the training's next wait still sees the stall and re-attaches, instead of
// the whole stall passing inside one report.
inline constexpr absl::Duration kStatsReportTimeout = absl::Seconds(5);

// Thread-safe.
class Connection {
 public:
  // `socket_path` empty: ResolveSocket's order ($BLOCKSWAP_SOCKET, then the
  // system socket); when neither is configured and no system daemon
  // answers, the private per-user daemon, started when needed
  // (client/core/private_daemon.h; $BLOCKSWAP_AUTOSTART=0 turns that off).
  // Without a configured socket the process says once, on stderr, which
  // daemon it uses and whether it started it.
  static absl::StatusOr<std::unique_ptr<Connection>> Connect(absl::string_view socket_path,
                                                             absl::string_view client_name);
  // Closes the Load stream and detaches.
  ~Connection();

  BackendKind backend_kind() const { return backend_->kind(); }
  // The daemon's devices, in its order.
  const std::vector<std::string>& device_uuids() const { return device_uuids_; }
  // The UUID of this process's device `ordinal` (its CUDA ordinal on cuda),
  // or OUT_OF_RANGE naming how many it sees.
  absl::StatusOr<std::string> LocalDeviceUuid(int ordinal) const;
  // This process's handle on a device of the daemon, by UUID.
  absl::StatusOr<Device*> LocalDevice(absl::string_view uuid) const;
  // OK where the daemon said at Attach that the device can serve rings, and
  // no ring of it proved unusable in this process since; otherwise
  // FAILED_PRECONDITION with the reason.
  absl::Status RingsAvailable(absl::string_view uuid) const ABSL_LOCKS_EXCLUDED(rings_mu_);
  // Records that this process cannot use the daemon's rings on `uuid`: later
  // rings there, in this session or the next, go straight to trainer copies.
  void MarkRingsUnavailable(absl::string_view uuid, absl::string_view reason)
      ABSL_LOCKS_EXCLUDED(rings_mu_);
  // Who copies into this session's rings (AttachReply.copy): what
  // BLOCKSWAP_COPY asked for, else the daemon's default.
  CopyPath copy_path() const { return copy_path_; }
  const std::string& token() const { return token_; }
  uint64_t boot_id() const { return boot_id_; }
  v1::BlockSwap::Stub& stub() { return *stub_; }
  // The descriptors of a reply's batch.
  absl::StatusOr<std::vector<UniqueFd>> ReceiveFds(uint64_t batch);
  // Offers an open file to the daemon on the side channel (a file offer of
  // shared/protocol/side_channel_wire.h); the returned id goes into a
  // RegisterFileRequest sent after this returns.
  absl::StatusOr<uint64_t> OfferFile(const UniqueFd& file);

  // Records the handle session `session_token` gave model `model_id`
  // (Model::FromReply). Only the newest session's handles are kept.
  void RecordModelHandle(absl::string_view session_token, absl::string_view model_id,
                         uint32_t handle);
  // The handle of model `model_id` in session `session_token`, so that a
  // model opened in an earlier session is named by the one it was reopened
  // in; NOT_FOUND when it was not opened in that session.
  absl::StatusOr<uint32_t> ModelHandle(absl::string_view session_token,
                                       absl::string_view model_id) const;

  // Sends a load request on the session's Load stream (opened on first use).
  absl::Status SendLoad(v1::LoadRequest request);
  // Opens the Load stream if it is not open yet, without sending on it: a
  // ring whose loads go through its request ring still hears of the
  // daemon's loss (Liveness) and of errors the daemon reports on it.
  absl::Status OpenLoadStreamIfClosed();
  // The daemon's last error report for `ring_id` (OK when none arrived).
  absl::Status RingError(uint64_t ring_id) const;
  // UNAVAILABLE once the Load stream has ended (the daemon went away or
  // closed it); OK before. Cheap: waits poll it.
  absl::Status Liveness() const;

  // A watch on the daemon's loss (WatchLoss); destroying it unregisters it,
  // waiting for a run in progress, so its function never runs afterwards.
  class LossWatch {
   public:
    LossWatch(Connection& connection, uint64_t id) : connection_(connection), id_(id) {}
    LossWatch(const LossWatch&) = delete;
    LossWatch& operator=(const LossWatch&) = delete;
    ~LossWatch();

   private:
    Connection& connection_;
    const uint64_t id_;
  };
  // Runs `on_loss` on the Load stream's reader thread each time the stream
  // ends (the daemon died, closed it, or a Reconnect replaced it), and at
  // once if it has ended already. The client's watchdog: it releases the
  // streams that wait for the daemon's ready words (client::Ring), which no
  // host-side timeout could. `on_loss` must be quick and must not call into
  // this connection.
  std::unique_ptr<LossWatch> WatchLoss(std::function<void()> on_loss);

  // Attaches a new session to the daemon on the same socket, after the old
  // one was lost (the daemon died or restarted): a new channel, token, side
  // channel and Load stream; the local backend (and every stream and
  // mapping made from it) stays. The daemon must offer the same devices.
  // Models and rings of the old session are not carried over (see
  // client/core/session_recovery.h). Not thread-safe: no other call may use this
  // connection, its models or its rings meanwhile.
  absl::Status Reconnect(absl::Duration timeout);
  const std::string& socket_path() const { return socket_path_; }

  // Sends per-pass statistics (a StreamScheduler's on_pass) to the daemon,
  // which keeps them per session for the Admin service (`blockswapctl stats`).
  absl::Status ReportStats(const std::vector<v1::PassStats>& passes);

  // A client context with the session's deadline conventions.
  static std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = kCallTimeout);
  // The error of a failed call to the daemon, saying what the call was
  // (`what`). The library cancels no call but its own Load stream as it
  // closes it, so CANCELLED means the daemon ended the call (a shutdown or
  // restart with the call in flight): it becomes UNAVAILABLE, the code of
  // every other way of losing the daemon, so callers (and a trainer's error
  // handling) need not know gRPC's shutdown order.
  static absl::Status CallError(const grpc::Status& status, absl::string_view what);

 private:
  Connection() = default;
  // A channel, stub and session on socket_path_ (devices, token, boot id).
  absl::StatusOr<v1::AttachReply> Attach(absl::Duration timeout);
  // With no socket configured: the system daemon if it answers, else the
  // private one (private_daemon_ set from then on).
  absl::StatusOr<v1::AttachReply> AttachWithoutConfiguredSocket();
  // Attach on the private daemon, starting it when none answers.
  absl::StatusOr<v1::AttachReply> AttachPrivate(absl::Duration timeout);
  absl::Status OpenSideChannel();
  // Ends the Load stream, if open, and joins its reader.
  void CloseLoadStream();
  // Detaches the current session (token_), ignoring the outcome.
  void DetachSession(absl::Duration timeout);
  absl::Status OpenLoadStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);
  // OK once the stream is open and has not failed.
  absl::Status ReadyLoadStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);
  // How the Load stream ended, once it has (OK before).
  absl::Status EndedError() const;
  void ReadLoadEvents();

  std::string socket_path_;
  std::string client_name_;
  std::optional<CopyPath> asked_copy_;  // BLOCKSWAP_COPY
  CopyPath copy_path_ = CopyPath::kDaemon;
  // Set when attached to the private per-user daemon: Reconnect starts a new
  // one when it is gone.
  std::optional<PrivateDaemonOptions> private_daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::BlockSwap::Stub> stub_;
  std::string token_;
  // The session a Reconnect left, named in the next Attach so that a daemon
  // that only paused ends it (AttachRequest.replaces_session_token).
  std::string replaces_token_;
  uint64_t boot_id_ = 0;
  std::vector<std::string> device_uuids_;
  // By UUID, why the daemon cannot serve rings on a device (Attach), and
  // why this process cannot use them (MarkRingsUnavailable; kept across
  // sessions: it is this process's driver that refuses).
  mutable absl::Mutex rings_mu_;
  std::map<std::string, std::string, std::less<>> rings_unavailable_ ABSL_GUARDED_BY(rings_mu_);
  std::map<std::string, std::string, std::less<>> rings_unusable_here_ ABSL_GUARDED_BY(rings_mu_);
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SideChannelClient> side_channel_;
  std::atomic<uint64_t> next_offer_{1};

  absl::Mutex load_mu_;  // one writer on the Load stream at a time
  std::unique_ptr<grpc::ClientContext> load_context_ ABSL_GUARDED_BY(load_mu_);
  std::unique_ptr<grpc::ClientReaderWriter<v1::LoadRequest, v1::LoadEvent>> load_stream_
      ABSL_GUARDED_BY(load_mu_);
  // A failed Write; how the stream ended is ended_error_.
  absl::Status load_stream_error_ ABSL_GUARDED_BY(load_mu_);
  std::atomic<bool> load_stream_ended_{false};
  std::thread load_reader_;

  mutable absl::Mutex handles_mu_;
  std::string handles_session_ ABSL_GUARDED_BY(handles_mu_);  // the token model_handles_ are of
  std::map<std::string, uint32_t, std::less<>> model_handles_ ABSL_GUARDED_BY(handles_mu_);

  mutable absl::Mutex errors_mu_;
  std::map<uint64_t, absl::Status> ring_errors_ ABSL_GUARDED_BY(errors_mu_);
  absl::Status ended_error_ ABSL_GUARDED_BY(errors_mu_);

  // Held while the watches run, so that a LossWatch destroyed meanwhile
  // waits for them.
  absl::Mutex watch_mu_;
  std::map<uint64_t, std::function<void()>> loss_watches_ ABSL_GUARDED_BY(watch_mu_);
  uint64_t next_watch_ ABSL_GUARDED_BY(watch_mu_) = 1;
  // Runs every loss watch (the Load stream has ended).
  void RunLossWatches();
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_CONNECTION_H_
