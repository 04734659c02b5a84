// The listener with a real gRPC server and real clients (gRPC channels, raw
// sockets speaking the side channel's wire, child processes under other uids).
// The client's half of the side channel (SideChannelClient) is tested in
// client/core/side_channel_client_test.cc.
#include "daemon/server/listener.h"

#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "blockswap/v1/blockswap.grpc.pb.h"
#include "shared/os/fd_passing.h"
#include "shared/protocol/grpc_status.h"
#include "shared/os/shared_memory.h"
#include "shared/protocol/side_channel_wire.h"
#include "tests/support/child_process.h"
#include "tests/support/memfd_text.h"

namespace blockswap::daemon {
namespace {

using ::blockswap::testing::ContentOf;
using ::blockswap::testing::MemfdWith;

constexpr char kGoodToken[] = "0123456789abcdef0123456789abcdef";
constexpr char kBadToken[] = "ffffffffffffffffffffffffffffffff";
constexpr absl::Duration kPatience = absl::Seconds(5);

// Answers Admin.Clients with the caller as the registry knows it; the way
// the real services will find their peer.
class PeerEchoService final : public v1::Admin::Service {
 public:
  explicit PeerEchoService(PeerRegistry* registry) : registry_(registry) {}

  grpc::Status Clients(grpc::ServerContext* context, const v1::ClientsRequest*,
                       v1::ClientsReply* reply) override {
    auto peer = registry_->Lookup(context->peer());
    if (!peer.ok()) return ToGrpcStatus(peer.status());
    if (absl::Status allowed = peer->CheckAllowed(); !allowed.ok()) return ToGrpcStatus(allowed);
    v1::ClientInfo* info = reply->add_clients();
    info->set_session_id(peer->connection_id);
    info->set_pid(static_cast<uint32_t>(peer->pid));
    info->set_uid(peer->uid);
    info->set_gid(peer->gid);
    return grpc::Status::OK;
  }

 private:
  PeerRegistry* registry_;
};

// Keeps side channels that present kGoodToken, refuses the others.
class TestAcceptor final : public SideChannelAcceptor {
 public:
  struct Accepted {
    std::string token;
    Peer peer;
    UniqueFd socket;
  };

  absl::Status AcceptSideChannel(absl::string_view token, const Peer& peer,
                                 UniqueFd socket) override {
    if (token != kGoodToken) return absl::PermissionDeniedError("no session has this token");
    absl::MutexLock lock(&mu_);
    accepted_.push_back({std::string(token), peer, std::move(socket)});
    return absl::OkStatus();
  }

  std::optional<Accepted> Take(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto not_empty = [](std::deque<Accepted>* queue) { return !queue->empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(+not_empty, &accepted_), timeout)) {
      return std::nullopt;
    }
    Accepted accepted = std::move(accepted_.front());
    accepted_.pop_front();
    return accepted;
  }

 private:
  absl::Mutex mu_;
  std::deque<Accepted> accepted_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<v1::ClientInfo> CallClients(v1::Admin::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ClientsReply reply;
  grpc::Status status = stub.Clients(&context, v1::ClientsRequest(), &reply);
  if (!status.ok()) return FromGrpcStatus(status);
  if (reply.clients_size() != 1) return absl::InternalError("expected one ClientInfo");
  return reply.clients(0);
}

std::unique_ptr<v1::Admin::Stub> StubFor(const std::string& path) {
  return v1::Admin::NewStub(
      grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout = kPatience) {
  absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

UniqueFd RawConnect(const std::string& path) {
  UniqueFd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (::connect(socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return UniqueFd();
  }
  return socket;
}

// Whether the daemon closed `socket` within `timeout`: EOF, or a reset when
// it closed with our bytes unread.
bool ClosedByDaemon(const UniqueFd& socket, absl::Duration timeout) {
  pollfd pfd{socket.get(), POLLIN, 0};
  if (::poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return false;
  char byte;
  ssize_t got = ::recv(socket.get(), &byte, 1, MSG_DONTWAIT);
  return got == 0 || (got < 0 && errno == ECONNRESET);
}

// A side channel as a client opens it: connected, with the hello for `token`
// sent. Invalid when either step fails.
UniqueFd RawSideChannel(const std::string& path, absl::string_view token) {
  auto hello = EncodeSideChannelHello(token);
  EXPECT_TRUE(hello.ok()) << hello.status();
  if (!hello.ok()) return UniqueFd();
  UniqueFd socket = RawConnect(path);
  if (!socket.valid()) return UniqueFd();
  if (::send(socket.get(), hello->data(), hello->size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(hello->size())) {
    return UniqueFd();
  }
  return socket;
}

// One descriptor batch as it arrives on the client's end of a side channel.
struct RawBatch {
  FdBatchHeader header;
  std::vector<UniqueFd> fds;
};

absl::StatusOr<RawBatch> ReadRawBatch(const UniqueFd& socket, absl::Duration timeout) {
  pollfd pfd{socket.get(), POLLIN, 0};
  if (::poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) {
    return absl::DeadlineExceededError("no descriptor batch arrived");
  }
  auto message = ReceiveExactWithFds(socket, sizeof(FdBatchHeader));
  if (!message.ok()) return message.status();
  RawBatch batch;
  std::memcpy(&batch.header, message->payload.data(), sizeof(batch.header));
  batch.fds = std::move(message->fds);
  return batch;
}

// Child: drops to `uid`/`gid` with the given supplementary groups, calls
// Admin.Clients and checks the outcome. Args: socket path, uid, gid, groups
// ("a,b" or ""), expected PERMISSION_DENIED message ("" = expect success).
int CallAsUser(const std::vector<std::string>& args) {
  if (args.size() != 5) return 20;
  uint32_t uid, gid;
  if (!absl::SimpleAtoi(args[1], &uid) || !absl::SimpleAtoi(args[2], &gid)) return 21;
  std::vector<gid_t> groups;
  for (absl::string_view field : absl::StrSplit(args[3], ',', absl::SkipEmpty())) {
    uint32_t group;
    if (!absl::SimpleAtoi(field, &group)) return 22;
    groups.push_back(group);
  }
  // Groups first: only root may change them, and a leftover group 0 would
  // let the child in through the socket's group.
  if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) {
    std::perror("dropping privileges");
    return 23;
  }
  auto stub = StubFor(args[0]);
  auto info = CallClients(*stub);
  const std::string& expected = args[4];
  if (expected.empty()) {
    if (!info.ok() || info->uid() != uid || info->pid() != static_cast<uint32_t>(::getpid())) {
      std::cerr << "expected success as uid " << uid << ", got "
                << (info.ok() ? info->DebugString() : info.status().ToString()) << "\n";
      return 1;
    }
    return 0;
  }
  if (info.status().code() != absl::StatusCode::kPermissionDenied ||
      info.status().message() != expected) {
    std::cerr << "expected PERMISSION_DENIED \"" << expected << "\", got " << info.status() << "\n";
    return 1;
  }
  return 0;
}
BLOCKSWAP_CHILD_ROLE("listener-call-as-user", CallAsUser);

// Child: one successful call, then exit (which hangs up). Args: socket path.
int CallAndExit(const std::vector<std::string>& args) {
  auto stub = StubFor(args.at(0));
  auto info = CallClients(*stub);
  if (!info.ok()) {
    std::cerr << info.status() << "\n";
    return 1;
  }
  return 0;
}
BLOCKSWAP_CHILD_ROLE("listener-call-and-exit", CallAndExit);

class ListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/blockswap-listener-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    // Traversable, so that children running as another uid reach the socket.
    ASSERT_EQ(::chmod(dir, 0755), 0);
    dir_ = dir;
    path_ = dir_ + "/blockswapd.sock";
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  void TearDown() override {
    if (listener_) listener_->StopAccepting();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    listener_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  ListenerOptions Options() {
    ListenerOptions options;
    options.socket_path = path_;
    options.log = [this](absl::string_view message) {
      absl::MutexLock lock(&log_mu_);
      log_.push_back(std::string(message));
    };
    return options;
  }

  void StartListener(ListenerOptions options) {
    auto listener = Listener::Start(std::move(options), server_.get(), &registry_, &acceptor_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
  }

  bool Logged(absl::string_view text) {
    return WaitFor([&] {
      absl::MutexLock lock(&log_mu_);
      for (absl::string_view line : log_) {
        if (absl::StrContains(line, text)) return true;
      }
      return false;
    });
  }

  std::string dir_;
  std::string path_;
  PeerRegistry registry_;
  PeerEchoService service_{&registry_};
  TestAcceptor acceptor_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Listener> listener_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
};

// --- gRPC connections --------------------------------------------------------

TEST_F(ListenerTest, GrpcCallSeesTheCallersPidAndUid) {
  StartListener(Options());
  auto stub = StubFor(path_);
  auto info = CallClients(*stub);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->pid(), static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(info->uid(), ::getuid());
  EXPECT_EQ(info->gid(), ::getgid());
  EXPECT_NE(info->session_id(), 0u);
}

TEST_F(ListenerTest, RegisteredPeerHoldsAPidfdOfTheCaller) {
  StartListener(Options());
  auto stub = StubFor(path_);
  ASSERT_TRUE(CallClients(*stub).ok());
  ASSERT_EQ(registry_.size(), 1u);
  auto info = CallClients(*stub);
  ASSERT_TRUE(info.ok());
  // The connection is "fd:N" for some N; find it through the info's id.
  std::shared_ptr<UniqueFd> pidfd;
  for (int fd = 0; fd < 1024 && !pidfd; ++fd) {
    auto peer = registry_.Lookup(PeerRegistry::GrpcPeerName(fd));
    if (peer.ok() && peer->connection_id == info->session_id()) pidfd = peer->pidfd;
  }
  ASSERT_NE(pidfd, nullptr);
  std::ifstream fdinfo(absl::StrCat("/proc/self/fdinfo/", pidfd->get()));
  std::string line;
  bool found = false;
  while (std::getline(fdinfo, line)) {
    if (line.rfind("Pid:", 0) == 0) {
      found = true;
      EXPECT_EQ(line, absl::StrCat("Pid:\t", ::getpid()));
    }
  }
  EXPECT_TRUE(found) << "fd " << pidfd->get() << " is not a pidfd";
}

TEST_F(ListenerTest, SocketFileHasTheRequestedModeAndItsGroupIsAllowed) {
  StartListener(Options());
  struct stat info;
  ASSERT_EQ(::stat(path_.c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0660u);
  EXPECT_TRUE(listener_->policy().gids().contains(info.st_gid));
  EXPECT_TRUE(listener_->policy().uids().contains(0));
}

TEST_F(ListenerTest, DeniedPeerGetsPermissionDeniedWithTheReason) {
  ListenerOptions options = Options();
  options.policy = AccessPolicy::Only({::getuid() + 1}, {});
  StartListener(std::move(options));
  auto stub = StubFor(path_);
  auto info = CallClients(*stub);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kPermissionDenied);
  // Between the two, the supplementary groups of whoever runs the test.
  EXPECT_TRUE(absl::StartsWith(info.status().message(),
                               absl::StrCat("uid ", ::getuid(), " (gid ", ::getgid())))
      << info.status();
  EXPECT_TRUE(absl::EndsWith(info.status().message(),
                             absl::StrCat(") is not allowed by this blockswapd; allowed uids: ",
                                          ::getuid() + 1, "; gids: none")))
      << info.status();
}

TEST_F(ListenerTest, OtherUserIsDeniedWithTheReason) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a child as uid 65534";
  ListenerOptions options = Options();
  options.mode = 0666;  // let uid 65534 connect, so that the policy is what refuses it
  StartListener(std::move(options));
  std::string expected = absl::StrCat("uid 65534 (gid 65534) is not allowed by this blockswapd; ",
                                      listener_->policy().Describe());
  testing::SpawnOptions spawn;
  spawn.args = {path_, "65534", "65534", "", expected};
  auto child = testing::ChildProcess::Spawn("listener-call-as-user", std::move(spawn));
  ASSERT_TRUE(child.ok()) << child.status();
  auto code = child->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << "the child reports what it got on stderr";
}

TEST_F(ListenerTest, SupplementaryGroupAdmitsAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a child as uid 65534";
  ListenerOptions options = Options();
  options.mode = 0666;
  options.policy = AccessPolicy::Only({0}, {4242});
  StartListener(std::move(options));
  testing::SpawnOptions spawn;
  spawn.args = {path_, "65534", "65534", "4242", ""};
  auto child = testing::ChildProcess::Spawn("listener-call-as-user", std::move(spawn));
  ASSERT_TRUE(child.ok()) << child.status();
  auto code = child->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << "the child reports what it got on stderr";
}

TEST_F(ListenerTest, HangingUpRemovesTheRegistryEntry) {
  StartListener(Options());
  testing::SpawnOptions spawn;
  spawn.args = {path_};
  auto child = testing::ChildProcess::Spawn("listener-call-and-exit", std::move(spawn));
  ASSERT_TRUE(child.ok()) << child.status();
  auto code = child->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << code.status();
  ASSERT_EQ(*code, 0);
  EXPECT_TRUE(WaitFor([&] { return registry_.size() == 0; }))
      << registry_.size() << " entries left after the only peer exited";
  // A new connection (which may well get the same number) is served.
  auto stub = StubFor(path_);
  auto info = CallClients(*stub);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->pid(), static_cast<uint32_t>(::getpid()));
}

TEST_F(ListenerTest, StopAcceptingUnlinksTheSocketButKeepsServingConnections) {
  StartListener(Options());
  auto stub = StubFor(path_);
  ASSERT_TRUE(CallClients(*stub).ok());
  listener_->StopAccepting();
  struct stat info;
  EXPECT_NE(::lstat(path_.c_str(), &info), 0);
  EXPECT_FALSE(RawConnect(path_).valid());
  auto again = CallClients(*stub);
  EXPECT_TRUE(again.ok()) << again.status();
  listener_->StopAccepting();  // idempotent
}

// --- the socket file -----------------------------------------------------------

TEST_F(ListenerTest, SecondListenerOnALiveSocketIsRefused) {
  StartListener(Options());
  PeerRegistry other_registry;
  auto second = Listener::Start(Options(), server_.get(), &other_registry, &acceptor_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("another blockswapd is listening on " + path_),
            absl::string_view::npos)
      << second.status();
  auto stub = StubFor(path_);
  EXPECT_TRUE(CallClients(*stub).ok()) << "the first listener must be untouched";
}

TEST_F(ListenerTest, StaleSocketFileIsReplaced) {
  {
    UniqueFd dead(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(::bind(dead.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  }  // closed without unlinking: what a crashed daemon leaves
  StartListener(Options());
  auto stub = StubFor(path_);
  auto info = CallClients(*stub);
  EXPECT_TRUE(info.ok()) << info.status();
}

TEST_F(ListenerTest, FileThatIsNotASocketIsNotReplaced) {
  { std::ofstream(path_) << "precious"; }
  auto listener = Listener::Start(Options(), server_.get(), &registry_, &acceptor_);
  EXPECT_EQ(listener.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(listener.status().message().find("is not a socket"), absl::string_view::npos)
      << listener.status();
  std::string content;
  std::ifstream(path_) >> content;
  EXPECT_EQ(content, "precious");
}

TEST_F(ListenerTest, MissingDirectoryIsRefused) {
  ListenerOptions options = Options();
  options.socket_path = dir_ + "/missing/blockswapd.sock";
  auto listener = Listener::Start(std::move(options), server_.get(), &registry_, &acceptor_);
  EXPECT_FALSE(listener.ok());
  EXPECT_NE(listener.status().message().find("must exist"), absl::string_view::npos)
      << listener.status();
}

// --- connections that are neither ---------------------------------------------

TEST_F(ListenerTest, SilentPeerIsClosedAfterTheTimeoutWithoutHoldingUpOthers) {
  ListenerOptions options = Options();
  options.hello_timeout = absl::Milliseconds(300);
  StartListener(std::move(options));
  UniqueFd silent = RawConnect(path_);
  ASSERT_TRUE(silent.valid());
  auto stub = StubFor(path_);
  EXPECT_TRUE(CallClients(*stub).ok()) << "a silent peer must not block the listener";
  EXPECT_TRUE(ClosedByDaemon(silent, kPatience));
  EXPECT_TRUE(Logged("did not send its first message within 300ms"));
}

TEST_F(ListenerTest, UnknownProtocolIsClosed) {
  StartListener(Options());
  UniqueFd peer = RawConnect(path_);
  ASSERT_TRUE(peer.valid());
  ASSERT_EQ(::send(peer.get(), "GET / HTTP/1.1\r\n", 16, MSG_NOSIGNAL), 16);
  EXPECT_TRUE(ClosedByDaemon(peer, kPatience));
  EXPECT_TRUE(Logged("neither an HTTP/2 preface nor a side-channel hello"));
}

TEST_F(ListenerTest, APeerThatSendsOnlyPartOfThePrefaceIsClosedAtTheTimeout) {
  ListenerOptions options = Options();
  options.hello_timeout = absl::Milliseconds(300);
  StartListener(std::move(options));
  UniqueFd peer = RawConnect(path_);
  ASSERT_TRUE(peer.valid());
  ASSERT_EQ(::send(peer.get(), "PRI ", 4, MSG_NOSIGNAL), 4);  // never handed to gRPC
  EXPECT_TRUE(ClosedByDaemon(peer, kPatience));
  EXPECT_TRUE(Logged("did not send its first message within 300ms"));
}

TEST_F(ListenerTest, APrefaceNotFollowedBySettingsIsClosed) {
  StartListener(Options());
  UniqueFd peer = RawConnect(path_);
  ASSERT_TRUE(peer.valid());
  // The preface, then the header of a PING frame (type 6).
  const std::string bytes = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24) +
                            std::string("\0\0\x08\x06\0\0\0\0\0", 9);
  ASSERT_EQ(::send(peer.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  EXPECT_TRUE(ClosedByDaemon(peer, kPatience));
  EXPECT_TRUE(Logged("its HTTP/2 preface is not followed by a SETTINGS frame"));
}

// gRPC never reads the client itself (ConnectionRelay): a header block over
// the limit closes the connection, is logged with the peer and counted, and
// a gRPC call on another connection goes on.
TEST_F(ListenerTest, AHeaderBlockOverTheLimitClosesTheConnectionAndIsCounted) {
  std::atomic<uint64_t> refused{0};
  ListenerOptions options = Options();
  options.refused = &refused;
  options.http2.max_header_block_bytes = 1000;
  StartListener(std::move(options));
  UniqueFd peer = RawConnect(path_);
  ASSERT_TRUE(peer.valid());
  // The preface, SETTINGS, then HEADERS of 600 bytes and a CONTINUATION of
  // 600 without END_HEADERS.
  std::string bytes = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24) +
                      std::string("\0\0\0\x04\0\0\0\0\0", 9);
  bytes += std::string("\0\x02\x58\x01\0\0\0\0\x01", 9) + std::string(600, 'h');
  bytes += std::string("\0\x02\x58\x09\0\0\0\0\x01", 9) + std::string(600, 'h');
  ASSERT_EQ(::send(peer.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  EXPECT_TRUE(ClosedByDaemon(peer, kPatience));
  EXPECT_TRUE(Logged(absl::StrCat("closed a gRPC connection from pid ", ::getpid())));
  EXPECT_TRUE(Logged("the header block of stream 1 reached 1200 bytes"));
  EXPECT_EQ(refused.load(), 1u);
  auto stub = StubFor(path_);
  EXPECT_TRUE(CallClients(*stub).ok());
}

TEST_F(ListenerTest, AUidOverItsPendingCapIsClosedAtOnceNamingTheCap) {
  ListenerOptions options = Options();
  options.max_pending_per_uid = 2;
  StartListener(std::move(options));
  UniqueFd first = RawConnect(path_), second = RawConnect(path_);
  ASSERT_TRUE(first.valid() && second.valid());
  UniqueFd third = RawConnect(path_);
  ASSERT_TRUE(third.valid());
  EXPECT_TRUE(ClosedByDaemon(third, kPatience));
  EXPECT_TRUE(Logged(absl::StrCat("uid ", ::getuid(),
                                  " already has 2 connections waiting to send their first "
                                  "message (max_pending_connections_per_uid = 2)")));
  first.Reset();
  second.Reset();
  // Once they have gone, the uid's gRPC client gets through.
  absl::SleepFor(absl::Milliseconds(100));
  auto stub = StubFor(path_);
  EXPECT_TRUE(CallClients(*stub).ok());
}

// --- the side channel ------------------------------------------------------------

TEST_F(ListenerTest, SideChannelReachesTheAcceptorWithItsPeer) {
  StartListener(Options());
  UniqueFd channel = RawSideChannel(path_, kGoodToken);
  ASSERT_TRUE(channel.valid());
  auto accepted = acceptor_.Take(kPatience);
  ASSERT_TRUE(accepted.has_value());
  EXPECT_EQ(accepted->token, kGoodToken);
  EXPECT_EQ(accepted->peer.pid, ::getpid());
  EXPECT_EQ(accepted->peer.uid, ::getuid());
  EXPECT_TRUE(accepted->peer.allowed);
  EXPECT_TRUE(accepted->socket.valid());
  EXPECT_EQ(registry_.size(), 0u) << "side channels are not gRPC connections";
}

TEST_F(ListenerTest, HelloSentInPiecesIsAssembled) {
  StartListener(Options());
  UniqueFd peer = RawConnect(path_);
  ASSERT_TRUE(peer.valid());
  std::string hello = *EncodeSideChannelHello(kGoodToken);
  ASSERT_EQ(::send(peer.get(), hello.data(), 2, MSG_NOSIGNAL), 2);
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_EQ(::send(peer.get(), hello.data() + 2, 20, MSG_NOSIGNAL), 20);
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_EQ(::send(peer.get(), hello.data() + 22, 26, MSG_NOSIGNAL), 26);
  EXPECT_TRUE(acceptor_.Take(kPatience).has_value());
}

// The daemon's half of a batch: SendFdBatch on the socket the acceptor got
// writes one header with the descriptors attached. (The client's half,
// reading and keeping batches, is in client/core/side_channel_client_test.cc.)
TEST_F(ListenerTest, BatchesCarryDescriptorsWithTheirContent) {
  StartListener(Options());
  UniqueFd channel = RawSideChannel(path_, kGoodToken);
  ASSERT_TRUE(channel.valid());
  auto accepted = acceptor_.Take(kPatience);
  ASSERT_TRUE(accepted.has_value());
  SharedMemory one = MemfdWith("one"), two = MemfdWith("two");
  int fds[] = {one.fd().get(), two.fd().get()};
  ASSERT_TRUE(SendFdBatch(accepted->socket, 7, fds).ok());
  auto received = ReadRawBatch(channel, kPatience);
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(absl::string_view(received->header.magic, sizeof(received->header.magic)), "BSFB");
  EXPECT_EQ(received->header.batch, 7u);
  EXPECT_EQ(received->header.fd_count, 2u);
  ASSERT_EQ(received->fds.size(), 2u);
  EXPECT_EQ(ContentOf(std::move(received->fds[0])), "one");
  EXPECT_EQ(ContentOf(std::move(received->fds[1])), "two");
  ASSERT_TRUE(SendFdBatch(accepted->socket, 8, {}).ok());
  auto empty = ReadRawBatch(channel, kPatience);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->header.batch, 8u);
  EXPECT_EQ(empty->header.fd_count, 0u);
  EXPECT_TRUE(empty->fds.empty());
}

// What the client makes of the closed channel is
// FakeDaemonTest.BadTokenClosesTheChannel in client/core/side_channel_client_test.cc.
TEST_F(ListenerTest, BadTokenClosesTheChannel) {
  StartListener(Options());
  UniqueFd channel = RawSideChannel(path_, kBadToken);
  ASSERT_TRUE(channel.valid());
  EXPECT_TRUE(ClosedByDaemon(channel, kPatience));
  EXPECT_TRUE(Logged("no session has this token"));
}

TEST_F(ListenerTest, DeniedPeersSideChannelIsClosedBeforeTheAcceptor) {
  ListenerOptions options = Options();
  options.policy = AccessPolicy::Only({::getuid() + 1}, {});
  StartListener(std::move(options));
  UniqueFd channel = RawSideChannel(path_, kGoodToken);
  ASSERT_TRUE(channel.valid());
  EXPECT_TRUE(ClosedByDaemon(channel, kPatience));
  EXPECT_FALSE(acceptor_.Take(absl::Milliseconds(100)).has_value());
  EXPECT_TRUE(Logged("is not allowed by this blockswapd"));
}

// --- sending -------------------------------------------------------------------

TEST(SendFdBatch, FullChannelIsResourceExhaustedNamingThePid) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd daemon_side(pair[0]), client_side(pair[1]);
  absl::Status status;
  for (int i = 0; i < 1000000 && status.ok(); ++i) status = SendFdBatch(daemon_side, i, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find(absl::StrCat("side channel of pid ", ::getpid(), " is full")),
            absl::string_view::npos)
      << status;
}

TEST(SendFdBatch, ClosedChannelIsUnavailable) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd daemon_side(pair[0]);
  ::close(pair[1]);
  EXPECT_EQ(SendFdBatch(daemon_side, 1, {}).code(), absl::StatusCode::kUnavailable);
}

TEST(SendFdBatch, RefusesTooManyDescriptors) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd a(pair[0]), b(pair[1]);
  std::vector<int> many(kMaxFdsPerMessage + 1, a.get());
  EXPECT_EQ(SendFdBatch(a, 1, many).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace blockswap::daemon
