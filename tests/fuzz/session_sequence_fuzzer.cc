// libFuzzer target for sequences of requests against a real SessionManager on
// the host backend, in-process (no gRPC server): the input is a request stream
// (request_stream.h) played by up to two client sessions of this process, each
// with a real descriptor side channel (a socketpair) and a real DeviceWorker
// behind its rings. Per-client quotas and the slot limit are tiny, so every
// input stays cheap and a hostile size is refused, never allocated.
//
// After every request: an error has a code other than UNKNOWN and a message;
// a reply that names a descriptor batch finds exactly that batch on the side
// channel. After the input, every session is ended and then
//   - the manager holds nothing of it: no session, no ring (in the session or
//     on the worker), no upload, no model, no side channel;
//   - the worker frees every retired ring within 5 s and reported every
//     failed load as an error event;
//   - a legitimate load on a fresh session completes within 5 s with the
//     right bytes (a worker stuck by an earlier request would fail it).
// libFuzzer adds the rest: ASan/UBSan/LeakSanitizer, -timeout and
// -rss_limit_mb (tests/fuzz/run-fuzzer.sh).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.pb.h"
#include "daemon/device/device_worker.h"
#include "daemon/store/model_store.h"
#include "daemon/session/peer.h"
#include "daemon/session/session_manager.h"
#include "google/protobuf/stubs/logging.h"
#include "shared/backend/backend.h"
#include "shared/os/fd_passing.h"
#include "shared/os/futex.h"
#include "shared/protocol/model_layout.h"
#include "shared/protocol/request_queue.h"
#include "shared/protocol/ring.h"
#include "shared/protocol/ring_wire.h"
#include "shared/protocol/side_channel_wire.h"
#include "tests/fuzz/request_stream.h"
#include "tests/support/recording_load_sink.h"

namespace blockswap::fuzz {
namespace {

using daemon::DeviceWorker;
using daemon::ModelStore;
using daemon::Peer;
using daemon::Session;
using daemon::SessionManager;

constexpr uint64_t kBootId = 0xb5f022;
constexpr int kMaxAttachesPerInput = 4;
constexpr absl::Duration kBound = absl::Seconds(5);

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "session_sequence_fuzzer: %s\n", what.c_str());
  __builtin_trap();
}

void Require(bool condition, const std::string& what) {
  if (!condition) Fail(what);
}

// A refusal is a status a client can act on.
void CheckClean(const absl::Status& status, const char* call) {
  if (status.ok()) return;
  Require(status.code() != absl::StatusCode::kUnknown && !status.message().empty(),
          absl::StrCat(call, " failed without a proper status: ", status.ToString()));
}

template <typename Message>
bool Parse(absl::string_view payload, Message* message) {
  return message->ParseFromArray(payload.data(), static_cast<int>(payload.size()));
}

using RecordingSink = ::blockswap::testing::RecordingLoadSink;

// The daemon side, built once per process: host backend with one device, a
// model store under /dev/shm (removed at exit), one worker, the manager, and
// a "canary" model registered before any input.
struct Daemon {
  std::string directory;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ModelStore> store;
  std::unique_ptr<DeviceWorker> worker;
  std::unique_ptr<SessionManager> manager;
  std::shared_ptr<const daemon::Model> canary;
  std::vector<std::byte> canary_content;  // at canary_offsets
  std::vector<uint64_t> canary_offsets;
  Peer peer;

  Daemon() {
    directory = absl::StrCat("/dev/shm/blockswap-fuzz-", ::getpid());
    std::filesystem::remove_all(directory);
    backend = OpenHostBackend(HostBackendOptions{});
    auto opened = ModelStore::Open(
        daemon::ModelStoreOptions{.directory = directory, .max_pinned_bytes = 8 << 20}, nullptr);
    Require(opened.ok(), opened.status().ToString());
    store = std::move(opened).value();
    auto started = DeviceWorker::Start(*backend->devices()[0], kBootId);
    Require(started.ok(), started.status().ToString());
    worker = std::move(started).value();
    manager = std::make_unique<SessionManager>(
        *backend, *store, std::map<std::string, DeviceWorker*>{{device_uuid(), worker.get()}},
        kBootId, daemon::RequestLimits{.max_slot_bytes = 1 << 20});
    manager->quotas().Set(daemon::ClientQuotas{.per_client = {.sessions = 4,
                                                              .rings = 4,
                                                              .device_bytes = 4 << 20,
                                                              .staging_bytes = 1 << 20,
                                                              .file_offers = 16}});

    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
    Require(pidfd >= 0, "pidfd_open of this process");
    peer.connection_id = 1;
    peer.pid = ::getpid();
    peer.uid = ::getuid();
    peer.gid = ::getgid();
    peer.allowed = true;
    peer.pidfd = std::make_shared<UniqueFd>(pidfd);

    ModelLayout layout;
    for (int b = 0; b < 2; ++b) {
      auto block = PackBlock({TensorSpec{"w", "U8", {300}}});
      Require(block.ok(), block.status().ToString());
      layout.blocks.push_back(*block);
    }
    auto placement = daemon::StagingOffsets(layout);
    Require(placement.ok(), placement.status().ToString());
    canary_offsets = placement->offsets;
    canary_content.assign(placement->total_bytes, std::byte{0});
    for (size_t b = 0; b < layout.blocks.size(); ++b) {
      const TensorSpec& tensor = layout.blocks[b].tensors[0];
      for (uint64_t i = 0; i < tensor.length; ++i) {
        canary_content[placement->offsets[b] + tensor.offset + i] =
            static_cast<std::byte>(b * 31 + i);
      }
    }
    auto registered =
        store->Register("canary", layout, canary_content.data(), canary_content.size());
    Require(registered.ok(), registered.status().ToString());
    canary = registered->model;
  }
  ~Daemon() {
    manager.reset();
    worker.reset();
    canary.reset();
    store.reset();
    std::filesystem::remove_all(directory);
  }
  std::string device_uuid() const { return backend->devices()[0]->info().uuid; }
};

Daemon& TheDaemon() {
  static Daemon* daemon = new Daemon();  // NOLINT: ended by the atexit below
  static const bool registered = [] {
    std::atexit([] { delete daemon; });
    return true;
  }();
  (void)registered;
  return *daemon;
}

// One attached client session and the client end of its side channel.
struct Client {
  std::shared_ptr<Session> session;
  std::string token;
  UniqueFd channel;
  UniqueFd staging;  // the last staging area handed out
  uint64_t staging_bytes = 0;
};

// The next message on `client`'s side channel: it must be there already and
// be batch `batch`.
std::vector<UniqueFd> ExpectBatch(Client& client, uint64_t batch, const char* call) {
  pollfd ready{client.channel.get(), POLLIN, 0};
  Require(::poll(&ready, 1, 0) == 1,
          absl::StrCat(call, " named batch ", batch, " but nothing is on the side channel"));
  auto message = ReceiveExactWithFds(client.channel, sizeof(FdBatchHeader));
  Require(message.ok(), absl::StrCat(call, ": ", message.status().ToString()));
  FdBatchHeader header;
  std::memcpy(&header, message->payload.data(), sizeof(header));
  Require(std::memcmp(header.magic, kFdBatchMagic, 4) == 0 && header.batch == batch &&
              header.fd_count == message->fds.size(),
          absl::StrCat(call, " named batch ", batch, ", the side channel carried batch ",
                       header.batch, " with ", message->fds.size(), " descriptors"));
  return std::move(message->fds);
}

// Attaches a client session of this process and connects its side channel.
absl::StatusOr<Client> AttachClient(Daemon& daemon, const v1::AttachRequest& request) {
  SessionManager& manager = *daemon.manager;
  auto reply = manager.Attach(daemon.peer, request);
  if (!reply.ok()) return reply.status();
  int pair[2];
  Require(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0, "socketpair");
  UniqueFd daemon_end(pair[0]);
  Require(::fcntl(daemon_end.get(), F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
  Client client;
  client.channel = UniqueFd(pair[1]);
  client.token = reply->session_token();
  auto session = manager.Authenticate(client.token, daemon.peer);
  Require(session.ok(), absl::StrCat("a new session: ", session.status().ToString()));
  client.session = *session;
  absl::Status accepted =
      manager.AcceptSideChannel(client.token, daemon.peer, std::move(daemon_end));
  Require(accepted.ok(), absl::StrCat("side channel: ", accepted.ToString()));
  ExpectBatch(client, kSideChannelAcceptedBatch, "AcceptSideChannel");
  return client;
}

// The client's import of a ring CreateRing sent with `fds`.
std::unique_ptr<RingImport> ImportRing(Daemon& daemon, const v1::RingDescriptor& ring,
                                       std::vector<UniqueFd> fds) {
  const uint64_t batch = ring.daemon_control().batch();
  auto exported = RingFromWire(ring, std::move(fds), batch);
  Require(exported.ok(), exported.status().ToString());
  auto imported = RingImport::Import(*daemon.backend->devices()[0], std::move(exported).value());
  Require(imported.ok(), imported.status().ToString());
  return std::move(imported).value();
}

class Sequence {
 public:
  explicit Sequence(Daemon& daemon) : daemon_(daemon) { models_.push_back(daemon.canary->id()); }

  void Run(const RequestRecord& record) {
    if (record.op == RequestOp::kAttach) {
      v1::AttachRequest request;
      if (Parse(record.payload, &request)) Attach(record.session, request);
      return;
    }
    Client* client = EnsureClient(record.session);
    if (client == nullptr) return;
    Session& session = *client->session;
    SessionManager& manager = *daemon_.manager;
    switch (record.op) {
      case RequestOp::kAuthenticate: {
        std::string token = record.payload.empty() ? client->token : std::string(record.payload);
        auto found = manager.Authenticate(token, daemon_.peer);
        CheckClean(found.status(), "Authenticate");
        bool live = false;
        for (const Client& other : clients_) {
          if (other.session != nullptr && other.token == token && !Ended(*other.session)) {
            live = true;
            Require(found.ok() && *found == other.session,
                    "Authenticate does not find a live session by its token");
          }
        }
        Require(live || !found.ok(), "Authenticate accepted a token of no live session");
        return;
      }
      case RequestOp::kBeginUpload: {
        v1::BeginUploadRequest request;
        if (!Parse(record.payload, &request)) return;
        auto reply = manager.BeginUpload(session, request);
        CheckClean(reply.status(), "BeginUpload");
        if (!reply.ok()) return;
        std::vector<UniqueFd> fds = ExpectBatch(*client, reply->staging().batch(), "BeginUpload");
        Require(fds.size() == 1, "BeginUpload sent no staging area");
        client->staging = std::move(fds[0]);
        client->staging_bytes = reply->staging_bytes();
        return;
      }
      case RequestOp::kWriteStaging: {
        if (!client->staging.valid() || record.payload.size() < 8) return;
        uint64_t offset = ReadU64(record.payload) % (client->staging_bytes + 1);
        absl::string_view bytes = record.payload.substr(8);
        size_t count = std::min<uint64_t>(bytes.size(), client->staging_bytes - offset);
        // Refused once the daemon sealed it: that is the point of the seal.
        (void)::pwrite(client->staging.get(), bytes.data(), count, static_cast<off_t>(offset));
        return;
      }
      case RequestOp::kCommitUpload: {
        v1::CommitUploadRequest request;
        if (!Parse(record.payload, &request)) return;
        ModelReply(*client, manager.CommitUpload(session, request), "CommitUpload");
        return;
      }
      case RequestOp::kOpenModel: {
        v1::OpenModelRequest request;
        if (!Parse(record.payload, &request)) return;
        request.set_model_id(MapModel(request.model_id()));
        ModelReply(*client, manager.OpenModel(session, request), "OpenModel");
        return;
      }
      case RequestOp::kCreateRing: {
        v1::CreateRingRequest request;
        if (!Parse(record.payload, &request)) return;
        auto ring = manager.CreateRing(session, request);
        CheckClean(ring.status(), "CreateRing");
        if (!ring.ok()) return;
        Require(ring->slot_count() == request.slot_count() &&
                    ring->slot_bytes() == request.slot_bytes(),
                "CreateRing made a ring of another shape");
        std::vector<UniqueFd> fds =
            ExpectBatch(*client, ring->daemon_control().batch(), "CreateRing");
        rings_.push_back(ring->ring_id());
        if (ring->request_ring_capacity() != 0) {
          request_rings_[ring->ring_id()] = ImportRing(daemon_, *ring, std::move(fds));
        }
        return;
      }
      case RequestOp::kDestroyRing: {
        v1::DestroyRingRequest request;
        if (!Parse(record.payload, &request)) return;
        request.set_ring_id(MapRing(request.ring_id()));
        CheckClean(manager.DestroyRing(session, request), "DestroyRing");
        return;
      }
      case RequestOp::kLoad: {
        v1::LoadRequest request;
        if (!Parse(record.payload, &request)) return;
        request.set_ring_id(MapRing(request.ring_id()));
        request.set_model_id(MapModel(request.model_id()));
        // A load with a session_token takes the fast path where its ring
        // has a request ring.
        if (auto fast = request_rings_.find(request.ring_id());
            !request.session_token().empty() && fast != request_rings_.end()) {
          PushEntry(*fast->second, request);
          return;
        }
        CheckClean(manager.SubmitLoad(session, request, sink_), "SubmitLoad");
        return;
      }
      case RequestOp::kReportStats: {
        v1::ReportStatsRequest request;
        if (Parse(record.payload, &request)) (void)manager.ReportStats(session, request);
        return;
      }
      case RequestOp::kRegisterFile: {
        v1::RegisterFileRequest request;
        if (!Parse(record.payload, &request)) return;
        auto reply = manager.RegisterFile(session, request);
        CheckClean(reply.status(), "RegisterFile");
        Require(!reply.ok(), "RegisterFile succeeded without any file offered");
        return;
      }
      case RequestOp::kDetach:
        manager.Detach(session);
        return;
      case RequestOp::kAttach:
      case RequestOp::kCount:
        return;
    }
  }

  // Ends every session of the input and checks that nothing of it is left.
  void Finish() {
    std::vector<uint64_t> ids;
    for (const std::shared_ptr<Session>& session : sessions_) {
      daemon_.manager->Detach(*session);
      ids.push_back(session->id());
      absl::MutexLock lock(&session->mu);
      Require(session->ended && session->rings.empty() && session->uploads.empty() &&
                  session->models->Ids().empty() && !session->side_channel.valid(),
              absl::StrCat("session ", session->id(), " still holds something after it ended"));
    }
    Require(daemon_.manager->session_count() == 0, "sessions left after every one ended");
    for (const daemon::RingSnapshot& ring : daemon_.worker->Snapshot()) {
      for (uint64_t id : ids) {
        Require(ring.session_id != id,
                absl::StrCat("ring ", ring.ring_id, " of ended session ", id, " is still served"));
      }
    }
    AwaitIdle();
    for (const v1::LoadEvent& event : sink_->events()) {
      Require(event.error_code() != 0 && !event.error_message().empty(),
              "a load event that is no error report");
    }
  }

 private:
  static bool Ended(Session& session) {
    absl::MutexLock lock(&session.mu);
    return session.ended;
  }

  void AwaitIdle() {
    // The worker frees retired rings when it next wakes, which without work
    // is its 100 ms heartbeat; a task for no ring (ids start at 1) wakes it
    // at once, so that an input costs milliseconds.
    daemon_.worker->Submit(daemon::LoadTask{});
    absl::Time deadline = absl::Now() + kBound;
    while (!daemon_.worker->idle()) {
      Require(absl::Now() < deadline, "retired rings not freed within 5 s");
      absl::SleepFor(absl::Microseconds(100));
    }
  }

  void Attach(int slot, const v1::AttachRequest& request) {
    if (attaches_ == kMaxAttachesPerInput) return;
    ++attaches_;
    absl::StatusOr<Client> client = AttachClient(daemon_, request);
    CheckClean(client.status(), "Attach");
    if (!client.ok()) return;
    sessions_.push_back(client->session);
    clients_[slot] = std::move(client).value();
  }

  Client* EnsureClient(int slot) {
    if (clients_[slot].session == nullptr) {
      v1::AttachRequest request;
      request.set_client_name("fuzz");
      request.set_protocol_version(daemon::kProtocolVersion);
      Attach(slot, request);
    }
    return clients_[slot].session == nullptr ? nullptr : &clients_[slot];
  }

  void ModelReply(Client& client, const absl::StatusOr<v1::ModelReply>& reply, const char* call) {
    CheckClean(reply.status(), call);
    if (!reply.ok()) return;
    Require(reply->block_masters_size() > 0, absl::StrCat(call, " named no block masters"));
    std::vector<UniqueFd> fds = ExpectBatch(client, reply->block_masters(0).batch(), call);
    Require(!fds.empty(), absl::StrCat(call, " sent no masters"));
    if (std::find(models_.begin(), models_.end(), reply->model_id()) == models_.end()) {
      models_.push_back(reply->model_id());
    }
  }

  uint64_t MapRing(uint64_t id) const {
    return id >= 1 && id <= kMaxRefs && id <= rings_.size() ? rings_[id - 1] : id;
  }
  std::string MapModel(const std::string& id) const {
    if (id.size() == 1 && id[0] >= '0' && id[0] < static_cast<char>('0' + kMaxRefs)) {
      size_t n = id[0] - '0';
      if (n < models_.size()) return models_[n];
    }
    return id;
  }

  // Writes `request` into the ring's request ring as it is, the model
  // handle being the token's first byte (mod 4: 0 is never a handle); a
  // token "x!" instead moves the tail by `block` (an overrun, or not).
  static void PushEntry(RingImport& ring, const v1::LoadRequest& request) {
    const std::string& token = request.session_token();
    if (token.size() >= 2 && token[1] == '!') {
      ring.client_control().request_tail.fetch_add(request.block(), std::memory_order_release);
    } else {
      CheckClean(RequestQueueWriter(ring.client_control(), ring.control())
                     .Push({request.slot(), request.generation(),
                            static_cast<uint8_t>(token[0]) % 4u, request.block()}),
                 "RequestQueueWriter::Push");
    }
    ring.doorbell()->Ring();
  }

  Daemon& daemon_;
  std::map<uint64_t, std::unique_ptr<RingImport>> request_rings_;  // by ring id
  Client clients_[2];
  std::vector<std::shared_ptr<Session>> sessions_;
  std::vector<uint64_t> rings_;
  std::vector<std::string> models_;
  std::shared_ptr<RecordingSink> sink_ = std::make_shared<RecordingSink>();
  int attaches_ = 0;
};

// A legitimate load on a fresh session: completes within kBound with the
// canary's bytes, whatever the input did before.
void CheckWorkerServes(Daemon& daemon) {
  SessionManager& manager = *daemon.manager;
  v1::AttachRequest attach;
  attach.set_client_name("canary");
  attach.set_protocol_version(daemon::kProtocolVersion);
  absl::StatusOr<Client> attached = AttachClient(daemon, attach);
  Require(attached.ok(), absl::StrCat("canary Attach: ", attached.status().ToString()));
  Client& client = *attached;
  Session& session = *client.session;

  v1::OpenModelRequest open;
  open.set_model_id(daemon.canary->id());
  auto model = manager.OpenModel(session, open);
  Require(model.ok(), absl::StrCat("canary OpenModel: ", model.status().ToString()));
  ExpectBatch(client, model->block_masters(0).batch(), "canary OpenModel");

  v1::CreateRingRequest create;
  create.set_device_uuid(daemon.device_uuid());
  create.set_slot_count(2);
  create.set_slot_bytes(daemon.canary->block_bytes(1));
  create.set_request_ring(true);
  auto ring = manager.CreateRing(session, create);
  Require(ring.ok(), absl::StrCat("canary CreateRing: ", ring.status().ToString()));
  Require(ring->request_ring_capacity() != 0, "canary CreateRing granted no request ring");
  std::unique_ptr<RingImport> imported = ImportRing(
      daemon, *ring, ExpectBatch(client, ring->daemon_control().batch(), "canary CreateRing"));

  v1::LoadRequest load;
  load.set_ring_id(ring->ring_id());
  load.set_slot(1);
  load.set_model_id(daemon.canary->id());
  load.set_block(1);
  load.set_generation(1);
  auto sink = std::make_shared<RecordingSink>();
  absl::Status submitted = manager.SubmitLoad(session, load, sink);
  Require(submitted.ok(), absl::StrCat("canary SubmitLoad: ", submitted.ToString()));
  // Then block 0 into slot 0 through the request ring (the fast path).
  Require(RequestQueueWriter(imported->client_control(), imported->control())
              .Push({0, 1, model->model_handle(), 0})
              .ok(),
          "canary request ring full");
  imported->doorbell()->Ring();
  const RingImport& client_ring = *imported;
  for (uint32_t slot : {1u, 0u}) {
    absl::Time deadline = absl::Now() + kBound;
    while (true) {
      Require(client_ring.control().status.error_code.load() == 0,
              absl::StrCat("the canary ring failed: ", client_ring.control().error_message));
      if (client_ring.control().filled_seq[slot].load() == 1) {
        // Copied once the slot's ready word reached the generation (the
        // daemon's copy stream writes it after the copy); on a device without
        // stream words, once landed_seq did. filled_seq alone is published
        // when the copy is issued.
        const StreamWords* words = client_ring.ready_words();
        const bool copied =
            words != nullptr
                ? SeqAtLeast(words->word(slot).load(std::memory_order_acquire), 1)
                : SeqAtLeast(client_ring.control().landed_seq[slot].load(), 1);
        if (copied) break;
      }
      Require(absl::Now() < deadline,
              absl::StrCat("stuck worker: a legitimate load into slot ", slot,
                           " did not complete in 5 s"));
      absl::SleepFor(absl::Microseconds(50));
    }
    Require(std::memcmp(client_ring.slot(slot),
                        daemon.canary_content.data() + daemon.canary_offsets[slot],
                        daemon.canary->block_bytes(slot)) == 0,
            absl::StrCat("the canary load into slot ", slot, " copied the wrong bytes"));
  }
  Require(sink->events().empty(), "the canary load reported an error");
  imported.reset();
  manager.Detach(session);
}

}  // namespace
}  // namespace blockswap::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 in strings is expected
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  blockswap::fuzz::Daemon& daemon = blockswap::fuzz::TheDaemon();
  {
    blockswap::fuzz::Sequence sequence(daemon);
    blockswap::fuzz::RequestReader reader(data, size);
    blockswap::fuzz::RequestRecord record;
    while (reader.Next(&record)) sequence.Run(record);
    sequence.Finish();
  }
  blockswap::fuzz::CheckWorkerServes(daemon);
  return 0;
}
