// A misbehaving client: `rogue --case=NAME` breaks one rule and checks that
// blockswapd answers with the precise error (code and message). Exit 0 when
// it did, 1 (with what came instead on stderr) when not.
#include <grp.h>
#include <unistd.h>

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/core/connection.h"
#include "client/core/daemon_copy_ring.h"
#include "client/core/model.h"
#include "client/core/ring.h"
#include "shared/protocol/grpc_status.h"
#include "shared/protocol/request_queue.h"
#include "shared/base/status.h"
#include "tests/integration/client_roles.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"

namespace blockswap::testing {
namespace {

struct Expectation {
  absl::StatusCode code;
  std::string fragment;
};

int Check(const std::string& name, const absl::Status& got, const Expectation& want) {
  if (got.code() == want.code && absl::StrContains(got.message(), want.fragment)) {
    std::cerr << "rogue " << name << ": answered as expected: " << got << "\n";
    return kClientOk;
  }
  std::cerr << "rogue " << name << ": expected " << absl::StatusCodeToString(want.code)
            << " containing '" << want.fragment << "', got " << got << "\n";
  return kClientFailed;
}

// The daemon reports errors of pipelined loads on the Load stream; wait for
// the report about `ring_id`.
absl::Status AwaitRingError(client::Connection& connection, uint64_t ring_id) {
  for (absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
    absl::Status error = connection.RingError(ring_id);
    if (!error.ok()) return error;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::OkStatus();
}

// A request that went through the ring's request ring fails the ring in its
// status word; wait until it says so.
absl::Status AwaitRingFailed(client::Ring& ring) {
  for (absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
    absl::Status health = ring.Health();
    if (!health.ok()) return health;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::OkStatus();
}

// Writes `entry` into the ring's request ring as it is, and rings the bell.
absl::Status PushRaw(client::DaemonCopyRing& ring, const RequestValues& entry) {
  RingImport& shared = ring.shared_ring_for_testing();
  BLOCKSWAP_RETURN_IF_ERROR(RequestQueueWriter(shared.client_control(), shared.control()).Push(entry));
  shared.doorbell()->Ring();
  return absl::OkStatus();
}

v1::LoadRequest Request(uint64_t ring, uint32_t slot, const std::string& model, uint32_t block,
                        uint32_t generation) {
  v1::LoadRequest request;
  request.set_ring_id(ring);
  request.set_slot(slot);
  request.set_model_id(model);
  request.set_block(block);
  request.set_generation(generation);
  return request;
}

// CreateRing straight on the stub, with any token.
absl::Status RawCreateRing(client::Connection& c, const std::string& token, uint32_t slots,
                           uint64_t slot_bytes) {
  v1::CreateRingRequest request;
  request.set_session_token(token);
  request.set_device_uuid(c.device_uuids().front());
  request.set_slot_count(slots);
  request.set_slot_bytes(slot_bytes);
  v1::RingDescriptor reply;
  grpc::ClientContext context;
  return FromGrpcStatus(c.stub().CreateRing(&context, request, &reply));
}

int RunRogue(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const std::string name = args.Str("case");
  const std::string socket = args.Str("socket");

  if (name == "denied-uid") {
    // Drop to nobody before connecting: the access policy must refuse it.
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
      std::cerr << "rogue: cannot become uid 65534 (not root?)\n";
      return kClientSetupFailed;
    }
    auto connection = client::Connection::Connect(socket, "rogue");
    return Check(name, connection.status(),
                 {absl::StatusCode::kPermissionDenied, "uid 65534"});
  }

  auto connection = client::Connection::Connect(socket, "rogue");
  if (!connection.ok()) return Check(name, connection.status(), {absl::StatusCode::kOk, ""});
  client::Connection& c = **connection;

  if (name == "stolen-token") {
    // The token of another process's live session, used on this process's
    // connection: a token is good only for the process it was issued to.
    return Check(name, RawCreateRing(c, args.Str("token"), 2, 4096),
                 {absl::StatusCode::kPermissionDenied, "belongs to pid"});
  }
  if (name == "guessed-token") {
    return Check(name, RawCreateRing(c, std::string(32, 'f'), 2, 4096),
                 {absl::StatusCode::kUnauthenticated, "unknown session token"});
  }
  if (name == "staging-quota") {
    // 4 blocks of about 384 KiB: more than --max-staging-bytes-per-client.
    auto data = ModelTensorData(9, 4, uint64_t{1} << 16);
    auto model = client::Model::Register(c, "staging-quota", ModelUploads(data, 4));
    return Check(name, model.status(),
                 {absl::StatusCode::kResourceExhausted, "max_staging_bytes_per_client = "});
  }
  if (name == "too-big") {
    // 4 blocks of about 4 MiB: more than the daemon's --max-pinned-bytes.
    auto data = ModelTensorData(7, 4, uint64_t{1} << 20);
    auto model = client::Model::Register(c, "too-big", ModelUploads(data, 4));
    return Check(name, model.status(),
                 {absl::StatusCode::kResourceExhausted, "--max-pinned-bytes"});
  }

  // The fast-path cases write into the request ring, whichever transport
  // the test asked the others to use.
  if (absl::StartsWith(name, "shm-")) ::setenv("BLOCKSWAP_LOAD_TRANSPORT", "shm", 1);
  auto data = ModelTensorData(3, 4, 1024);
  auto model = client::Model::Register(c, "rogue", ModelUploads(data, 4));
  if (!model.ok()) return Check(name, model.status(), {absl::StatusCode::kOk, ""});
  uint64_t slot_bytes = 0;
  for (const BlockSpec& block : (*model)->layout().blocks) slot_bytes = std::max(slot_bytes, block.bytes);
  // The daemon's ring, whatever the copy path: its request ring is what a
  // rogue writes into.
  auto device = c.LocalDevice(c.device_uuids().front());
  if (!device.ok()) return Check(name, device.status(), {absl::StatusCode::kOk, ""});
  auto ring = client::DaemonCopyRing::Create(c, **device, 2, slot_bytes);
  if (!ring.ok()) return Check(name, ring.status(), {absl::StatusCode::kOk, ""});
  const uint64_t ring_id = (*ring)->id();
  const std::string& model_id = (*model)->id();

  if (absl::StartsWith(name, "shm-")) {
    client::DaemonCopyRing& r = **ring;
    if (!r.has_request_ring()) {
      std::cerr << "rogue: blockswapd granted no request ring\n";
      return kClientSetupFailed;
    }
    const uint32_t handle = (*model)->handle();
    const std::string ring_text = absl::StrCat("ring ", ring_id, " failed in the daemon");
    if (name == "shm-bad-slot") {
      if (auto s = PushRaw(r, {7, 1, handle, 0}); !s.ok()) return Check(name, s, {});
      return Check(name, AwaitRingFailed(r),
                   {absl::StatusCode::kOutOfRange,
                    absl::StrCat(ring_text, " at slot 7: slot 7 out of range (ring ", ring_id,
                                 " has 2 slots)")});
    }
    if (name == "shm-unknown-handle") {
      if (auto s = PushRaw(r, {0, 1, handle + 41, 0}); !s.ok()) return Check(name, s, {});
      return Check(name, AwaitRingFailed(r),
                   {absl::StatusCode::kNotFound,
                    absl::StrCat("model handle ", handle + 41, " is not open in session")});
    }
    if (name == "shm-bad-block") {
      if (auto s = PushRaw(r, {0, 1, handle, 99}); !s.ok()) return Check(name, s, {});
      return Check(name, AwaitRingFailed(r),
                   {absl::StatusCode::kOutOfRange, "block 99 out of range (model has 4 blocks)"});
    }
    if (name == "shm-wrong-generation") {
      // Generation 5 of a slot never loaded, its consumed_seq never published.
      if (auto s = PushRaw(r, {0, 5, handle, 0}); !s.ok()) return Check(name, s, {});
      return Check(name, AwaitRingFailed(r),
                   {absl::StatusCode::kFailedPrecondition,
                    "slot 0 generation 5 requested, but the next generation is 1"});
    }
    if (name == "shm-tail-overrun") {
      // A tail 1000 entries past what the daemon has taken.
      ClientControlBlock& block = r.shared_ring_for_testing().client_control();
      block.request_tail.fetch_add(1000, std::memory_order_release);
      r.shared_ring_for_testing().doorbell()->Ring();
      return Check(name, AwaitRingFailed(r),
                   {absl::StatusCode::kFailedPrecondition,
                    "is 1000 entries past head 0 (the ring has 64 entries)"});
    }
    if (name == "shm-foreign-handle") {
      // Another session holds two models, the second of them the content
      // this session opened as handle 1; its handle 2 means nothing here.
      auto other = client::Connection::Connect(socket, "rogue-other");
      if (!other.ok()) return Check(name, other.status(), {});
      auto other_data = ModelTensorData(11, 2, 1024);
      auto first = client::Model::Register(**other, "other", ModelUploads(other_data, 2));
      if (!first.ok()) return Check(name, first.status(), {});
      auto second = client::Model::Open(**other, model_id);
      if (!second.ok()) return Check(name, second.status(), {});
      if ((*second)->handle() == handle) {
        std::cerr << "rogue: the other session's handle is also this session's\n";
        return kClientSetupFailed;
      }
      if (auto s = PushRaw(r, {0, 1, (*second)->handle(), 0}); !s.ok()) return Check(name, s, {});
      return Check(name, AwaitRingFailed(r),
                   {absl::StatusCode::kNotFound,
                    absl::StrCat("model handle ", (*second)->handle(), " is not open in session")});
    }
  }
  if (name == "unfreed-slot") {
    // Generation 1 loaded and in use; generation 2 asked for without
    // releasing the slot (consumed_seq still 0).
    if (auto s = (*ring)->Load(0, **model, 0, nullptr); !s.ok()) return Check(name, s, {});
    if (auto s = (*ring)->Wait(0, nullptr, absl::Seconds(10)); !s.ok()) return Check(name, s, {});
    (void)c.SendLoad(Request(ring_id, 0, model_id, 1, 2));
    return Check(name, AwaitRingError(c, ring_id),
                 {absl::StatusCode::kFailedPrecondition, "consumed_seq=0 (must be 1"});
  }
  if (name == "unknown-ring") {
    (void)c.SendLoad(Request(999999, 0, model_id, 0, 1));
    return Check(name, AwaitRingError(c, 999999), {absl::StatusCode::kNotFound, "no ring 999999"});
  }
  if (name == "bad-slot") {
    (void)c.SendLoad(Request(ring_id, 7, model_id, 0, 1));
    return Check(name, AwaitRingError(c, ring_id),
                 {absl::StatusCode::kOutOfRange, "slot 7 out of range (ring"});
  }
  if (name == "bad-block") {
    (void)c.SendLoad(Request(ring_id, 0, model_id, 99, 1));
    return Check(name, AwaitRingError(c, ring_id),
                 {absl::StatusCode::kOutOfRange, "block 99 out of range (model has 4 blocks)"});
  }
  if (name == "unknown-model") {
    (void)c.SendLoad(Request(ring_id, 0, std::string(64, 'a'), 0, 1));
    return Check(name, AwaitRingError(c, ring_id),
                 {absl::StatusCode::kNotFound, "is not open in this session"});
  }
  if (name == "foreign-ring") {
    // A second session (same process, own token) owns a ring; the first
    // session may not load into it.
    auto other = client::Connection::Connect(socket, "rogue-other");
    if (!other.ok()) return Check(name, other.status(), {});
    auto other_ring = client::Ring::Create(**other, (*other)->device_uuids().front(), 2, 4096);
    if (!other_ring.ok()) return Check(name, other_ring.status(), {});
    (void)c.SendLoad(Request((*other_ring)->id(), 0, model_id, 0, 1));
    return Check(name, AwaitRingError(c, (*other_ring)->id()),
                 {absl::StatusCode::kPermissionDenied, "belongs to another session"});
  }
  if (name == "ring-quota") {
    // The second ring fits (--max-rings-per-client=2), the third does not.
    if (auto s = RawCreateRing(c, c.token(), 2, slot_bytes); !s.ok()) return Check(name, s, {});
    return Check(name, RawCreateRing(c, c.token(), 2, slot_bytes),
                 {absl::StatusCode::kResourceExhausted, "max_rings_per_client = 2"});
  }
  if (name == "device-bytes-quota") {
    return Check(name, RawCreateRing(c, c.token(), 2, uint64_t{1} << 20),
                 {absl::StatusCode::kResourceExhausted, "max_device_bytes_per_client = "});
  }
  if (name == "foreign-destroy") {
    auto other = client::Connection::Connect(socket, "rogue-other");
    if (!other.ok()) return Check(name, other.status(), {});
    auto other_ring = client::Ring::Create(**other, (*other)->device_uuids().front(), 2, 4096);
    if (!other_ring.ok()) return Check(name, other_ring.status(), {});
    return Check(name, RawDestroyRing(c, (*other_ring)->id()),
                 {absl::StatusCode::kNotFound, absl::StrCat("no ring ", (*other_ring)->id())});
  }
  std::cerr << "rogue: unknown case '" << name << "'\n";
  return kClientSetupFailed;
}
BLOCKSWAP_CHILD_ROLE("rogue", RunRogue);

}  // namespace
}  // namespace blockswap::testing
