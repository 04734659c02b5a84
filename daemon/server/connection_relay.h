// Stands between each gRPC client and gRPC: bytes pass both ways through
// buffers of a fixed size, and the client's are read as HTTP/2 frames
// (Http2FrameGuard) before gRPC sees them, so that no client can make gRPC
// buffer more than the frame guard's limits allow. A client over a limit
// is closed (never trimmed) and counted.
//
// What the relay itself holds per connection is two buffers of kBufferBytes.
// It reads a client only while the client reads its replies: a client that
// sends pings or settings and never reads the acknowledgements stops being
// read once its reply buffer is full, so gRPC's queue of answers to it stays
// bounded too.
//
// One thread does it all with epoll and non-blocking sockets.
#ifndef BLOCKSWAP_DAEMON_SERVER_CONNECTION_RELAY_H_
#define BLOCKSWAP_DAEMON_SERVER_CONNECTION_RELAY_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/runtime/refusal_log.h"
#include "daemon/server/http2_frame_guard.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

struct RelayOptions {
  Http2Limits limits;
  // Where the relay reports each connection it closed over a limit (at most
  // one line per uid per 10 s, then a count). Called on the relay's thread;
  // must not block.
  std::function<void(absl::string_view)> log;
  // Counts the connections closed over a limit; must outlive the relay.
  // Null: not counted.
  std::atomic<uint64_t>* closed_over_limits = nullptr;
};

class ConnectionRelay {
 public:
  // Per direction and connection.
  static constexpr size_t kBufferBytes = 64 << 10;

  static absl::StatusOr<std::unique_ptr<ConnectionRelay>> Start(RelayOptions options);
  // Stops the thread and closes every connection it relays.
  ~ConnectionRelay();
  ConnectionRelay(const ConnectionRelay&) = delete;
  ConnectionRelay& operator=(const ConnectionRelay&) = delete;

  // Relays `client` (non-blocking, accepted, its first bytes still unread)
  // from now on; returns the socket to hand to gRPC in its place. `uid` and
  // `who` name the client in what the relay reports. Thread-safe.
  absl::StatusOr<UniqueFd> Add(UniqueFd client, uid_t uid, std::string who)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Bytes on their way in one direction.
  struct Buffer {
    std::unique_ptr<char[]> bytes = std::make_unique<char[]>(kBufferBytes);
    size_t begin = 0;
    size_t end = 0;
    size_t size() const { return end - begin; }
    size_t room() const { return kBufferBytes - end; }
  };
  struct Pair {
    Pair(UniqueFd c, UniqueFd s, uid_t u, std::string w, Http2Limits limits)
        : client(std::move(c)), server(std::move(s)), uid(u), who(std::move(w)), guard(limits) {}
    UniqueFd client;
    UniqueFd server;  // our end of the socket pair whose other end gRPC has
    uid_t uid;
    std::string who;
    Http2FrameGuard guard;
    Buffer to_server;
    Buffer to_client;
    bool client_done = false;  // the client sent its last byte
    bool server_done = false;  // gRPC sent its last byte
    bool server_shut = false;  // the client's end of stream passed on to gRPC
    bool client_shut = false;  // gRPC's end of stream passed on to the client
    uint32_t client_events = 0;  // what epoll watches now
    uint32_t server_events = 0;
  };
  // Why Pump stopped: the pair goes on, or is finished (closed).
  enum class Outcome { kContinue, kFinished };

  explicit ConnectionRelay(RelayOptions options)
      : options_(std::move(options)),
        refusals_([this](absl::string_view m) { Log(m); }) {}

  void Run();
  void AdoptIncoming() ABSL_LOCKS_EXCLUDED(mu_);
  // Moves what it can through `pair` both ways; kFinished when it is done
  // or must be closed.
  Outcome Pump(Pair& pair);
  // One round of one direction: reads the source (the client's bytes
  // through the guard) while Reads() allows, writes what is buffered, and
  // passes the source's end on once all of it is. False: close the pair.
  bool Step(Pair& pair, bool from_client, bool* progress);
  static bool Reads(const Pair& pair, bool from_client);
  void Refuse(const Pair& pair, const absl::Status& why);
  void Watch(uint64_t id, Pair& pair);
  void Close(uint64_t id);
  void Log(absl::string_view message) const;

  const RelayOptions options_;
  RefusalLog refusals_;  // relay thread only
  UniqueFd epoll_;
  UniqueFd wake_;  // eventfd: Add and the destructor wake epoll_wait

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Pair>> incoming_ ABSL_GUARDED_BY(mu_);

  // Relay thread only.
  std::map<uint64_t, std::unique_ptr<Pair>> pairs_;
  uint64_t next_id_ = 1;

  std::thread thread_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_CONNECTION_RELAY_H_
