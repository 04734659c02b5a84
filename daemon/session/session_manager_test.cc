// SessionManager, in-process: a real manager on the host backend with one
// device, a real DeviceWorker behind its rings and a real model store under
// /dev/shm, as tests/fuzz/session_sequence_fuzzer.cc builds them. Each
// client session of this process has a real descriptor side channel (a
// socketpair), so every descriptor a reply names is checked on it.
//
// No assertion depends on how fast anything runs; every wait has a generous
// deadline that only turns a hang into a failure.
#include "daemon/session/session_manager.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.pb.h"
#include "daemon/budget/master_limits.h"
#include "daemon/device/device_worker.h"
#include "daemon/session/peer.h"
#include "daemon/store/model_store.h"
#include "shared/backend/backend.h"
#include "shared/build_info/build_info.h"
#include "shared/os/fd_passing.h"
#include "shared/protocol/load_protocol.h"
#include "shared/protocol/model_layout.h"
#include "shared/protocol/ring.h"
#include "shared/protocol/ring_wire.h"
#include "shared/protocol/side_channel_wire.h"
#include "tests/support/recording_load_sink.h"
#include "tests/support/test_model.h"

namespace blockswap::daemon {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kBootId = 0x5e5510;
constexpr uint64_t kMaxSlotBytes = 1 << 20;
// Only turns a hang into a failure; never a measure of speed.
constexpr absl::Duration kHangGuard = absl::Seconds(10);

using RecordingSink = ::blockswap::testing::RecordingLoadSink;
using ::blockswap::testing::Compose;
using ::blockswap::testing::TestModel;

// Two blocks: the sessions' tests need no more.
TestModel MakeModel(uint8_t seed) { return ::blockswap::testing::MakeModel(seed, 2); }

// One attached session of this process and the client end of its side
// channel.
struct Client {
  std::shared_ptr<Session> session;
  std::string token;
  UniqueFd channel;
};

class SessionManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = absl::StrCat("/dev/shm/blockswap-session-manager-test-", ::getpid());
    std::filesystem::remove_all(directory_);
    backend_ = OpenHostBackend(HostBackendOptions{});
    auto store = ModelStore::Open(
        ModelStoreOptions{.directory = directory_, .max_pinned_bytes = 16 << 20}, nullptr);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(store).value();
    auto worker = DeviceWorker::Start(device(), kBootId);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(worker).value();
    manager_ = std::make_unique<SessionManager>(
        *backend_, *store_, std::map<std::string, DeviceWorker*>{{uuid(), worker_.get()}}, kBootId,
        RequestLimits{.max_slot_bytes = kMaxSlotBytes});

    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
    ASSERT_GE(pidfd, 0) << "pidfd_open of this process";
    peer_.connection_id = 1;
    peer_.pid = ::getpid();
    peer_.uid = ::getuid();
    peer_.gid = ::getgid();
    peer_.allowed = true;
    peer_.pidfd = std::make_shared<UniqueFd>(pidfd);
  }

  void TearDown() override {
    manager_.reset();
    worker_.reset();
    store_.reset();
    std::filesystem::remove_all(directory_);
  }

  Device& device() const { return *backend_->devices()[0]; }
  std::string uuid() const { return device().info().uuid; }

  static v1::AttachRequest AttachRequest(const std::string& name = "test client") {
    v1::AttachRequest request;
    request.set_client_name(name);
    request.set_protocol_version(kProtocolVersion);
    return request;
  }

  // Attaches a session of this process without a side channel.
  Client AttachWithoutChannel(const std::string& name = "test client") {
    Client client;
    auto reply = manager_->Attach(peer_, AttachRequest(name));
    EXPECT_TRUE(reply.ok()) << reply.status();
    if (!reply.ok()) return client;
    client.token = reply->session_token();
    auto session = manager_->Authenticate(client.token, peer_);
    EXPECT_TRUE(session.ok()) << session.status();
    if (session.ok()) client.session = *session;
    return client;
  }

  // A socketpair: the daemon's end (non-blocking, as the listener makes it)
  // and the client's.
  static std::pair<UniqueFd, UniqueFd> ChannelPair() {
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    EXPECT_EQ(::fcntl(pair[0], F_SETFL, O_NONBLOCK), 0);
    return {UniqueFd(pair[0]), UniqueFd(pair[1])};
  }

  // Attaches a session of this process and connects its side channel.
  Client Attach(const std::string& name = "test client") {
    Client client = AttachWithoutChannel(name);
    auto [daemon_end, client_end] = ChannelPair();
    client.channel = std::move(client_end);
    absl::Status accepted = manager_->AcceptSideChannel(client.token, peer_, std::move(daemon_end));
    EXPECT_TRUE(accepted.ok()) << accepted;
    EXPECT_EQ(ExpectBatch(client, kSideChannelAcceptedBatch).size(), 0u);
    return client;
  }

  // The next message on the client's side channel: it must be there already
  // and be batch `batch`.
  static std::vector<UniqueFd> ExpectBatch(Client& client, uint64_t batch) {
    pollfd ready{client.channel.get(), POLLIN, 0};
    if (::poll(&ready, 1, 0) != 1) {
      ADD_FAILURE() << "batch " << batch << " is not on the side channel";
      return {};
    }
    auto message = ReceiveExactWithFds(client.channel, sizeof(FdBatchHeader));
    if (!message.ok()) {
      ADD_FAILURE() << message.status();
      return {};
    }
    FdBatchHeader header;
    std::memcpy(&header, message->payload.data(), sizeof(header));
    EXPECT_EQ(std::memcmp(header.magic, kFdBatchMagic, 4), 0);
    EXPECT_EQ(header.batch, batch);
    EXPECT_EQ(header.fd_count, message->fds.size());
    return std::move(message->fds);
  }

  static bool ChannelIsEmpty(const Client& client) {
    pollfd ready{client.channel.get(), POLLIN, 0};
    return ::poll(&ready, 1, 0) == 0;
  }

  std::shared_ptr<const Model> Register(const TestModel& model) {
    auto registered =
        store_->Register("registered", model.layout, model.content.data(), model.content.size());
    EXPECT_TRUE(registered.ok()) << registered.status();
    return registered.ok() ? registered->model : nullptr;
  }

  // Begins an upload of `model` (named `name`) and fills its staging area, as
  // a client does: the upload's reply, or the refusal.
  absl::StatusOr<v1::BeginUploadReply> StageUpload(Client& client, const TestModel& model,
                                                   const std::string& name = "") {
    v1::BeginUploadRequest begin;
    if (!name.empty()) begin.set_name(name);
    *begin.mutable_layout() = LayoutToProto(model.layout);
    auto upload = manager_->BeginUpload(*client.session, begin);
    if (!upload.ok()) return upload;
    std::vector<UniqueFd> staging = ExpectBatch(client, upload->staging().batch());
    EXPECT_EQ(staging.size(), 1u);
    if (staging.size() == 1) {
      EXPECT_EQ(::pwrite(staging[0].get(), model.content.data(), model.content.size(), 0),
                static_cast<ssize_t>(model.content.size()));
    }
    return upload;
  }

  absl::StatusOr<v1::ModelReply> Commit(Client& client, uint64_t upload_id) {
    v1::CommitUploadRequest commit;
    commit.set_upload_id(upload_id);
    return manager_->CommitUpload(*client.session, commit);
  }

  absl::StatusOr<v1::ModelReply> OpenModel(Client& client, const std::string& model_id) {
    v1::OpenModelRequest request;
    request.set_model_id(model_id);
    auto reply = manager_->OpenModel(*client.session, request);
    if (reply.ok()) {
      EXPECT_EQ(ExpectBatch(client, reply->block_masters(0).batch()).size(),
                static_cast<size_t>(reply->block_masters_size()));
    }
    return reply;
  }

  static v1::CreateRingRequest RingRequest(const std::string& device_uuid, uint32_t slots,
                                           uint64_t slot_bytes) {
    v1::CreateRingRequest request;
    request.set_device_uuid(device_uuid);
    request.set_slot_count(slots);
    request.set_slot_bytes(slot_bytes);
    return request;
  }

  // CreateRing on this daemon's device; a ring's descriptors are taken off
  // the side channel into `fds` when given.
  absl::StatusOr<v1::RingDescriptor> CreateRing(Client& client, uint32_t slots = 2,
                                                uint64_t slot_bytes = 4096,
                                                std::vector<UniqueFd>* fds = nullptr) {
    auto ring = manager_->CreateRing(*client.session, RingRequest(uuid(), slots, slot_bytes));
    if (ring.ok()) {
      std::vector<UniqueFd> sent = ExpectBatch(client, ring->daemon_control().batch());
      if (fds != nullptr) *fds = std::move(sent);
    }
    return ring;
  }

  // The client's import of a ring CreateRing made.
  std::unique_ptr<RingImport> CreateAndImportRing(Client& client, uint64_t slot_bytes) {
    std::vector<UniqueFd> fds;
    auto ring = CreateRing(client, 2, slot_bytes, &fds);
    EXPECT_TRUE(ring.ok()) << ring.status();
    if (!ring.ok()) return nullptr;
    auto exported = RingFromWire(*ring, std::move(fds), ring->daemon_control().batch());
    EXPECT_TRUE(exported.ok()) << exported.status();
    if (!exported.ok()) return nullptr;
    auto imported = RingImport::Import(device(), std::move(exported).value());
    EXPECT_TRUE(imported.ok()) << imported.status();
    return imported.ok() ? std::move(imported).value() : nullptr;
  }

  std::vector<RingSnapshot> WorkerRingsOf(uint64_t session_id) const {
    std::vector<RingSnapshot> out;
    for (RingSnapshot& ring : worker_->Snapshot()) {
      if (ring.session_id == session_id) out.push_back(std::move(ring));
    }
    return out;
  }

  // Whether every retired ring is freed in time. Without work the worker
  // wakes every 100 ms; a task for no ring wakes it at once.
  bool AwaitWorkerIdle() {
    worker_->Submit(LoadTask{});
    const absl::Time deadline = absl::Now() + kHangGuard;
    while (!worker_->idle()) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Microseconds(100));
    }
    return true;
  }

  static v1::LoadRequest Load(uint64_t ring_id, uint32_t slot, const std::string& model_id,
                              uint32_t block, uint32_t generation) {
    v1::LoadRequest request;
    request.set_ring_id(ring_id);
    request.set_slot(slot);
    request.set_model_id(model_id);
    request.set_block(block);
    request.set_generation(generation);
    return request;
  }

  std::string directory_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelStore> store_;
  std::unique_ptr<DeviceWorker> worker_;
  std::unique_ptr<SessionManager> manager_;
  Peer peer_;
  std::shared_ptr<RecordingSink> sink_ = std::make_shared<RecordingSink>();
};

// ---------------------------------------------------------------------------
// Attach and authentication

TEST_F(SessionManagerTest, AttachGivesASessionWhoseTokenAuthenticatesIt) {
  auto reply = manager_->Attach(peer_, AttachRequest("trainer"));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_TRUE(ValidateSessionToken(reply->session_token()).ok()) << reply->session_token();
  auto session = manager_->Authenticate(reply->session_token(), peer_);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->client_name(), "trainer");
  EXPECT_EQ((*session)->peer().pid, ::getpid());
  EXPECT_EQ(manager_->session_count(), 1u);
}

// A client whose daemon only paused could not detach its old session; its
// new Attach names it, and the process keeps one session, not one a pause.
TEST_F(SessionManagerTest, AnAttachNamingItsProcesssOldSessionReplacesIt) {
  Client old = AttachWithoutChannel();
  v1::AttachRequest request = AttachRequest();
  request.set_replaces_session_token(old.token);
  auto reply = manager_->Attach(peer_, request);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_FALSE(manager_->Authenticate(old.token, peer_).ok());
  EXPECT_TRUE(manager_->Authenticate(reply->session_token(), peer_).ok());
  EXPECT_EQ(manager_->session_count(), 1u);
}

// A forked worker inherits its parent's token: naming it ends nothing.
TEST_F(SessionManagerTest, AnotherProcessNamingASessionDoesNotReplaceIt) {
  Client parent = AttachWithoutChannel();
  Peer child = peer_;
  child.pid = peer_.pid + 1;
  v1::AttachRequest request = AttachRequest();
  request.set_replaces_session_token(parent.token);
  auto reply = manager_->Attach(child, request);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_TRUE(manager_->Authenticate(parent.token, peer_).ok());
  EXPECT_EQ(manager_->session_count(), 2u);
}

TEST_F(SessionManagerTest, AReplacedTokenThatIsNoTokenIsRefused) {
  v1::AttachRequest request = AttachRequest();
  request.set_replaces_session_token("short");
  auto reply = manager_->Attach(peer_, request);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(reply.status().message(), "replaces_session_token of 5 bytes"))
      << reply.status();
}

TEST_F(SessionManagerTest, EverySessionGetsItsOwnToken) {
  Client first = AttachWithoutChannel();
  Client second = AttachWithoutChannel();
  EXPECT_NE(first.token, second.token);
  EXPECT_NE(first.session->id(), second.session->id());
  EXPECT_EQ(manager_->session_count(), 2u);
}

TEST_F(SessionManagerTest, AttachReportsTheBackendItsDevicesAndTheBootId) {
  auto reply = manager_->Attach(peer_, AttachRequest());
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->backend(), v1::BACKEND_HOST);
  EXPECT_EQ(reply->daemon_boot_id(), kBootId);
  ASSERT_EQ(reply->devices_size(), 1);
  EXPECT_EQ(reply->devices(0).uuid(), uuid());
  EXPECT_TRUE(reply->devices(0).error().empty()) << "a healthy device reports no error";
}

TEST_F(SessionManagerTest, AttachWithAnotherProtocolVersionIsRefusedNamingBoth) {
  v1::AttachRequest request = AttachRequest();
  request.set_protocol_version(kProtocolVersion + 1);
  auto reply = manager_->Attach(peer_, request);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reply.status().message(),
              HasSubstr(absl::StrCat("client speaks protocol version ", kProtocolVersion + 1,
                                     ", this blockswapd speaks ", kProtocolVersion,
                                     " (blockswapd version ", ThisBuild().version, ")")));
  EXPECT_EQ(manager_->session_count(), 0u);
}

TEST_F(SessionManagerTest, AttachFromANewerClientLibraryIsRefusedNamingBothAbiVersions) {
  v1::AttachRequest request = AttachRequest();
  request.set_client_abi_version(1000);
  auto reply = manager_->Attach(peer_, request);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reply.status().message(),
              HasSubstr("client library has C ABI version 1000, this blockswapd serves C ABI "
                        "versions up to "));
  EXPECT_THAT(reply.status().message(),
              HasSubstr(absl::StrCat("blockswapd version ", ThisBuild().version, ")")));
  EXPECT_EQ(manager_->session_count(), 0u);
}

TEST_F(SessionManagerTest, AnUnknownTokenIsUnauthenticated) {
  AttachWithoutChannel();
  auto session = manager_->Authenticate(std::string(32, 'a'), peer_);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(session.status().message(), HasSubstr("unknown session token"));
}

TEST_F(SessionManagerTest, AMalformedTokenIsUnauthenticated) {
  auto session = manager_->Authenticate("not-a-token", peer_);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(session.status().message(), HasSubstr("malformed session token"));
}

TEST_F(SessionManagerTest, ATokenPresentedByAnotherProcessIsPermissionDenied) {
  Client client = AttachWithoutChannel();
  Peer other = peer_;
  other.pid = peer_.pid + 1;
  auto session = manager_->Authenticate(client.token, other);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(session.status().message(), HasSubstr(absl::StrCat("session ", client.session->id(),
                                                                 " belongs to pid ", peer_.pid)));
}

TEST_F(SessionManagerTest, AfterStopAttachingNewSessionsAreRefusedAsUnavailable) {
  manager_->StopAttaching();
  EXPECT_TRUE(manager_->draining());
  auto reply = manager_->Attach(peer_, AttachRequest());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(manager_->session_count(), 0u);
}

TEST_F(SessionManagerTest, ASecondSideChannelForASessionIsRefused) {
  Client client = Attach();
  auto [daemon_end, client_end] = ChannelPair();
  absl::Status second = manager_->AcceptSideChannel(client.token, peer_, std::move(daemon_end));
  EXPECT_EQ(second.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(second.message(), HasSubstr("already has a descriptor side channel"));
}

TEST_F(SessionManagerTest, AReplyWithDescriptorsNeedsTheSideChannel) {
  std::shared_ptr<const Model> model = Register(MakeModel(1));
  ASSERT_NE(model, nullptr);
  Client client = AttachWithoutChannel();
  v1::OpenModelRequest request;
  request.set_model_id(model->id());
  auto reply = manager_->OpenModel(*client.session, request);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reply.status().message(), HasSubstr("no descriptor side channel"));
}

// ---------------------------------------------------------------------------
// Uploads and models

TEST_F(SessionManagerTest, AnUploadCommittedBecomesAModelOpenInTheSession) {
  Client client = Attach();
  TestModel model = MakeModel(2);
  auto upload = StageUpload(client, model, "uploaded");
  ASSERT_TRUE(upload.ok()) << upload.status();
  EXPECT_EQ(upload->staging_bytes(), model.placement.total_bytes);
  ASSERT_EQ(upload->block_offsets_size(), 2);
  EXPECT_EQ(upload->block_offsets(1), model.placement.offsets[1]);

  auto reply = Commit(client, upload->upload_id());
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_FALSE(reply->already_present());
  EXPECT_TRUE(ValidateModelId(reply->model_id()).ok()) << reply->model_id();
  EXPECT_EQ(reply->model_handle(), 1u);
  std::shared_ptr<const Model> stored = store_->Find(reply->model_id());
  ASSERT_NE(stored, nullptr) << "the model is not in the store";
  EXPECT_EQ(stored->name(), "uploaded");
  EXPECT_NE(client.session->models->FindById(reply->model_id()), nullptr)
      << "the model is not open in the session";

  // The block masters the client is sent hold what it uploaded.
  ASSERT_EQ(reply->block_masters_size(), 2);
  ASSERT_EQ(reply->block_master_bytes_size(), 2);
  EXPECT_EQ(reply->block_masters(0).batch(), reply->block_masters(1).batch());
  std::vector<UniqueFd> masters = ExpectBatch(client, reply->block_masters(0).batch());
  ASSERT_EQ(masters.size(), 2u);
  for (size_t b = 0; b < 2; ++b) {
    const uint64_t size = reply->block_master_bytes(b);
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_SHARED,
                          masters[reply->block_masters(b).index()].get(), 0);
    ASSERT_NE(mapped, MAP_FAILED);
    EXPECT_EQ(std::memcmp(mapped, model.content.data() + model.placement.offsets[b],
                          model.layout.blocks[b].bytes),
              0)
        << "block " << b;
    ::munmap(mapped, size);
  }
}

// A model of block `a` of `first` followed by block `b` of `second` (same
// layouts and bytes): what a trainer streaming another subset uploads.
Sha256Digest HashOfBlock(const TestModel& model, size_t b) {
  return Sha256Of(model.content.data() + model.placement.offsets[b], model.layout.blocks[b].bytes);
}

std::string IdOfBlock(const TestModel& model, size_t b) {
  return BlockId(model.layout.blocks[b], HashOfBlock(model, b));
}

TEST_F(SessionManagerTest, AnUploadSendsOnlyTheBlocksTheDaemonDoesNotHold) {
  TestModel held = MakeModel(40);
  TestModel fresh = MakeModel(41);
  ASSERT_NE(Register(held), nullptr);
  TestModel model = Compose({{held, 1}, {fresh, 0}});
  Client client = Attach();

  v1::HeldBlocksRequest query;
  query.add_block_ids(IdOfBlock(model, 0));
  query.add_block_ids(IdOfBlock(model, 1));
  query.add_block_ids(std::string(64, 'f'));
  auto answer = manager_->HeldBlocks(*client.session, query);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->held_size(), 3);
  EXPECT_TRUE(answer->held(0));
  EXPECT_FALSE(answer->held(1));
  EXPECT_FALSE(answer->held(2));

  v1::BeginUploadRequest begin;
  *begin.mutable_layout() = LayoutToProto(model.layout);
  begin.add_held_blocks(0);
  const Sha256Digest hash = HashOfBlock(model, 0);
  begin.add_held_block_hashes(reinterpret_cast<const char*>(hash.data()), hash.size());
  auto upload = manager_->BeginUpload(*client.session, begin);
  ASSERT_TRUE(upload.ok()) << upload.status();
  ASSERT_EQ(upload->block_offsets_size(), 1) << "only the missing block is staged";
  EXPECT_LT(upload->staging_bytes(), model.placement.total_bytes);
  std::vector<UniqueFd> staging = ExpectBatch(client, upload->staging().batch());
  ASSERT_EQ(staging.size(), 1u);
  const uint64_t bytes = model.layout.blocks[1].bytes;
  ASSERT_EQ(::pwrite(staging[0].get(), model.content.data() + model.placement.offsets[1], bytes,
                     static_cast<off_t>(upload->block_offsets(0))),
            static_cast<ssize_t>(bytes));
  staging.clear();
  auto reply = Commit(client, upload->upload_id());
  ASSERT_TRUE(reply.ok()) << reply.status();
  ExpectBatch(client, reply->block_masters(0).batch());
  std::shared_ptr<const Model> composed = store_->Find(reply->model_id());
  ASSERT_NE(composed, nullptr);
  EXPECT_EQ(composed->id(), ModelId(model.layout, {HashOfBlock(model, 0), HashOfBlock(model, 1)}))
      << "a composed model has the id of its content";
  for (size_t b = 0; b < 2; ++b) {
    EXPECT_EQ(std::memcmp(composed->block(b), model.content.data() + model.placement.offsets[b],
                          model.layout.blocks[b].bytes),
              0)
        << "block " << b;
  }
  EXPECT_EQ(store_->block_count(), 3u) << "the held block was stored again";
}

TEST_F(SessionManagerTest, BadHeldBlockRequestsGetPreciseErrorsAndDisturbNoOne) {
  TestModel model = MakeModel(42);
  ASSERT_NE(Register(MakeModel(43)), nullptr);
  Client client = Attach();
  Client other = Attach("other");

  v1::HeldBlocksRequest query;
  query.add_block_ids(std::string(64, 'a'));
  query.add_block_ids("not-a-block-id");
  auto answer = manager_->HeldBlocks(*client.session, query);
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      answer.status().message(),
      HasSubstr("block id 1: block id must be 64 lowercase hex digits (got 14 characters)"));

  const Sha256Digest hash = HashOfBlock(model, 0);
  const std::string hash_bytes(reinterpret_cast<const char*>(hash.data()), hash.size());
  struct Case {
    std::vector<uint32_t> blocks;
    std::vector<std::string> hashes;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{0, 1},
       {hash_bytes},
       absl::StatusCode::kInvalidArgument,
       "2 held blocks but 1 held block hashes"},
      {{5},
       {hash_bytes},
       absl::StatusCode::kInvalidArgument,
       "held block 5 out of range (layout has 2 blocks)"},
      {{1, 0},
       {hash_bytes, hash_bytes},
       absl::StatusCode::kInvalidArgument,
       "held block 0 after block 1 (positions must be strictly ascending)"},
      {{0},
       {hash_bytes.substr(1)},
       absl::StatusCode::kInvalidArgument,
       "the hash of held block 0 has 31 bytes"},
      {{0},
       {hash_bytes},
       absl::StatusCode::kFailedPrecondition,
       absl::StrCat("held block 0 (block id ", IdOfBlock(model, 0).substr(0, 16),
                    "...) is not held by this blockswapd in a model you may see: upload it")},
  };
  for (const Case& bad : cases) {
    v1::BeginUploadRequest begin;
    *begin.mutable_layout() = LayoutToProto(model.layout);
    for (uint32_t block : bad.blocks) begin.add_held_blocks(block);
    for (const std::string& h : bad.hashes) begin.add_held_block_hashes(h);
    auto upload = manager_->BeginUpload(*client.session, begin);
    EXPECT_EQ(upload.status().code(), bad.code) << upload.status();
    EXPECT_THAT(upload.status().message(), HasSubstr(bad.message));
  }
  EXPECT_TRUE(ChannelIsEmpty(client)) << "a refused upload sent a staging area";
  {
    absl::MutexLock lock(&client.session->mu);
    EXPECT_TRUE(client.session->uploads.empty());
  }
  // Both sessions still upload.
  for (Client* session : {&client, &other}) {
    auto upload = StageUpload(*session, session == &client ? model : MakeModel(44));
    ASSERT_TRUE(upload.ok()) << upload.status();
    auto reply = Commit(*session, upload->upload_id());
    ASSERT_TRUE(reply.ok()) << reply.status();
  }
}

TEST_F(SessionManagerTest, UnderRegistrantGroupABlockOnlyInModelsTheCallerMayNotSeeIsMissing) {
  manager_ = std::make_unique<SessionManager>(
      *backend_, *store_, std::map<std::string, DeviceWorker*>{{uuid(), worker_.get()}}, kBootId,
      RequestLimits{.max_slot_bytes = kMaxSlotBytes},
      ModelVisibility(ModelAccess::kRegistrantGroup, /*daemon_uid=*/0));
  TestModel secret = MakeModel(45);
  auto registered = store_->Register("secret", secret.layout, secret.content.data(),
                                     secret.content.size(), Registrant{4242, 4242, "upload"});
  ASSERT_TRUE(registered.ok()) << registered.status();
  peer_.uid = 5151;  // neither root, the daemon, nor in the registrant's group
  peer_.gid = 5151;
  Client client = Attach();
  v1::HeldBlocksRequest query;
  query.add_block_ids(IdOfBlock(secret, 0));
  auto answer = manager_->HeldBlocks(*client.session, query);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->held_size(), 1);
  EXPECT_FALSE(answer->held(0)) << "a block of a model the caller may not see counts as held";

  v1::BeginUploadRequest begin;
  *begin.mutable_layout() = LayoutToProto(secret.layout);
  const Sha256Digest hash = HashOfBlock(secret, 0);
  begin.add_held_blocks(0);
  begin.add_held_block_hashes(reinterpret_cast<const char*>(hash.data()), hash.size());
  auto upload = manager_->BeginUpload(*client.session, begin);
  EXPECT_EQ(upload.status().code(), absl::StatusCode::kFailedPrecondition) << upload.status();
  EXPECT_THAT(upload.status().message(), HasSubstr("in a model you may see: upload it"));
}

TEST_F(SessionManagerTest, UploadingContentAlreadyRegisteredFindsItsModel) {
  TestModel model = MakeModel(3);
  std::shared_ptr<const Model> registered = Register(model);
  ASSERT_NE(registered, nullptr);
  Client client = Attach();
  auto upload = StageUpload(client, model);
  ASSERT_TRUE(upload.ok()) << upload.status();
  auto reply = Commit(client, upload->upload_id());
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_TRUE(reply->already_present());
  EXPECT_EQ(reply->model_id(), registered->id());
}

TEST_F(SessionManagerTest, AnUploadCannotBeCommittedTwice) {
  Client client = Attach();
  TestModel model = MakeModel(4);
  auto upload = StageUpload(client, model);
  ASSERT_TRUE(upload.ok()) << upload.status();
  auto committed = Commit(client, upload->upload_id());
  ASSERT_TRUE(committed.ok()) << committed.status();
  ExpectBatch(client, committed->block_masters(0).batch());

  auto again = Commit(client, upload->upload_id());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(again.status().message(),
              HasSubstr(absl::StrCat("no upload ", upload->upload_id(), " in session ",
                                     client.session->id())));
}

TEST_F(SessionManagerTest, AnUploadOverTheStagingQuotaIsRefusedBeforeAnyStagingIsSent) {
  TestModel model = MakeModel(5);
  manager_->quotas().Set(
      ClientQuotas{.per_client = {.staging_bytes = model.placement.total_bytes - 1}});
  Client client = Attach();
  v1::BeginUploadRequest begin;
  *begin.mutable_layout() = LayoutToProto(model.layout);
  auto upload = manager_->BeginUpload(*client.session, begin);
  EXPECT_EQ(upload.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(upload.status().message(), HasSubstr("max_staging_bytes_per_client"));
  EXPECT_TRUE(ChannelIsEmpty(client)) << "a refused upload sent a staging area";
  absl::MutexLock lock(&client.session->mu);
  EXPECT_TRUE(client.session->uploads.empty());
}

TEST_F(SessionManagerTest, OpeningAModelByIdSendsItsLayoutAndMasters) {
  std::shared_ptr<const Model> model = Register(MakeModel(6));
  ASSERT_NE(model, nullptr);
  Client client = Attach();
  v1::OpenModelRequest request;
  request.set_model_id(model->id());
  auto reply = manager_->OpenModel(*client.session, request);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->model_id(), model->id());
  EXPECT_TRUE(reply->already_present());
  EXPECT_EQ(reply->model_handle(), 1u);
  ASSERT_EQ(reply->layout().blocks_size(), 2);
  EXPECT_EQ(reply->layout().blocks(1).bytes(), model->block_bytes(1));
  ASSERT_EQ(reply->block_masters_size(), 2);
  ASSERT_EQ(reply->block_master_bytes_size(), 2);
  EXPECT_EQ(reply->block_master_bytes(1), model->block_master(1)->file_bytes());
  std::vector<UniqueFd> masters = ExpectBatch(client, reply->block_masters(0).batch());
  ASSERT_EQ(masters.size(), 2u);
  for (size_t b = 0; b < 2; ++b) {
    const UniqueFd& fd = masters[reply->block_masters(b).index()];
    struct stat st {};
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), model->block_master(b)->file_bytes());
    EXPECT_EQ(::fcntl(fd.get(), F_GETFL) & O_ACCMODE, O_RDONLY)
        << "a client may only read the masters";
  }
}

// The descriptor reserve: a model open that would leave fewer than
// kDescriptorReserve of RLIMIT_NOFILE free is refused naming the limit, and
// answered once the limit leaves room.
TEST_F(SessionManagerTest, AModelOpenThatWouldEatTheDescriptorReserveIsRefusedNamingTheLimit) {
  std::shared_ptr<const Model> model = Register(MakeModel(6));
  ASSERT_NE(model, nullptr);
  Client client = Attach();
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  int open = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++open;
  }
  // Room for the reserve and one descriptor, not the model's two.
  struct rlimit tight = saved;
  tight.rlim_cur = open + kDescriptorReserve + 1;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  auto refused = OpenModel(client, model->id());
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                absl::StrCat("of its RLIMIT_NOFILE = ", tight.rlim_cur,
                                             " open and keeps ", kDescriptorReserve)))
      << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "LimitNOFILE="));
  EXPECT_TRUE(OpenModel(client, model->id()).ok());
}

TEST_F(SessionManagerTest, OpeningAModelTwiceKeepsItsHandle) {
  std::shared_ptr<const Model> model = Register(MakeModel(7));
  ASSERT_NE(model, nullptr);
  Client client = Attach();
  auto first = OpenModel(client, model->id());
  auto second = OpenModel(client, model->id());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->model_handle(), second->model_handle());
}

TEST_F(SessionManagerTest, OpeningAModelThatIsNotRegisteredIsNotFound) {
  Client client = Attach();
  const std::string id(64, 'e');
  auto reply = OpenModel(client, id);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(reply.status().message(), HasSubstr("model " + id + " is not registered"));
  EXPECT_TRUE(ChannelIsEmpty(client));
}

TEST_F(SessionManagerTest, OpeningAMalformedModelIdIsInvalidArgument) {
  Client client = Attach();
  auto reply = OpenModel(client, "ABC");
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reply.status().message(), HasSubstr("model id must be 64 lowercase hex digits"));
}

// ---------------------------------------------------------------------------
// Rings

TEST_F(SessionManagerTest, ARingIsCreatedOnTheDeviceAndTheClientCanImportIt) {
  Client client = Attach();
  std::vector<UniqueFd> fds;
  auto ring = CreateRing(client, 3, 8192, &fds);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->device_uuid(), uuid());
  EXPECT_EQ(ring->slot_count(), 3u);
  EXPECT_EQ(ring->slot_bytes(), 8192u);
  EXPECT_EQ(ring->daemon_boot_id(), kBootId);
  EXPECT_EQ(ring->request_ring_capacity(), 0u) << "not asked for";
  auto exported = RingFromWire(*ring, std::move(fds), ring->daemon_control().batch());
  ASSERT_TRUE(exported.ok()) << exported.status();
  auto imported = RingImport::Import(device(), std::move(exported).value());
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ((*imported)->ring_id(), ring->ring_id());

  std::vector<RingSnapshot> served = WorkerRingsOf(client.session->id());
  ASSERT_EQ(served.size(), 1u) << "the worker does not serve the ring";
  EXPECT_EQ(served[0].ring_id, ring->ring_id());
  EXPECT_EQ(served[0].shape.slot_count, 3u);
  absl::MutexLock lock(&client.session->mu);
  EXPECT_EQ(client.session->rings.count(ring->ring_id()), 1u);
}

TEST_F(SessionManagerTest, ARingAskedWithARequestRingGetsOne) {
  Client client = Attach();
  v1::CreateRingRequest request = RingRequest(uuid(), 2, 4096);
  request.set_request_ring(true);
  auto ring = manager_->CreateRing(*client.session, request);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->request_ring_capacity(), kRequestRingCapacity);
  ExpectBatch(client, ring->daemon_control().batch());
}

TEST_F(SessionManagerTest, ARingOnAnUnknownDeviceIsRefusedNamingTheDevices) {
  Client client = Attach();
  auto ring = manager_->CreateRing(*client.session, RingRequest("GPU-nonexistent", 2, 4096));
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ring.status().message(), HasSubstr("device GPU-nonexistent is not driven"));
  EXPECT_THAT(ring.status().message(), HasSubstr("(it has: " + uuid() + ")"));
  EXPECT_TRUE(ChannelIsEmpty(client));
  EXPECT_EQ(worker_->stats().rings, 0u);
}

TEST_F(SessionManagerTest, ARingOfMoreSlotsThanTheMaximumIsRefused) {
  Client client = Attach();
  auto ring = CreateRing(client, kMaxRingSlots + 1);
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ring.status().message(),
              HasSubstr(absl::StrCat("ring of ", kMaxRingSlots + 1, " slots (must be 1..",
                                     kMaxRingSlots, ")")));
  EXPECT_EQ(worker_->stats().rings, 0u);
}

TEST_F(SessionManagerTest, ARingOfNoSlotsIsRefused) {
  Client client = Attach();
  auto ring = CreateRing(client, 0);
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ring.status().message(), HasSubstr("ring of 0 slots"));
}

TEST_F(SessionManagerTest, ARingWithSlotsOverTheSlotByteLimitIsRefused) {
  Client client = Attach();
  EXPECT_TRUE(CreateRing(client, 1, kMaxSlotBytes).ok()) << "the limit itself is allowed";
  auto ring = CreateRing(client, 1, kMaxSlotBytes + 1);
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ring.status().message(),
              HasSubstr(absl::StrCat("ring slots of ", kMaxSlotBytes + 1, " bytes (at most ",
                                     kMaxSlotBytes, ")")));
  EXPECT_EQ(worker_->stats().rings, 1u);
}

TEST_F(SessionManagerTest, ARingOverTheRingQuotaIsRefusedAndNothingIsAllocated) {
  manager_->quotas().Set(ClientQuotas{.per_client = {.rings = 1}});
  Client client = Attach();
  ASSERT_TRUE(CreateRing(client).ok());
  auto second = CreateRing(client);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("process ", ::getpid(), " (uid ", ::getuid(),
                                     ") would hold 2 rings (1 held + 1 asked), over "
                                     "max_rings_per_client = 1")));
  EXPECT_EQ(worker_->stats().rings, 1u);
  EXPECT_TRUE(ChannelIsEmpty(client));
}

// Quotas count per process: ten sessions of one process do not get ten.
TEST_F(SessionManagerTest, TheRingQuotaIsPerProcessNotPerSession) {
  manager_->quotas().Set(ClientQuotas{.per_client = {.rings = 1}});
  Client first = Attach();
  Client second = Attach();
  EXPECT_TRUE(CreateRing(first).ok());
  auto refused = CreateRing(second);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("max_rings_per_client = 1"));
}

TEST_F(SessionManagerTest, SessionsOverTheProcessQuotaAreRefusedAndAnEndedOneFreesItsPlace) {
  manager_->quotas().Set(ClientQuotas{.per_client = {.sessions = 2}});
  Client first = Attach();
  Client second = Attach();
  auto third = manager_->Attach(peer_, AttachRequest("third"));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      third.status().message(),
      HasSubstr("would hold 3 sessions (2 held + 1 asked), over max_sessions_per_client = 2"));
  manager_->Detach(*first.session);
  EXPECT_TRUE(manager_->Attach(peer_, AttachRequest("third")).ok());
}

// The ring's charge lives with the ring in its worker (DeviceWorkerTest
// ARetiredRingKeepsItsChargeUntilItIsFreed); once freed it is returned.
TEST_F(SessionManagerTest, AFreedRingGivesItsPlaceInTheQuotaBack) {
  manager_->quotas().Set(ClientQuotas{.per_client = {.rings = 1}});
  Client client = Attach();
  auto ring = CreateRing(client);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(manager_->accounts().HeldByProcess(::getpid()).rings, 1u);
  v1::DestroyRingRequest destroy;
  destroy.set_ring_id(ring->ring_id());
  ASSERT_TRUE(manager_->DestroyRing(*client.session, destroy).ok());
  ASSERT_TRUE(AwaitWorkerIdle());
  EXPECT_EQ(manager_->accounts().HeldByProcess(::getpid()).rings, 0u);
  EXPECT_TRUE(CreateRing(client).ok()) << "a freed ring gives its place back";
}

TEST_F(SessionManagerTest, ARingOverTheDeviceByteQuotaIsRefused) {
  manager_->quotas().Set(ClientQuotas{.per_client = {.device_bytes = 3 * 4096}});
  Client client = Attach();
  ASSERT_TRUE(CreateRing(client, 2, 4096).ok());
  auto over = CreateRing(client, 2, 4096);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(),
              HasSubstr("would hold 16384 bytes of ring memory (8192 held + 8192 asked), over "
                        "max_device_bytes_per_client = 12288"));
  EXPECT_TRUE(CreateRing(client, 1, 4096).ok()) << "what still fits is granted";
}

TEST_F(SessionManagerTest, SessionsAndRingsAreChargedTheDescriptorsTheyHold) {
  // One session (2) and one ring (4) fit; the next ring does not.
  manager_->quotas().Set(ClientQuotas{.per_uid = {.descriptors = 2 + 4}});
  Client client = Attach();
  ASSERT_TRUE(CreateRing(client).ok());
  EXPECT_EQ(manager_->accounts().HeldByUid(::getuid()).descriptors, 6u);
  auto over = CreateRing(client);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(),
              HasSubstr("would hold 10 descriptors (6 held + 4 asked), over "
                        "max_descriptors_per_uid = 6"));
}

TEST_F(SessionManagerTest, AutoChargesAUidsRingBytesToItsShareOfEachDevice) {
  // The host device's share: half of its memory less the reserve, at most
  // half of the node's budget (none here): far more than these rings.
  manager_->quotas().Set(ClientQuotas{.per_uid = {.device_bytes = kAutoLimit}});
  Client client = Attach();
  ASSERT_TRUE(CreateRing(client, 2, 4096).ok()) << "kAutoLimit is not a limit of the uid's total";
  EXPECT_EQ(manager_->accounts().HeldByUid(::getuid()).device_bytes, 8192u);
}

TEST_F(SessionManagerTest, DestroyingARingRetiresItOnTheDevice) {
  Client client = Attach();
  auto ring = CreateRing(client);
  ASSERT_TRUE(ring.ok()) << ring.status();
  v1::DestroyRingRequest destroy;
  destroy.set_ring_id(ring->ring_id());
  ASSERT_TRUE(manager_->DestroyRing(*client.session, destroy).ok());
  EXPECT_TRUE(WorkerRingsOf(client.session->id()).empty());
  EXPECT_TRUE(AwaitWorkerIdle()) << "the destroyed ring was never freed";
  {
    absl::MutexLock lock(&client.session->mu);
    EXPECT_TRUE(client.session->rings.empty());
  }
  absl::Status again = manager_->DestroyRing(*client.session, destroy);
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
}

TEST_F(SessionManagerTest, ARingOfAnotherSessionCannotBeDestroyed) {
  Client owner = Attach();
  Client other = Attach();
  auto ring = CreateRing(owner);
  ASSERT_TRUE(ring.ok()) << ring.status();
  v1::DestroyRingRequest destroy;
  destroy.set_ring_id(ring->ring_id());
  absl::Status destroyed = manager_->DestroyRing(*other.session, destroy);
  EXPECT_EQ(destroyed.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(destroyed.message(), HasSubstr(absl::StrCat("no ring ", ring->ring_id(),
                                                          " in session ", other.session->id())));
  EXPECT_EQ(WorkerRingsOf(owner.session->id()).size(), 1u) << "the owner's ring is gone";
}

// ---------------------------------------------------------------------------
// Loads

TEST_F(SessionManagerTest, ALoadFillsTheSlotWithTheBlocksBytes) {
  std::shared_ptr<const Model> model = Register(MakeModel(8));
  ASSERT_NE(model, nullptr);
  Client client = Attach();
  ASSERT_TRUE(OpenModel(client, model->id()).ok());
  std::unique_ptr<RingImport> ring = CreateAndImportRing(client, model->block_bytes(1));
  ASSERT_NE(ring, nullptr);
  auto compute = device().CreateStream();
  ASSERT_TRUE(compute.ok());
  RingConsumer consumer(*ring);
  absl::StatusOr<uint32_t> generation = consumer.BeginLoad(0, **compute);
  ASSERT_TRUE(generation.ok()) << generation.status();

  ASSERT_TRUE(manager_
                  ->SubmitLoad(*client.session,
                               Load(ring->ring_id(), 0, model->id(), 1, *generation), sink_)
                  .ok());
  ASSERT_TRUE(consumer.AwaitLoaded(0, **compute, kHangGuard).ok());
  ASSERT_TRUE((*compute)->Synchronize().ok());
  EXPECT_EQ(std::memcmp(ring->slot(0), model->block(1), model->block_bytes(1)), 0);
  EXPECT_TRUE(sink_->events().empty());
  absl::MutexLock lock(&client.session->mu);
  EXPECT_EQ(client.session->loads, 1u);
  EXPECT_EQ(client.session->rejected_loads, 0u);
}

TEST_F(SessionManagerTest, ALoadOfAModelNotOpenInTheSessionIsRefusedAndFailsTheRing) {
  std::shared_ptr<const Model> model = Register(MakeModel(9));
  ASSERT_NE(model, nullptr);
  Client client = Attach();  // never opens the model
  std::unique_ptr<RingImport> ring = CreateAndImportRing(client, 4096);
  ASSERT_NE(ring, nullptr);
  absl::Status submitted =
      manager_->SubmitLoad(*client.session, Load(ring->ring_id(), 0, model->id(), 0, 1), sink_);
  EXPECT_EQ(submitted.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(submitted.message(), HasSubstr("is not open in this session"));
  // The client waiting on the ring hears of it in the status word.
  const absl::Time deadline = absl::Now() + kHangGuard;
  while (ring->control().status.error_code.load() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Microseconds(100));
  }
  EXPECT_EQ(ring->control().status.error_code.load(),
            static_cast<uint32_t>(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(ring->control().error_message), HasSubstr("is not open in this session"));
  absl::MutexLock lock(&client.session->mu);
  EXPECT_EQ(client.session->loads, 0u);
  EXPECT_EQ(client.session->rejected_loads, 1u);
}

TEST_F(SessionManagerTest, ALoadOnAnotherSessionsRingIsPermissionDeniedNamingTheOwner) {
  std::shared_ptr<const Model> model = Register(MakeModel(10));
  ASSERT_NE(model, nullptr);
  Client owner = Attach();
  Client intruder = Attach();
  ASSERT_TRUE(OpenModel(intruder, model->id()).ok());
  auto ring = CreateRing(owner);
  ASSERT_TRUE(ring.ok()) << ring.status();
  absl::Status submitted =
      manager_->SubmitLoad(*intruder.session, Load(ring->ring_id(), 0, model->id(), 0, 1), sink_);
  EXPECT_EQ(submitted.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(submitted.message(),
              HasSubstr(absl::StrCat("ring ", ring->ring_id(), " belongs to another session (",
                                     owner.session->id(), ")")));
  std::vector<RingSnapshot> served = WorkerRingsOf(owner.session->id());
  ASSERT_EQ(served.size(), 1u);
  EXPECT_TRUE(served[0].status.ok()) << "the intruder failed the owner's ring";
}

TEST_F(SessionManagerTest, ALoadOnARingThatNeverExistedIsNotFound) {
  Client client = Attach();
  absl::Status submitted =
      manager_->SubmitLoad(*client.session, Load(99, 0, std::string(64, 'a'), 0, 1), sink_);
  EXPECT_EQ(submitted.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(submitted.message(),
              HasSubstr(absl::StrCat("no ring 99 in session ", client.session->id())));
}

// ---------------------------------------------------------------------------
// The end of a session

TEST_F(SessionManagerTest, EndingASessionReleasesEverythingItOwned) {
  std::shared_ptr<const Model> model = Register(MakeModel(11));
  ASSERT_NE(model, nullptr);
  Client client = Attach();
  ASSERT_TRUE(OpenModel(client, model->id()).ok());
  ASSERT_TRUE(CreateRing(client).ok());
  v1::BeginUploadRequest begin;
  *begin.mutable_layout() = LayoutToProto(MakeModel(12).layout);
  auto upload = manager_->BeginUpload(*client.session, begin);
  ASSERT_TRUE(upload.ok()) << upload.status();
  ExpectBatch(client, upload->staging().batch());
  const uint64_t id = client.session->id();

  manager_->Detach(*client.session);

  EXPECT_EQ(manager_->session_count(), 0u);
  EXPECT_TRUE(manager_->Sessions().empty());
  EXPECT_EQ(manager_->Authenticate(client.token, peer_).status().code(),
            absl::StatusCode::kUnauthenticated)
      << "the token of an ended session still works";
  {
    absl::MutexLock lock(&client.session->mu);
    EXPECT_TRUE(client.session->ended);
    EXPECT_TRUE(client.session->rings.empty());
    EXPECT_TRUE(client.session->uploads.empty());
    EXPECT_FALSE(client.session->side_channel.valid());
  }
  EXPECT_TRUE(client.session->models->Ids().empty());
  EXPECT_TRUE(WorkerRingsOf(id).empty()) << "a ring of the ended session is still served";
  EXPECT_TRUE(AwaitWorkerIdle()) << "the ended session's ring was never freed";
  // The daemon closed its end of the side channel.
  char byte;
  EXPECT_EQ(::recv(client.channel.get(), &byte, 1, MSG_DONTWAIT), 0);
}

TEST_F(SessionManagerTest, EndingASessionTwiceIsHarmless) {
  Client ended = Attach();
  Client other = Attach();
  ASSERT_TRUE(CreateRing(ended).ok());
  ASSERT_TRUE(CreateRing(other).ok());
  manager_->Detach(*ended.session);
  manager_->Detach(*ended.session);
  EXPECT_EQ(manager_->session_count(), 1u);
  auto still = manager_->Authenticate(other.token, peer_);
  ASSERT_TRUE(still.ok()) << "ending another session twice ended this one: " << still.status();
  EXPECT_EQ(*still, other.session);
  EXPECT_EQ(WorkerRingsOf(other.session->id()).size(), 1u);
  EXPECT_TRUE(AwaitWorkerIdle());
}

TEST_F(SessionManagerTest, AnEndedSessionGetsNoNewRing) {
  Client client = Attach();
  Session& session = *client.session;
  manager_->Detach(session);
  auto ring = manager_->CreateRing(session, RingRequest(uuid(), 2, 4096));
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(ring.status().message(), HasSubstr("the session has ended"));
  EXPECT_TRUE(worker_->Snapshot().empty()) << "the refused ring is still served";
  EXPECT_TRUE(AwaitWorkerIdle()) << "the refused ring was never freed";
}

TEST_F(SessionManagerTest, EndAllEndsEverySession) {
  Client first = Attach();
  Client second = Attach();
  ASSERT_TRUE(CreateRing(first).ok());
  manager_->EndAll();
  EXPECT_EQ(manager_->session_count(), 0u);
  EXPECT_TRUE(worker_->Snapshot().empty());
  absl::MutexLock lock(&second.session->mu);
  EXPECT_TRUE(second.session->ended);
}

}  // namespace
}  // namespace blockswap::daemon
