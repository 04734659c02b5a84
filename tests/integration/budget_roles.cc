// A client that asks for more than the daemon may hold: `greedy --case=NAME`
// makes the requests of one attack and checks that
// blockswapd refuses them with RESOURCE_EXHAUSTED containing --expect,
// keeping whatever it was granted until it exits. Exit 0 when the refusal
// came as expected, 1 (with what came instead on stderr) when not.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/core/connection.h"
#include "client/core/ring.h"
#include "shared/protocol/grpc_status.h"
#include "shared/protocol/model_layout.h"
#include "tests/integration/client_roles.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {
namespace {

// BeginUpload of a model of `blocks` blocks of `block_bytes` (one U8 tensor
// each), straight on the stub: no byte of it is ever written.
absl::Status BeginUpload(client::Connection& c, uint32_t blocks, uint64_t block_bytes) {
  ModelLayout layout;
  for (uint32_t b = 0; b < blocks; ++b) {
    absl::StatusOr<BlockSpec> block =
        PackBlock({{.name = "w", .dtype = "U8", .shape = {block_bytes}}});
    if (!block.ok()) return block.status();
    layout.blocks.push_back(*std::move(block));
  }
  v1::BeginUploadRequest request;
  request.set_session_token(c.token());
  request.set_name("greedy");
  *request.mutable_layout() = LayoutToProto(layout);
  v1::BeginUploadReply reply;
  grpc::ClientContext context;
  return FromGrpcStatus(c.stub().BeginUpload(&context, request, &reply));
}

// Offers /dev/null `count` times on the side channel, then names the first
// offer in a RegisterFile: the daemon takes the offers in at that call.
absl::Status ParkOffers(client::Connection& c, int count) {
  UniqueFd file(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!file.valid()) return absl::InternalError("cannot open /dev/null");
  uint64_t first = 0;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<uint64_t> offer = c.OfferFile(file);
    if (!offer.ok()) return offer.status();
    if (i == 0) first = *offer;
  }
  return RawRegisterFile(c, first);
}

int RunGreedy(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  if (!BecomeUid(args)) return kClientSetupFailed;
  const std::string name = args.Str("case");
  const std::string socket = args.Str("socket");
  const std::string expect = args.Str("expect");
  const int attempts = static_cast<int>(args.Int("attempts", 1));
  RoleReport report(args.Str("report"));

  // Every attempt in a fresh session of this process when --sessions is
  // given (a quota per session would be multiplied by them), else in one.
  const bool session_each = args.Int("sessions", 0) != 0;
  std::vector<std::unique_ptr<client::Connection>> connections;
  std::vector<std::unique_ptr<client::Ring>> granted;
  absl::Status refused;
  int granted_count = 0;
  for (int i = 0; i < attempts && refused.ok(); ++i) {
    if (connections.empty() || session_each) {
      auto connection = client::Connection::Connect(socket, absl::StrCat("greedy-", i));
      if (!connection.ok()) {
        refused = connection.status();
        break;
      }
      connections.push_back(*std::move(connection));
    }
    client::Connection& c = *connections.back();
    absl::Status got;
    if (name == "rings") {
      auto ring = client::Ring::Create(c, c.device_uuids().front(),
                                       static_cast<uint32_t>(args.Int("slots", 1)),
                                       static_cast<uint64_t>(args.Int("slot-bytes", 4096)));
      got = ring.status();
      if (ring.ok()) granted.push_back(*std::move(ring));
    } else if (name == "upload") {
      got = BeginUpload(c, static_cast<uint32_t>(args.Int("blocks", 1)),
                        static_cast<uint64_t>(args.Int("block-bytes", 4096)));
    } else if (name == "offers") {
      got = ParkOffers(c, static_cast<int>(args.Int("offers", 1)));
    } else if (name == "sessions") {
      got = absl::OkStatus();  // the Connect above was the request
    } else {
      std::cerr << "greedy: unknown case '" << name << "'\n";
      return kClientSetupFailed;
    }
    if (got.ok()) {
      ++granted_count;
    } else {
      refused = got;
    }
  }
  report.Add("granted", absl::StrCat(granted_count));
  if (absl::IsResourceExhausted(refused) && absl::StrContains(refused.message(), expect)) {
    std::cerr << "greedy " << name << ": refused as expected after " << granted_count
              << " granted: " << refused << "\n";
    return kClientOk;
  }
  std::cerr << "greedy " << name << ": expected RESOURCE_EXHAUSTED containing '" << expect
            << "' within " << attempts << " attempts, got " << refused << " after " << granted_count
            << " granted\n";
  return kClientFailed;
}
BLOCKSWAP_CHILD_ROLE("greedy", RunGreedy);

// `flood --uid=N --silent=S --pri=P`: as uid N, opens S connections that
// send nothing and P that send only "PRI " (the first bytes of an HTTP/2
// preface), reports `flooding`, then waits (at most --seconds) until the
// daemon has closed every one and reports `closed` with how many it did.
int RunFlood(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  if (!BecomeUid(args)) return kClientSetupFailed;
  const std::string socket_path = args.Str("socket");
  std::vector<UniqueFd> connections;
  const int silent = static_cast<int>(args.Int("silent", 0));
  const int total = silent + static_cast<int>(args.Int("pri", 0));
  for (int i = 0; i < total; ++i) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket_path.c_str(), sizeof(address.sun_path) - 1);
    if (!fd.valid() ||
        ::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      std::cerr << "flood: connection " << i << ": " << std::strerror(errno) << "\n";
      return kClientSetupFailed;
    }
    // A connection the daemon has already closed (over the per-uid cap)
    // refuses the bytes: it is counted as closed below.
    if (i >= silent && ::send(fd.get(), "PRI ", 4, MSG_NOSIGNAL) != 4 && errno != EPIPE &&
        errno != ECONNRESET) {
      std::cerr << "flood: sending on connection " << i << ": " << std::strerror(errno) << "\n";
      return kClientSetupFailed;
    }
    connections.push_back(std::move(fd));
  }
  report.Add("flooding", "1");
  int closed = 0;
  for (absl::Time until = absl::Now() + absl::Seconds(args.Int("seconds", 10));
       closed < total && absl::Now() < until;) {
    closed = 0;
    for (const UniqueFd& fd : connections) {
      char byte;
      ssize_t got = ::recv(fd.get(), &byte, 1, MSG_DONTWAIT | MSG_PEEK);
      closed += got == 0 || (got < 0 && errno != EAGAIN);
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  report.Add("closed", absl::StrCat(closed));
  return closed == total ? kClientOk : kClientFailed;
}
BLOCKSWAP_CHILD_ROLE("flood", RunFlood);

}  // namespace
}  // namespace blockswap::testing
