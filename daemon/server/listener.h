// blockswapd's socket: one filesystem unix socket serves both gRPC and the
// descriptor side channel (docs/rules.md, "Peer credentials").
//
// The listener accepts every connection itself, reads the peer's credentials
// from the kernel (SO_PEERCRED, SO_PEERGROUPS, a pidfd) and checks them
// against the access policy, then looks at the first bytes the peer sends
// without consuming them: the whole 24-byte HTTP/2 preface followed by the
// header of a SETTINGS frame hands the connection to gRPC
// (grpc::AddInsecureChannelFromFd) with the peer in the PeerRegistry under
// "fd:N"; a side-channel hello ("BSFD") goes to the SideChannelAcceptor;
// anything else, or less than that within `hello_timeout`, is closed. Each
// uid may have at most max_connections_per_uid connections open, and at most
// max_pending_connections_per_uid of them waiting for their first message,
// so no one peer fills the pending places (kMaxPending) everybody shares.
//
// A peer the policy denies still gets its gRPC connection, marked denied, so
// that every call on it answers PERMISSION_DENIED with the reason instead of
// an unexplained hang-up; its side channels are closed.
//
// gRPC never reads a client's socket itself: it gets one end of a socket
// pair, and a ConnectionRelay passes the bytes between the pair's other end
// and the client, reading the client's as HTTP/2 frames on the way
// (connection_relay.h), so that no client can make gRPC buffer without bound.
//
// One thread does all of this with epoll and non-blocking sockets, so no peer
// can stall it. It also keeps a duplicate of each descriptor handed to gRPC
// and removes the registry entry when that connection hangs up (the number is
// reused once gRPC closes its descriptor), and then gives the memory that
// gRPC freed back to the system (malloc_trim, at most once a second): glibc
// keeps what a connection's buffers freed otherwise.
#ifndef BLOCKSWAP_DAEMON_SERVER_LISTENER_H_
#define BLOCKSWAP_DAEMON_SERVER_LISTENER_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/runtime/refusal_log.h"
#include "daemon/server/access_policy.h"
#include "daemon/server/connection_relay.h"
#include "daemon/server/peer_registry.h"
#include "daemon/session/peer.h"
#include "daemon/session/side_channel.h"
#include "shared/base/unique_fd.h"

namespace grpc {
class Server;
}

namespace blockswap::daemon {

struct ListenerOptions {
  std::string socket_path;  // its directory must exist
  mode_t mode = 0660;       // of the socket file
  // Group of the socket file; kKeepGroup: the daemon's (the file's default).
  static constexpr gid_t kKeepGroup = static_cast<gid_t>(-1);
  gid_t group = kKeepGroup;
  AccessPolicy policy;      // default: the daemon's euid, root, the socket's group
  // A connection that has not sent its first message by then is closed: a
  // gRPC connection the whole 24-byte HTTP/2 preface and the header of its
  // first frame, which must be SETTINGS; a side channel its 48-byte hello.
  absl::Duration hello_timeout = absl::Seconds(5);
  // max_connections_per_uid: connections one uid may have open (waiting for
  // their first message or handed to gRPC); more are closed at once. 0:
  // unlimited. Side channels are bounded by the session quotas instead.
  uint64_t max_connections_per_uid = 0;
  // max_pending_connections_per_uid: of those, how many may be waiting for
  // their first message, so that one peer cannot fill the pending places
  // that every peer shares. 0: unlimited (the shared cap still holds).
  uint64_t max_pending_per_uid = 0;
  // Where the listener reports each connection it dropped and why (at most
  // one line per uid per 10 s, then a count: RefusalLog). Called on the
  // listener's thread; must not block. Empty: standard error.
  std::function<void(absl::string_view)> log;
  // Counts every connection refused or closed before it was served, or
  // closed for sending past `http2` (for the metrics); must outlive the
  // listener. Null: not counted.
  std::atomic<uint64_t>* refused = nullptr;
  // What a gRPC client may make the daemon buffer before a request is
  // complete (ConnectionRelay); the gRPC server's metadata limit should be
  // http2.max_header_block_bytes.
  Http2Limits http2;
};

class Listener {
 public:
  // Creates the socket and starts the listener's thread. A stale socket file
  // (nobody listening) is replaced; a live one — another daemon accepts on
  // it — is FAILED_PRECONDITION, as is a path that exists and is not a socket.
  //
  // `server` (started, and built with no listening ports), `registry` and
  // `acceptor` must outlive the listener. Shut down in this order:
  // StopAccepting(), server->Shutdown(), destroy the listener, the server.
  static absl::StatusOr<std::unique_ptr<Listener>> Start(ListenerOptions options,
                                                         grpc::Server* server,
                                                         PeerRegistry* registry,
                                                         SideChannelAcceptor* acceptor);

  // Stops the thread and closes every descriptor the listener still owns:
  // the socket (unlinking its file), connections that never said what they
  // are, the duplicates of gRPC connections (whose registry entries it
  // removes; gRPC's own descriptors are gRPC's to close).
  ~Listener();

  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Closes the listening socket and unlinks its file (if it is still the one
  // this listener created); connections already accepted keep being served
  // and watched. Returns once done. Any thread but the listener's own (so not
  // from a SideChannelAcceptor). Idempotent.
  void StopAccepting() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& socket_path() const { return options_.socket_path; }
  // The policy in force, with the socket's group filled in.
  const AccessPolicy& policy() const { return options_.policy; }

 private:
  // Accepted, waiting for the first bytes.
  struct Pending {
    UniqueFd socket;
    Peer peer;
    absl::Time deadline;
  };
  // Handed to gRPC: a duplicate of its descriptor, watched for the hang-up.
  struct Watched {
    UniqueFd duplicate;
    std::string grpc_peer;
    uid_t uid = 0;
  };

  Listener(ListenerOptions options, grpc::Server* server, PeerRegistry* registry,
           SideChannelAcceptor* acceptor)
      : options_(std::move(options)),
        server_(server),
        registry_(registry),
        acceptor_(acceptor),
        refusals_([this](absl::string_view message) { Log(message); }) {}

  absl::Status CreateSocket();
  absl::Status CreateEpoll();

  // Everything below runs on the listener's thread only.
  void Run();
  void AcceptAll();
  void Admit(UniqueFd socket);
  void OnPendingReadable(uint64_t id, uint32_t events);
  void HandToGrpc(uint64_t id);
  void HandToAcceptor(Pending pending, absl::string_view hello);
  void OnWatchedHangup(uint64_t id);
  void ExpirePending(absl::Time now);
  // Gives freed memory back to the system (malloc_trim) when trim_due_ has
  // come.
  void TrimIfDue(absl::Time now);
  void ResumeAcceptingIfDue(absl::Time now);
  void CloseListeningSocket();
  int EpollTimeoutMs(absl::Time now) const;
  void Drop(uint64_t id, absl::string_view why);
  // Why a new connection of `uid` is closed at once (its per-uid caps), or
  // empty when it may wait for its first message.
  std::string OverUidCaps(uid_t uid) const;
  void Log(absl::string_view message) const;
  // Logs a refused connection, rate-limited per uid (empty: not known yet).
  void Refuse(std::optional<uid_t> uid, absl::string_view message);

  ListenerOptions options_;
  grpc::Server* const server_;
  PeerRegistry* const registry_;
  SideChannelAcceptor* const acceptor_;
  RefusalLog refusals_;  // listener thread only

  UniqueFd listen_socket_;  // closed by the thread on StopAccepting
  ino_t socket_inode_ = 0;  // of the socket file, so that only our own is unlinked
  dev_t socket_device_ = 0;
  UniqueFd epoll_;
  UniqueFd wake_;  // eventfd: StopAccepting and the destructor wake epoll_wait
  std::unique_ptr<ConnectionRelay> relay_;

  // Listener thread only.
  std::map<uint64_t, Pending> pending_;
  std::map<uint64_t, Watched> watched_;
  uint64_t next_connection_id_ = 1;
  // After EMFILE and the like, accepting pauses instead of spinning on a
  // listening socket that stays readable.
  absl::Time accept_paused_until_ = absl::InfinitePast();
  // When memory is next given back to the system (a gRPC connection closed;
  // InfiniteFuture when none is due), and when it last was.
  absl::Time trim_due_ = absl::InfiniteFuture();
  absl::Time last_trim_ = absl::InfinitePast();

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_accepting_ ABSL_GUARDED_BY(mu_) = false;
  bool accepting_stopped_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_LISTENER_H_
