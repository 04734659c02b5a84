// A client that asks for more than the daemon may hold (issue 19 items 1 and
// 4): `hog --case=NAME` makes the requests of one attack and checks that
// blockswapd refuses them with RESOURCE_EXHAUSTED containing --expect,
// keeping whatever it was granted until it exits. Exit 0 when the refusal
// came as expected, 1 (with what came instead on stderr) when not.
#include <grp.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
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
  request.set_name("hog");
  *request.mutable_layout() = LayoutToProto(layout);
  v1::BeginUploadReply reply;
  grpc::ClientContext context;
  return FromGrpcStatus(c.stub().BeginUpload(&context, request, &reply));
}

absl::Status DestroyRing(client::Connection& c, uint64_t ring_id) {
  v1::DestroyRingRequest request;
  request.set_session_token(c.token());
  request.set_ring_id(ring_id);
  v1::DestroyRingReply reply;
  grpc::ClientContext context;
  return FromGrpcStatus(c.stub().DestroyRing(&context, request, &reply));
}

int RunHog(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  if (int64_t uid = args.Int("uid", -1); uid >= 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(uid)) != 0 ||
        ::setuid(static_cast<uid_t>(uid)) != 0) {
      std::cerr << "hog: cannot become uid " << uid << " (not root?)\n";
      return kClientSetupFailed;
    }
  }
  const std::string name = args.Str("case");
  const std::string socket = args.Str("socket");
  const std::string expect = args.Str("expect");
  const int attempts = static_cast<int>(args.Int("attempts", 1));
  RoleReport report(args.Str("report"));

  // Every attempt in a fresh session of this process when --sessions is
  // given (a quota per session would be multiplied by them), else in one.
  const bool session_each = args.Int("sessions", 0) != 0;
  // --destroy: slot 0's `free` is recorded behind work that waits for
  // `unblock`, then the ring is destroyed: the daemon must keep it retired
  // (and counted) until that `free` completes.
  absl::Notification unblock;
  std::vector<std::unique_ptr<Stream>> blocked;
  std::vector<std::unique_ptr<client::Connection>> connections;
  std::vector<std::unique_ptr<client::Ring>> granted;
  absl::Status refused;
  int granted_count = 0;
  for (int i = 0; i < attempts && refused.ok(); ++i) {
    if (connections.empty() || session_each) {
      auto connection = client::Connection::Connect(socket, absl::StrCat("hog-", i));
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
      if (ring.ok() && args.Int("destroy", 0) != 0) {
        auto stream = (*ring)->device().CreateStream();
        if (!stream.ok()) return kClientSetupFailed;
        if (!(*stream)->LaunchHostFunc([&unblock] { unblock.WaitForNotification(); }).ok() ||
            !(*ring)->Release(0, **stream).ok() || !DestroyRing(c, (*ring)->id()).ok()) {
          std::cerr << "hog: could not hold and destroy ring " << (*ring)->id() << "\n";
          return kClientSetupFailed;
        }
        blocked.push_back(*std::move(stream));
      }
      if (ring.ok()) granted.push_back(*std::move(ring));
    } else if (name == "upload") {
      got = BeginUpload(c, static_cast<uint32_t>(args.Int("blocks", 1)),
                        static_cast<uint64_t>(args.Int("block-bytes", 4096)));
    } else if (name == "sessions") {
      got = absl::OkStatus();  // the Connect above was the request
    } else {
      std::cerr << "hog: unknown case '" << name << "'\n";
      return kClientSetupFailed;
    }
    if (got.ok()) {
      ++granted_count;
    } else {
      refused = got;
    }
  }
  report.Add("granted", absl::StrCat(granted_count));
  unblock.Notify();
  for (auto& stream : blocked) (void)stream->Synchronize();
  if (absl::IsResourceExhausted(refused) && absl::StrContains(refused.message(), expect)) {
    std::cerr << "hog " << name << ": refused as expected after " << granted_count
              << " granted: " << refused << "\n";
    return kClientOk;
  }
  std::cerr << "hog " << name << ": expected RESOURCE_EXHAUSTED containing '" << expect
            << "' within " << attempts << " attempts, got " << refused << " after " << granted_count
            << " granted\n";
  return kClientFailed;
}
BLOCKSWAP_CHILD_ROLE("hog", RunHog);

}  // namespace
}  // namespace blockswap::testing
