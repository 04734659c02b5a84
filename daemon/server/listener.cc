#include "daemon/server/listener.h"

#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <malloc.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/server/socket_file.h"
#include "shared/base/status.h"
#include "shared/protocol/side_channel_wire.h"

namespace blockswap::daemon {
namespace {

// epoll tags besides connection ids (which count up from 1).
constexpr uint64_t kWakeTag = ~uint64_t{0};
constexpr uint64_t kListenTag = ~uint64_t{0} - 1;

// A gRPC client's first bytes: the HTTP/2 client preface, then the 9-byte
// header of its first frame, which must be SETTINGS (RFC 9113 §3.4). Only a
// connection that sent all of it is handed to gRPC: one that stops after
// "PRI " stays the listener's, and its hello timeout closes it.
constexpr absl::string_view kGrpcPrefix("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
constexpr size_t kFrameHeaderBytes = 9;
constexpr size_t kFrameTypeOffset = 3;
constexpr char kSettingsFrame = 0x04;
constexpr absl::string_view kHelloPrefix(kSideChannelHelloMagic, sizeof(kSideChannelHelloMagic));

// Connections that have not yet said what they are; more are refused, so a
// flood of silent connections cannot use up the daemon's descriptors.
constexpr size_t kMaxPending = 256;
constexpr absl::Duration kAcceptPause = absl::Milliseconds(100);
// How long after a gRPC connection closed the memory gRPC freed is given
// back, and how often at most.
constexpr absl::Duration kTrimDelay = absl::Seconds(1);

std::string Who(const Peer& peer) {
  return absl::StrCat("pid ", peer.pid, " (uid ", peer.uid, ")");
}

// Whether `seen` (the first bytes so far) can still become `prefix`.
bool CouldBe(absl::string_view seen, absl::string_view prefix) {
  size_t n = std::min(seen.size(), prefix.size());
  return seen.substr(0, n) == prefix.substr(0, n);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> Listener::Start(ListenerOptions options,
                                                          grpc::Server* server,
                                                          PeerRegistry* registry,
                                                          SideChannelAcceptor* acceptor) {
  if (server == nullptr || registry == nullptr || acceptor == nullptr) {
    return absl::InvalidArgumentError(
        "a listener needs a gRPC server, a peer registry and a "
        "side-channel acceptor");
  }
  if (options.hello_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hello timeout must be positive (got ", absl::FormatDuration(options.hello_timeout), ")"));
  }
  std::unique_ptr<Listener> listener(new Listener(std::move(options), server, registry, acceptor));
  // On failure the destructor closes (and unlinks) whatever was created.
  BLOCKSWAP_RETURN_IF_ERROR(listener->CreateSocket());
  BLOCKSWAP_RETURN_IF_ERROR(listener->CreateEpoll());
  Listener* raw = listener.get();
  BLOCKSWAP_ASSIGN_OR_RETURN(
      listener->relay_,
      ConnectionRelay::Start({.limits = raw->options_.http2,
                              .log = [raw](absl::string_view message) { raw->Log(message); },
                              .closed_over_limits = raw->options_.refused}));
  listener->thread_ = std::thread([raw] { raw->Run(); });
  return listener;
}

absl::Status Listener::CreateSocket() {
  const std::string& path = options_.socket_path;
  BLOCKSWAP_ASSIGN_OR_RETURN(const sockaddr_un address, UnixSocketAddress(path));
  BLOCKSWAP_RETURN_IF_ERROR(ClearSocketPath(path, address));
  BLOCKSWAP_ASSIGN_OR_RETURN(BoundSocket bound, BindSocket(path, address));
  // From here on CloseListeningSocket (the destructor's) unlinks the file.
  socket_inode_ = bound.file.st_ino;
  socket_device_ = bound.file.st_dev;
  listen_socket_ = std::move(bound.socket);
  BLOCKSWAP_ASSIGN_OR_RETURN(const gid_t group,
                             SetSocketAccess(path,
                                             options_.group == ListenerOptions::kKeepGroup
                                                 ? std::nullopt
                                                 : std::optional<gid_t>(options_.group),
                                             bound.file.st_gid, options_.mode));
  options_.policy.ResolveSocketGroup(group);
  if (::listen(listen_socket_.get(), SOMAXCONN) != 0) {
    return ErrnoStatus(errno, absl::StrCat("listening on ", path));
  }
  return absl::OkStatus();
}

absl::Status Listener::CreateEpoll() {
  epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return ErrnoStatus(errno, "creating the listener's epoll set");
  wake_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_) return ErrnoStatus(errno, "creating the listener's eventfd");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeTag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &event) != 0) {
    return ErrnoStatus(errno, "watching the listener's eventfd");
  }
  event.data.u64 = kListenTag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listen_socket_.get(), &event) != 0) {
    return ErrnoStatus(errno, "watching the daemon's socket");
  }
  return absl::OkStatus();
}

Listener::~Listener() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (wake_) {
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  CloseListeningSocket();
  for (const auto& [id, watched] : watched_) registry_->Remove(watched.grpc_peer, id);
}

void Listener::StopAccepting() {
  absl::MutexLock lock(&mu_);
  if (accepting_stopped_) return;
  stop_accepting_ = true;
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  mu_.Await(absl::Condition(&accepting_stopped_));
}

void Listener::CloseListeningSocket() {
  if (!listen_socket_) return;
  if (epoll_) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listen_socket_.get(), nullptr);
  listen_socket_.Reset();
  // Only our own file: a daemon started since may have replaced it.
  struct stat info;
  if (::lstat(options_.socket_path.c_str(), &info) == 0 && info.st_ino == socket_inode_ &&
      info.st_dev == socket_device_) {
    ::unlink(options_.socket_path.c_str());
  }
}

void Listener::Log(absl::string_view message) const {
  if (options_.log) {
    options_.log(message);
  } else {
    std::cerr << "blockswapd: " << message << "\n";
  }
}

void Listener::Refuse(std::optional<uid_t> uid, absl::string_view message) {
  if (options_.refused != nullptr) options_.refused->fetch_add(1, std::memory_order_relaxed);
  refusals_.Refused(uid, message, absl::Now());
}

int Listener::EpollTimeoutMs(absl::Time now) const {
  absl::Time wake = absl::InfiniteFuture();
  for (const auto& [id, pending] : pending_) wake = std::min(wake, pending.deadline);
  if (accept_paused_until_ != absl::InfinitePast()) wake = std::min(wake, accept_paused_until_);
  wake = std::min(wake, refusals_.next_flush());
  wake = std::min(wake, trim_due_);
  if (wake == absl::InfiniteFuture()) return -1;
  if (wake <= now) return 0;
  int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(wake - now, absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

void Listener::Run() {
  std::array<epoll_event, 64> events;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      if (stop_accepting_ && !accepting_stopped_) {
        CloseListeningSocket();
        accept_paused_until_ = absl::InfinitePast();
        accepting_stopped_ = true;
      }
    }
    ResumeAcceptingIfDue(absl::Now());
    int count = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()),
                             EpollTimeoutMs(absl::Now()));
    if (count < 0) {
      if (errno == EINTR) continue;
      Log(ErrnoStatus(errno, "waiting for connections (epoll_wait)").ToString());
      absl::SleepFor(kAcceptPause);  // never spin on a broken epoll set
      continue;
    }
    for (int i = 0; i < count; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t value;
        (void)!::read(wake_.get(), &value, sizeof(value));
      } else if (tag == kListenTag) {
        AcceptAll();
      } else if (pending_.contains(tag)) {
        OnPendingReadable(tag, events[i].events);
      } else if (watched_.contains(tag)) {
        OnWatchedHangup(tag);
      }
      // Otherwise the connection was dropped earlier in this batch.
    }
    ExpirePending(absl::Now());
    refusals_.Flush(absl::Now());
    TrimIfDue(absl::Now());
  }
}

void Listener::TrimIfDue(absl::Time now) {
  if (now < trim_due_) return;
  ::malloc_trim(0);
  last_trim_ = now;
  trim_due_ = absl::InfiniteFuture();
}

void Listener::ResumeAcceptingIfDue(absl::Time now) {
  if (accept_paused_until_ == absl::InfinitePast() || now < accept_paused_until_) return;
  accept_paused_until_ = absl::InfinitePast();
  if (!listen_socket_) return;
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kListenTag;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listen_socket_.get(), &event);
}

void Listener::AcceptAll() {
  // A bounded number per round, so that pending peers are served in between.
  for (int i = 0; i < 64 && listen_socket_; ++i) {
    // Non-blocking: gRPC 1.51's AddInsecureChannelFromFd blocks forever in
    // recvmsg on a blocking descriptor, and this thread must never block.
    int fd = ::accept4(listen_socket_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(UniqueFd(fd));
      continue;
    }
    int error = errno;
    if (error == EAGAIN) return;
    if (error == EINTR || error == ECONNABORTED) continue;
    // EMFILE and the like: the socket stays readable, so pause instead of
    // spinning until descriptors are free again.
    Log(absl::StrCat(ErrnoStatus(error, "accepting a connection").message(), "; pausing for ",
                     absl::FormatDuration(kAcceptPause)));
    epoll_event event{};
    event.data.u64 = kListenTag;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listen_socket_.get(), &event);
    accept_paused_until_ = absl::Now() + kAcceptPause;
    return;
  }
}

std::string Listener::OverUidCaps(uid_t uid) const {
  uint64_t pending = 0, open = 0;
  for (const auto& [id, entry] : pending_) pending += entry.peer.uid == uid;
  for (const auto& [id, entry] : watched_) open += entry.uid == uid;
  open += pending;
  if (options_.max_pending_per_uid != 0 && pending >= options_.max_pending_per_uid) {
    return absl::StrCat("uid ", uid, " already has ", pending,
                        " connections waiting to send their first message "
                        "(max_pending_connections_per_uid = ",
                        options_.max_pending_per_uid, ")");
  }
  if (options_.max_connections_per_uid != 0 && open >= options_.max_connections_per_uid) {
    return absl::StrCat(
        "uid ", uid, " already has ", open,
        " connections open (max_connections_per_uid = ", options_.max_connections_per_uid, ")");
  }
  return "";
}

void Listener::Admit(UniqueFd socket) {
  if (pending_.size() >= kMaxPending) {
    Refuse(std::nullopt,
           absl::StrCat("closed a new connection: ", kMaxPending,
                        " connections are already waiting to send their first bytes"));
    return;
  }
  auto credentials = ReadPeerCredentials(socket);
  if (!credentials.ok()) {
    Refuse(std::nullopt, absl::StrCat("closed a new connection: ", credentials.status().message()));
    return;
  }
  auto pidfd = OpenPeerPidfd(socket, credentials->pid);
  if (!pidfd.ok()) {
    Refuse(credentials->uid,
           absl::StrCat("closed a connection from pid ", credentials->pid, " (uid ",
                        credentials->uid, "): ", pidfd.status().message()));
    return;
  }
  if (!credentials->groups_known) {
    auto groups = ReadSupplementaryGroupsOf(credentials->pid, *pidfd);
    if (!groups.ok()) {
      Refuse(credentials->uid,
             absl::StrCat("closed a connection from pid ", credentials->pid, " (uid ",
                          credentials->uid, "): ", groups.status().message()));
      return;
    }
    credentials->groups = *std::move(groups);
  }
  if (std::string over = OverUidCaps(credentials->uid); !over.empty()) {
    Log(absl::StrCat("closed a new connection from pid ", credentials->pid, ": ", over));
    return;
  }
  uint64_t id = next_connection_id_++;
  absl::Status access = options_.policy.Check(*credentials);
  Peer peer{.connection_id = id,
            .pid = credentials->pid,
            .uid = credentials->uid,
            .gid = credentials->gid,
            .groups = std::move(credentials->groups),
            .allowed = access.ok(),
            .denial = std::string(access.message()),
            .pidfd = std::make_shared<UniqueFd>(*std::move(pidfd))};
  // Edge-triggered: a first message that arrives in pieces wakes the thread
  // once per piece, never again for bytes it has already peeked at.
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  event.data.u64 = id;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, socket.get(), &event) != 0) {
    Refuse(peer.uid, absl::StrCat("closed a connection from ", Who(peer), ": ",
                                  ErrnoStatus(errno, "watching it").message()));
    return;
  }
  pending_.emplace(
      id, Pending{std::move(socket), std::move(peer), absl::Now() + options_.hello_timeout});
}

void Listener::Drop(uint64_t id, absl::string_view why) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  if (!why.empty()) {
    Refuse(it->second.peer.uid,
           absl::StrCat("closed a connection from ", Who(it->second.peer), ": ", why));
  }
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.socket.get(), nullptr);
  pending_.erase(it);
}

void Listener::OnPendingReadable(uint64_t id, uint32_t events) {
  Pending& pending = pending_.at(id);
  char bytes[sizeof(SideChannelHello)];
  ssize_t got;
  do {
    // MSG_PEEK: the bytes stay for gRPC, which must see the whole preface.
    got = ::recv(pending.socket.get(), bytes, sizeof(bytes), MSG_PEEK | MSG_DONTWAIT);
  } while (got < 0 && errno == EINTR);
  if (got < 0 && errno == EAGAIN) {
    if (events & (EPOLLHUP | EPOLLERR)) Drop(id, "");
    return;
  }
  if (got <= 0) {
    // Closed or reset before a single byte: nothing worth reporting (another
    // daemon probing whether this socket is live does exactly this).
    Drop(id, "");
    return;
  }
  absl::string_view seen(bytes, static_cast<size_t>(got));
  bool hung_up = (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
  if (CouldBe(seen, kGrpcPrefix)) {
    static_assert(sizeof(bytes) >= kGrpcPrefix.size() + kFrameHeaderBytes);
    if (seen.size() >= kGrpcPrefix.size() + kFrameHeaderBytes) {
      if (seen[kGrpcPrefix.size() + kFrameTypeOffset] != kSettingsFrame) {
        Drop(id, "its HTTP/2 preface is not followed by a SETTINGS frame");
        return;
      }
      HandToGrpc(id);
    } else if (hung_up) {
      Drop(id, absl::StrCat("hung up after ", seen.size(), " bytes of an HTTP/2 preface"));
    }
    return;
  }
  if (CouldBe(seen, kHelloPrefix)) {
    if (seen.size() == sizeof(SideChannelHello)) {
      // Consume the hello: the socket becomes the side channel.
      ssize_t consumed = ::recv(pending.socket.get(), bytes, sizeof(bytes), MSG_DONTWAIT);
      if (consumed != static_cast<ssize_t>(sizeof(bytes))) {
        Drop(id, "lost its side-channel hello while reading it");
        return;
      }
      auto node = pending_.extract(id);
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, node.mapped().socket.get(), nullptr);
      HandToAcceptor(std::move(node.mapped()), absl::string_view(bytes, sizeof(bytes)));
    } else if (hung_up) {
      Drop(id, absl::StrCat("hung up after ", seen.size(), " of the ", sizeof(SideChannelHello),
                            " bytes of a side-channel hello"));
    }
    return;
  }
  Drop(id,
       absl::StrCat("it sent neither an HTTP/2 preface nor a side-channel hello (first bytes \"",
                    absl::CHexEscape(seen.substr(0, 8)), "\")"));
}

void Listener::HandToGrpc(uint64_t id) {
  auto node = pending_.extract(id);
  Pending& pending = node.mapped();
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, pending.socket.get(), nullptr);
  absl::StatusOr<UniqueFd> grpc_end =
      relay_->Add(std::move(pending.socket), pending.peer.uid, Who(pending.peer));
  if (!grpc_end.ok()) {
    Refuse(pending.peer.uid, absl::StrCat("closed a gRPC connection from ", Who(pending.peer), ": ",
                                          grpc_end.status().message()));
    return;
  }
  // The duplicate keeps the connection's number from being reused under the
  // watch and shows the hang-up after gRPC has closed its own descriptor.
  auto duplicate = grpc_end->Duplicate();
  if (!duplicate.ok()) {
    Refuse(pending.peer.uid, absl::StrCat("closed a gRPC connection from ", Who(pending.peer), ": ",
                                          duplicate.status().message()));
    return;
  }
  epoll_event event{};
  event.events = EPOLLRDHUP;  // EPOLLHUP and EPOLLERR are always reported
  event.data.u64 = id;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, duplicate->get(), &event) != 0) {
    Refuse(pending.peer.uid, absl::StrCat("closed a gRPC connection from ", Who(pending.peer), ": ",
                                          ErrnoStatus(errno, "watching it").message()));
    return;
  }
  std::string grpc_peer = PeerRegistry::GrpcPeerName(grpc_end->get());
  // Registered before gRPC can read a byte, so that no call finds it missing.
  registry_->Register(grpc_peer, pending.peer);
  watched_.emplace(id, Watched{*std::move(duplicate), std::move(grpc_peer), pending.peer.uid});
  grpc::AddInsecureChannelFromFd(server_, grpc_end->Release());
}

void Listener::HandToAcceptor(Pending pending, absl::string_view hello) {
  auto token = DecodeSideChannelHello(hello);
  if (!token.ok()) {
    Refuse(pending.peer.uid, absl::StrCat("refused a side channel from ", Who(pending.peer), ": ",
                                          token.status().message()));
    return;
  }
  if (!pending.peer.allowed) {
    Refuse(pending.peer.uid, absl::StrCat("refused a side channel from ", Who(pending.peer), ": ",
                                          pending.peer.denial));
    return;
  }
  absl::Status accepted =
      acceptor_->AcceptSideChannel(*token, pending.peer, std::move(pending.socket));
  if (!accepted.ok()) {
    Refuse(pending.peer.uid, absl::StrCat("refused a side channel from ", Who(pending.peer), ": ",
                                          accepted.ToString()));
  }
}

void Listener::OnWatchedHangup(uint64_t id) {
  auto node = watched_.extract(id);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, node.mapped().duplicate.get(), nullptr);
  // A no-op when a new connection already has the number.
  registry_->Remove(node.mapped().grpc_peer, id);
  // gRPC frees the connection's buffers once it has seen the hang-up too.
  trim_due_ = std::min(trim_due_, std::max(absl::Now() + kTrimDelay, last_trim_ + kTrimDelay));
}

void Listener::ExpirePending(absl::Time now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, pending] : pending_) {
    if (pending.deadline <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    Drop(id, absl::StrCat("it did not send its first message within ",
                          absl::FormatDuration(options_.hello_timeout)));
  }
}

}  // namespace blockswap::daemon
