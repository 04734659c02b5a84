#include "daemon/server/connection_relay.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

constexpr uint64_t kWakeTag = ~uint64_t{0};
constexpr int kPumpRounds = 16;
// A pair's two sockets share its id: the low bit says which.
constexpr uint64_t kServerBit = 1;

uint64_t Tag(uint64_t id, bool server) { return id << 1 | (server ? kServerBit : 0); }

enum class Io { kProgress, kWouldBlock, kEnd, kError };

// One read into `buffer`'s free tail.
Io ReadInto(int fd, char* data, size_t room, size_t* got) {
  ssize_t n;
  do {
    n = ::recv(fd, data, room, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    *got = static_cast<size_t>(n);
    return Io::kProgress;
  }
  if (n == 0) return Io::kEnd;
  return errno == EAGAIN || errno == EWOULDBLOCK ? Io::kWouldBlock : Io::kError;
}

Io WriteFrom(int fd, const char* data, size_t size, size_t* put) {
  ssize_t n;
  do {
    n = ::send(fd, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    *put = static_cast<size_t>(n);
    return Io::kProgress;
  }
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? Io::kWouldBlock : Io::kError;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionRelay>> ConnectionRelay::Start(RelayOptions options) {
  std::unique_ptr<ConnectionRelay> relay(new ConnectionRelay(std::move(options)));
  relay->epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!relay->epoll_) return ErrnoStatus(errno, "creating the relay's epoll set");
  relay->wake_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!relay->wake_) return ErrnoStatus(errno, "creating the relay's eventfd");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeTag;
  if (::epoll_ctl(relay->epoll_.get(), EPOLL_CTL_ADD, relay->wake_.get(), &event) != 0) {
    return ErrnoStatus(errno, "watching the relay's eventfd");
  }
  relay->thread_ = std::thread([r = relay.get()] { r->Run(); });
  return relay;
}

ConnectionRelay::~ConnectionRelay() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<UniqueFd> ConnectionRelay::Add(UniqueFd client, uid_t uid, std::string who) {
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, ends) != 0) {
    return ErrnoStatus(errno, "creating the socket pair that relays a gRPC connection");
  }
  UniqueFd ours(ends[0]), grpc_end(ends[1]);
  {
    absl::MutexLock lock(&mu_);
    incoming_.push_back(std::make_unique<Pair>(std::move(client), std::move(ours), uid,
                                               std::move(who), options_.limits));
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  return grpc_end;
}

void ConnectionRelay::Log(absl::string_view message) const {
  if (options_.log) {
    options_.log(message);
  } else {
    std::cerr << "blockswapd: " << message << "\n";
  }
}

void ConnectionRelay::Run() {
  std::array<epoll_event, 64> events;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
    }
    AdoptIncoming();
    const absl::Time now = absl::Now();
    int timeout = -1;
    if (absl::Time flush = refusals_.next_flush(); flush != absl::InfiniteFuture()) {
      timeout = flush <= now ? 0
                             : static_cast<int>(std::min<int64_t>(
                                   absl::ToInt64Milliseconds(
                                       absl::Ceil(flush - now, absl::Milliseconds(1))),
                                   INT_MAX));
    }
    int count = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), timeout);
    if (count < 0) {
      if (errno == EINTR) continue;
      Log(ErrnoStatus(errno, "relaying gRPC connections (epoll_wait)").ToString());
      absl::SleepFor(absl::Milliseconds(100));  // never spin on a broken epoll set
      continue;
    }
    for (int i = 0; i < count; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t value;
        (void)!::read(wake_.get(), &value, sizeof(value));
        continue;
      }
      auto it = pairs_.find(tag >> 1);
      if (it == pairs_.end()) continue;  // closed earlier in this batch
      Pair& pair = *it->second;
      // A side that hung up entirely (EPOLLHUP) or failed can take no
      // more bytes: whatever is left for it has nowhere to go.
      if ((events[i].events & (EPOLLHUP | EPOLLERR)) &&
          (events[i].events & EPOLLIN) == 0) {
        Close(it->first);
        continue;
      }
      if (Pump(pair) == Outcome::kFinished) {
        Close(it->first);
      } else {
        Watch(it->first, pair);
      }
    }
    refusals_.Flush(absl::Now());
  }
  pairs_.clear();
  absl::MutexLock lock(&mu_);
  incoming_.clear();
}

void ConnectionRelay::AdoptIncoming() {
  std::vector<std::unique_ptr<Pair>> incoming;
  {
    absl::MutexLock lock(&mu_);
    incoming.swap(incoming_);
  }
  for (std::unique_ptr<Pair>& pair : incoming) {
    const uint64_t id = next_id_++;
    Pair& added = *pair;
    pairs_.emplace(id, std::move(pair));
    epoll_event event{};
    event.data.u64 = Tag(id, false);
    bool watched = ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, added.client.get(), &event) == 0;
    event.data.u64 = Tag(id, true);
    watched = watched && ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, added.server.get(), &event) == 0;
    if (!watched) {
      Log(absl::StrCat("closed a gRPC connection from ", added.who, ": ",
                       ErrnoStatus(errno, "watching it").message()));
      Close(id);
      continue;
    }
    // Its first bytes may be waiting already (the listener only peeked).
    if (Pump(added) == Outcome::kFinished) {
      Close(id);
    } else {
      Watch(id, added);
    }
  }
}

bool ConnectionRelay::Step(Pair& pair, bool from_client, bool* progress) {
  const int source = from_client ? pair.client.get() : pair.server.get();
  const int sink = from_client ? pair.server.get() : pair.client.get();
  Buffer& buffer = from_client ? pair.to_server : pair.to_client;
  bool& source_done = from_client ? pair.client_done : pair.server_done;
  bool& sink_shut = from_client ? pair.server_shut : pair.client_shut;
  if (Reads(pair, from_client)) {
    size_t got = 0;
    switch (ReadInto(source, buffer.bytes.get() + buffer.end, buffer.room(), &got)) {
      case Io::kProgress:
        if (from_client) {
          absl::Status allowed =
              pair.guard.Inspect(absl::string_view(buffer.bytes.get() + buffer.end, got));
          if (!allowed.ok()) {
            Refuse(pair, allowed);
            return false;
          }
        }
        buffer.end += got;
        *progress = true;
        break;
      case Io::kEnd:
        source_done = true;
        *progress = true;
        break;
      case Io::kWouldBlock:
        break;
      case Io::kError:
        return false;
    }
  }
  if (buffer.size() > 0) {
    size_t put = 0;
    switch (WriteFrom(sink, buffer.bytes.get() + buffer.begin, buffer.size(), &put)) {
      case Io::kProgress:
        buffer.begin += put;
        if (buffer.size() == 0) buffer.begin = buffer.end = 0;
        *progress = true;
        break;
      case Io::kWouldBlock:
        break;
      case Io::kEnd:
      case Io::kError:
        return false;
    }
  }
  if (source_done && buffer.size() == 0 && !sink_shut) {
    ::shutdown(sink, SHUT_WR);
    sink_shut = true;
  }
  return true;
}

bool ConnectionRelay::Reads(const Pair& pair, bool from_client) {
  // The client is read only while it also takes its replies.
  return from_client ? !pair.client_done && pair.to_server.room() > 0 &&
                           pair.to_client.size() < kBufferBytes
                     : !pair.server_done && pair.to_client.room() > 0;
}

void ConnectionRelay::Refuse(const Pair& pair, const absl::Status& why) {
  if (options_.closed_over_limits != nullptr) {
    options_.closed_over_limits->fetch_add(1, std::memory_order_relaxed);
  }
  refusals_.Refused(pair.uid,
                    absl::StrCat("closed a gRPC connection from ", pair.who, ": ", why.message()),
                    absl::Now());
}

ConnectionRelay::Outcome ConnectionRelay::Pump(Pair& pair) {
  // A bounded number of rounds, so that one busy connection cannot starve
  // the others (epoll is level-triggered: it comes back).
  bool progress = true;
  for (int round = 0; progress && round < kPumpRounds; ++round) {
    progress = false;
    if (!Step(pair, /*from_client=*/true, &progress) ||
        !Step(pair, /*from_client=*/false, &progress)) {
      return Outcome::kFinished;
    }
  }
  // Both ends said all they will, and all of it was passed on.
  return pair.server_shut && pair.client_shut ? Outcome::kFinished : Outcome::kContinue;
}

void ConnectionRelay::Watch(uint64_t id, Pair& pair) {
  uint32_t client = 0, server = 0;
  if (Reads(pair, /*from_client=*/true)) client |= EPOLLIN;
  if (pair.to_client.size() > 0) client |= EPOLLOUT;
  if (Reads(pair, /*from_client=*/false)) server |= EPOLLIN;
  if (pair.to_server.size() > 0) server |= EPOLLOUT;
  epoll_event event{};
  if (client != pair.client_events) {
    event.events = client;
    event.data.u64 = Tag(id, false);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, pair.client.get(), &event);
    pair.client_events = client;
  }
  if (server != pair.server_events) {
    event.events = server;
    event.data.u64 = Tag(id, true);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, pair.server.get(), &event);
    pair.server_events = server;
  }
}

void ConnectionRelay::Close(uint64_t id) {
  auto it = pairs_.find(id);
  if (it == pairs_.end()) return;
  // Closing the descriptors takes them out of the epoll set; gRPC sees its
  // end of the pair hang up and ends the connection's calls.
  pairs_.erase(it);
}

}  // namespace blockswap::daemon
