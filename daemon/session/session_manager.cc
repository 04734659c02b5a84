#include "daemon/session/session_manager.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/budget/descriptor_model.h"
#include "daemon/budget/master_limits.h"
#include "daemon/runtime/logging.h"
#include "daemon/session/file_offers.h"
#include "daemon/session/random_token.h"
#include "daemon/session/visible_blocks.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"
#include "shared/os/fd_passing.h"
#include "shared/protocol/ring_wire.h"

namespace blockswap::daemon {
namespace {

// One info line per event of a session, naming it as an operator finds it
// in `blockswapctl clients`: "session 3 (pid 42, uid 1000, 'rank0'): ...".
void LogSession(const Session& session, absl::string_view event) {
  if (!LogEnabled(LogLevel::kInfo)) return;
  Log(LogLevel::kInfo,
      absl::StrCat("session ", session.id(), " (pid ", session.peer().pid, ", uid ",
                   session.peer().uid, ", ", Quoted(session.client_name()), "): ", event));
}

// The newest passes a session keeps for Admin.Stats (each at most ~100
// bytes, request_validation.h): about 25 KiB per session.
constexpr size_t kMaxPassStatsKept = 256;

v1::Backend BackendToProto(BackendKind kind) {
  return kind == BackendKind::kCuda ? v1::BACKEND_CUDA : v1::BACKEND_HOST;
}

}  // namespace

SessionManager::SessionManager(const Backend& backend, ModelStore& store,
                               std::map<std::string, DeviceWorker*> workers, uint64_t boot_id,
                               RequestLimits limits, ModelVisibility visibility)
    : backend_(backend),
      store_(store),
      workers_(std::move(workers)),
      boot_id_(boot_id),
      limits_(limits),
      visibility_(visibility) {}

SessionManager::~SessionManager() { EndAll(); }

// ---------------------------------------------------------------------------
// Sessions

absl::StatusOr<v1::AttachReply> SessionManager::Attach(const Peer& peer,
                                                       const v1::AttachRequest& request) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateAttach(request));
  if (peer.pidfd == nullptr || !peer.pidfd->valid()) {
    return absl::FailedPreconditionError("the connection has no process descriptor");
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(std::optional<CopyPath> asked, CopyPathFromProto(request.copy()));
  CopyPath copy = asked.value_or(default_copy_.load(std::memory_order_relaxed));
  // Rings of the daemon's copies reach a trainer only as descriptors of
  // its device memory: where no device can share it, the trainer copies.
  if (copy == CopyPath::kDaemon && !backend_.devices().empty() &&
      std::all_of(backend_.devices().begin(), backend_.devices().end(),
                  [](const auto& device) { return !device->memory_export_status().ok(); })) {
    copy = CopyPath::kTrainer;
  }
  // Before the new session is charged: the one it replaces counts against
  // the same per-process limit.
  EndReplacedSession(peer, request.replaces_session_token());
  BLOCKSWAP_ASSIGN_OR_RETURN(
      Reservation charged,
      quota_gate_.Charge(peer, {.sessions = 1, .descriptors = DescriptorsOfSession()}));
  BLOCKSWAP_ASSIGN_OR_RETURN(std::string token, RandomToken());
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd watch, peer.pidfd->Duplicate());
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t id, table_.NewSessionId());
    session =
        std::make_shared<Session>(id, token, peer, request.client_name(), std::move(charged), copy);
    // Both under mu_: the report of a process that has exited already ends
    // its session once the session is in the table.
    BLOCKSWAP_RETURN_IF_ERROR(watcher_.Watch(id, std::move(watch)));
    table_.Add(session);
  }
  LogSession(*session, absl::StrCat("attached (copies by the ", CopyPathName(copy), ")"));
  v1::AttachReply reply;
  reply.set_session_token(token);
  reply.set_backend(BackendToProto(backend_.kind()));
  reply.set_daemon_boot_id(boot_id_);
  reply.set_driver(backend_.driver());
  reply.set_copy(CopyPathToProto(copy));
  for (const auto& device : backend_.devices()) {
    v1::Device* out = reply.add_devices();
    out->set_uuid(device->info().uuid);
    out->set_name(device->info().name);
    out->set_total_memory_bytes(device->info().total_memory_bytes);
    if (absl::Status health = device->health(); !health.ok()) {
      out->set_error(std::string(health.message()));
    }
    if (absl::Status words = device->stream_words_status(); !words.ok()) {
      out->set_stream_words_unusable(std::string(words.message()));
    }
    if (absl::Status rings = device->memory_export_status(); !rings.ok()) {
      out->set_rings_unavailable(std::string(rings.message()));
    }
  }
  return reply;
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Authenticate(absl::string_view token,
                                                                      const Peer& caller) const {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateSessionToken(token));
  absl::MutexLock lock(&mu_);
  return table_.Find(token, caller);
}

void SessionManager::Detach(Session& session) { EndSession(session.id(), SessionEnd::kDetached); }

void SessionManager::EndReplacedSession(const Peer& peer, absl::string_view token) {
  if (token.empty()) return;
  uint64_t replaced = 0;
  {
    absl::MutexLock lock(&mu_);
    // Only the same process's (Find checks): a forked worker holds its
    // parent's token too and must not end the parent's session.
    absl::StatusOr<std::shared_ptr<Session>> session = table_.Find(token, peer);
    if (!session.ok()) return;
    replaced = (*session)->id();
  }
  EndSession(replaced, SessionEnd::kReplaced);
}

absl::Status SessionManager::AcceptSideChannel(absl::string_view token, const Peer& peer,
                                               UniqueFd socket) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Authenticate(token, peer));
  absl::MutexLock lock(&session->mu);
  if (session->ended) return absl::UnauthenticatedError("the session has ended");
  if (session->side_channel.valid()) {
    return absl::AlreadyExistsError(
        absl::StrCat("session ", session->id(), " already has a descriptor side channel"));
  }
  BLOCKSWAP_RETURN_IF_ERROR(SendFdBatch(socket, kSideChannelAcceptedBatch, {}));
  session->side_channel = std::move(socket);
  return absl::OkStatus();
}

void SessionManager::EndSession(uint64_t session_id, SessionEnd how) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    session = table_.Remove(session_id);
    if (session == nullptr) return;
    watcher_.Unwatch(session_id);
  }
  LogSession(*session, how == SessionEnd::kProcessExited ? "ended: its process exited"
                       : how == SessionEnd::kDetached    ? "detached"
                       : how == SessionEnd::kReplaced
                           ? "replaced by a new session of its process (it reconnected)"
                           : "ended: blockswapd is stopping");
  session->End(how);
}

std::vector<std::shared_ptr<Session>> SessionManager::Sessions() const {
  absl::MutexLock lock(&mu_);
  return table_.List();
}

size_t SessionManager::session_count() const {
  absl::MutexLock lock(&mu_);
  return table_.size();
}

void SessionManager::StopAttaching() {
  absl::MutexLock lock(&mu_);
  table_.Close();
}

bool SessionManager::draining() const {
  absl::MutexLock lock(&mu_);
  return table_.closed();
}

void SessionManager::EndAll() {
  for (const std::shared_ptr<Session>& session : Sessions()) {
    EndSession(session->id(), SessionEnd::kDaemonStopping);
  }
}

// ---------------------------------------------------------------------------
// Models

absl::StatusOr<v1::BeginUploadReply> SessionManager::BeginUpload(
    Session& session, const v1::BeginUploadRequest& request) {
  BLOCKSWAP_ASSIGN_OR_RETURN(ModelLayout layout, ValidateBeginUpload(request));
  BLOCKSWAP_ASSIGN_OR_RETURN(KnownBlocks known, FindHeldBlocks(session, request, layout));
  ModelLayout uploaded;  // the blocks the client sends, in layout order
  for (size_t b = 0; b < layout.blocks.size(); ++b) {
    if (known.masters[b] == nullptr) uploaded.blocks.push_back(layout.blocks[b]);
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(BlockPlacement placement, StagingOffsets(uploaded));
  // Refuse now what could never be registered, before the client uploads
  // and before anyone's model goes; otherwise make room for the staging
  // area (Register makes the master's once the blocks are hashed).
  BLOCKSWAP_RETURN_IF_ERROR(
      store_.MakeRoom(session.peer().uid, placement.total_bytes, uploaded.blocks.size()));
  // Every block held: a staging area of one page, never empty.
  placement.total_bytes = std::max<uint64_t>(placement.total_bytes, kBlockPlacementAlignment);
  // The staging area is charged before it exists: to the client's quotas,
  // then to the node's memory (the master will need its own charge too).
  BLOCKSWAP_ASSIGN_OR_RETURN(
      Reservation charged,
      quota_gate_.Charge(session.peer(), {.staging_bytes = placement.total_bytes,
                                          .descriptors = DescriptorsOfUpload()}));
  if (MemoryBudget* memory = store_.memory_budget(); memory != nullptr) {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        Reservation node,
        memory->Reserve(
            MemoryUse::kStaging, placement.total_bytes,
            absl::StrCat("the staging area of an upload of ", placement.total_bytes,
                         " bytes for session ", session.id(), " (pid ", session.peer().pid, ")")));
    charged.Add(std::move(node));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(
      SharedMemory staging,
      SharedMemory::Create(absl::StrCat("staging-session-", session.id()), placement.total_bytes));
  absl::MutexLock lock(&session.mu);
  if (session.ended) return absl::UnauthenticatedError("the session has ended");
  BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t batch, session.SendFds({staging.fd().get()}));
  uint64_t upload_id = ++session.next_upload;
  v1::BeginUploadReply reply;
  reply.set_upload_id(upload_id);
  reply.mutable_staging()->set_batch(batch);
  reply.mutable_staging()->set_index(0);
  for (uint64_t offset : placement.offsets) reply.add_block_offsets(offset);
  reply.set_staging_bytes(placement.total_bytes);
  session.uploads[upload_id] =
      Upload{request.name(), std::move(layout),  std::move(staging), placement.offsets,
             false,          std::move(charged), std::move(known)};
  return reply;
}

absl::StatusOr<KnownBlocks> SessionManager::FindHeldBlocks(Session& session,
                                                           const v1::BeginUploadRequest& request,
                                                           const ModelLayout& layout) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<HeldBlockClaim> claims,
                             ValidateHeldBlocks(request, layout));
  // Listing what the caller may see walks every model: only for a claim.
  const VisibleBlocks visible =
      claims.empty() ? VisibleBlocks() : VisibleBlocks::Of(store_, visibility_, session.peer());
  return visible.Resolve(claims, layout);
}

absl::StatusOr<v1::HeldBlocksReply> SessionManager::HeldBlocks(
    Session& session, const v1::HeldBlocksRequest& request) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateHeldBlocksRequest(request));
  const VisibleBlocks visible = VisibleBlocks::Of(store_, visibility_, session.peer());
  v1::HeldBlocksReply reply;
  for (const std::string& block_id : request.block_ids()) {
    reply.add_held(visible.contains(block_id));
  }
  return reply;
}

absl::StatusOr<v1::ModelReply> SessionManager::CommitUpload(Session& session,
                                                            const v1::CommitUploadRequest& request,
                                                            const Cancellation& cancellation) {
  std::string name;
  ModelLayout layout;
  const SharedMemory* staging = nullptr;
  const KnownBlocks* known = nullptr;
  {
    absl::MutexLock lock(&session.mu);
    auto it = session.uploads.find(request.upload_id());
    if (it == session.uploads.end()) {
      return absl::NotFoundError(
          absl::StrCat("no upload ", request.upload_id(), " in session ", session.id()));
    }
    if (it->second.committing) {
      return absl::FailedPreconditionError(
          absl::StrCat("upload ", request.upload_id(), " is already being committed"));
    }
    it->second.committing = true;
    name = it->second.name;
    layout = it->second.layout;
    staging = &it->second.staging;  // stable: map nodes do not move
    known = &it->second.known;
  }
  // From here on the client cannot change a byte: the hash and the copy see
  // the same content. The seal fails while the client still maps it writable.
  absl::Status result;
  absl::StatusOr<RegisterResult> registered = absl::UnknownError("not registered");
  if (::fcntl(staging->fd().get(), F_ADD_SEALS, F_SEAL_WRITE) != 0) {
    result = errno == EBUSY
                 ? absl::FailedPreconditionError(
                       "the staging area is still mapped writable: unmap it before committing")
                 : ErrnoStatus(errno, "sealing the staging area");
  } else {
    absl::StatusOr<Mapping> content = staging->Map(Access::kReadOnly);
    result = content.status();
    if (content.ok()) {
      registered = store_.Register(
          name, layout, static_cast<const std::byte*>(content->data()), content->size(),
          Registrant{session.peer().uid, session.peer().gid, "upload"}, known, cancellation);
      result = registered.status();
    }
  }
  {
    absl::MutexLock lock(&session.mu);
    session.uploads.erase(request.upload_id());  // sealed: it cannot be retried
  }
  BLOCKSWAP_RETURN_IF_ERROR(result);
  return ModelReply(session, registered->model, registered->already_present);
}

absl::StatusOr<v1::ModelReply> SessionManager::OpenModel(Session& session,
                                                         const v1::OpenModelRequest& request) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateModelId(request.model_id()));
  std::shared_ptr<const Model> model = store_.Find(request.model_id());
  if (model == nullptr || !visibility_.MaySee(session.peer(), model->registrants().List())) {
    return absl::NotFoundError(
        absl::StrCat("model ", request.model_id(), " is not registered on this node"));
  }
  return ModelReply(session, model, /*already_present=*/true);
}

absl::StatusOr<v1::ModelReply> SessionManager::ModelReply(Session& session,
                                                          const std::shared_ptr<const Model>& model,
                                                          bool already_present) {
  // One descriptor per distinct block; positions with equal blocks share it.
  std::vector<const BlockMaster*> distinct;
  std::vector<uint32_t> descriptor_of(model->block_count());
  std::map<const BlockMaster*, uint32_t> opened;
  for (size_t b = 0; b < model->block_count(); ++b) {
    const BlockMaster* block = model->block_master(b).get();
    auto [it, inserted] = opened.try_emplace(block, static_cast<uint32_t>(distinct.size()));
    if (inserted) distinct.push_back(block);
    descriptor_of[b] = it->second;
  }
  absl::MutexLock lock(&session.mu);
  if (session.ended) return absl::UnauthenticatedError("the session has ended");
  // Batches of at most kMaxFdsPerMessage, sent in order, each opened just
  // before it is sent (the masters keep no descriptor): opening a model of
  // any size holds one message's descriptors at a time.
  std::vector<uint64_t> batches;
  for (size_t first = 0; first < distinct.size(); first += kMaxFdsPerMessage) {
    std::vector<UniqueFd> batch;
    std::vector<int> fds;
    const size_t end = std::min(distinct.size(), first + kMaxFdsPerMessage);
    BLOCKSWAP_RETURN_IF_ERROR(CheckDescriptorHeadroom(
        end - first, absl::StrCat("sending the masters of model ", model->id().substr(0, 16))));
    for (size_t i = first; i < end; ++i) {
      BLOCKSWAP_ASSIGN_OR_RETURN(batch.emplace_back(), distinct[i]->OpenReadOnly());
      fds.push_back(batch.back().get());
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(batches.emplace_back(), session.SendFds(fds));
  }
  v1::ModelReply reply;
  reply.set_model_handle(session.models->Open(model));
  reply.set_model_id(model->id());
  *reply.mutable_layout() = LayoutToProto(model->layout());
  reply.set_already_present(already_present);
  for (size_t b = 0; b < model->block_count(); ++b) {
    v1::FdRef* ref = reply.add_block_masters();
    ref->set_batch(batches[descriptor_of[b] / kMaxFdsPerMessage]);
    ref->set_index(descriptor_of[b] % kMaxFdsPerMessage);
    reply.add_block_master_bytes(model->block_master(b)->file_bytes());
    reply.add_block_master_staged(model->block_master(b)->staged());
  }
  LogSession(session, absl::StrCat(already_present ? "opened" : "registered", " model ",
                                   model->id().substr(0, 16), " (", model->masters_bytes(),
                                   " bytes of masters)"));
  return reply;
}

absl::StatusOr<v1::RegisterFileReply> SessionManager::RegisterFile(
    Session& session, const v1::RegisterFileRequest& request, const Cancellation& cancellation) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateRegisterFile(request));
  std::vector<UniqueFd> files;
  {
    absl::MutexLock lock(&session.mu);
    if (session.ended) return absl::UnauthenticatedError("the session has ended");
    if (!session.side_channel.valid()) {
      return absl::FailedPreconditionError("the session has no side channel to offer files on");
    }
    absl::Status drained = DrainFileOffers(
        session.side_channel,
        [&] {
          return quota_gate_.Charge(session.peer(),
                                    {.file_offers = 1, .descriptors = DescriptorsOfFileOffer()});
        },
        &session.file_offers);
    if (!drained.ok()) {
      // Its message boundaries may be lost, unless a quota refused an offer.
      if (!absl::IsResourceExhausted(drained)) session.side_channel.Reset();
      return drained;
    }
    for (uint64_t offer : request.file_offers()) {
      auto it = session.file_offers.find(offer);
      if (it == session.file_offers.end()) {
        return absl::NotFoundError(absl::StrCat(
            "file offer ", offer, " did not arrive on the side channel (send it before the call)"));
      }
      files.push_back(std::move(it->second.file));
      session.file_offers.erase(it);
    }
  }
  IngestSpec spec{request.block_pattern(), request.select(), request.select_rank()};
  BLOCKSWAP_ASSIGN_OR_RETURN(
      IngestResult result,
      file_ingest_.Register(std::move(files), spec, request.name(), session.peer().uid,
                            session.peer().gid, cancellation));
  v1::RegisterFileReply reply;
  reply.set_read_file(result.read_file);
  BLOCKSWAP_ASSIGN_OR_RETURN(*reply.mutable_model(),
                             ModelReply(session, result.model, !result.read_file));
  if (result.extras != nullptr) {
    BLOCKSWAP_ASSIGN_OR_RETURN(*reply.mutable_extras(),
                               ModelReply(session, result.extras, !result.read_file));
  }
  return reply;
}

// ---------------------------------------------------------------------------
// Rings and loads

absl::StatusOr<v1::RingDescriptor> SessionManager::CreateRing(
    Session& session, const v1::CreateRingRequest& request) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateCreateRing(request, limits_));
  auto worker = workers_.find(request.device_uuid());
  if (worker == workers_.end()) {
    // FindDevice words the refusal with the devices this daemon drives.
    BLOCKSWAP_RETURN_IF_ERROR(backend_.FindDevice(request.device_uuid()).status());
    return absl::FailedPreconditionError(
        absl::StrCat("device ", request.device_uuid(), " has no copy worker"));
  }
  RingShape shape{request.slot_count(), request.slot_bytes()};
  const uint64_t ring_bytes = uint64_t{shape.slot_count} * shape.slot_bytes;
  // Held by the ring in its worker until it is freed, destroyed or not.
  // With max_device_bytes_per_uid = "auto" the uid's bytes are charged per
  // device, by the worker (its kAutoLimit here bounds nothing).
  const bool device_share = quota_gate_.quotas().Get().per_uid.device_bytes == kAutoLimit;
  BLOCKSWAP_ASSIGN_OR_RETURN(
      Reservation charged,
      quota_gate_.Charge(session.peer(), {.rings = 1,
                                          .device_bytes = ring_bytes,
                                          .descriptors = DescriptorsOfRing(RingCopier::kDaemon)}));
  uint64_t ring_id;
  {
    absl::MutexLock lock(&mu_);
    ring_id = table_.NewRingId();
  }
  RingOwner owner{static_cast<uint32_t>(session.peer().pid), session.client_name(),
                  session.peer().uid};
  // The load fast path, when asked for: the worker resolves the ring's
  // request-ring entries against the session's models.
  std::shared_ptr<const LoadResolver> resolver;
  if (request.request_ring()) {
    resolver = std::make_shared<LoadResolver>(session.models, session.fast_path_loads);
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(
      RingExport exported,
      worker->second->CreateRing(ring_id, session.id(), shape, std::move(owner),
                                 std::move(resolver), std::move(charged), device_share));
  RingOnWire wire;
  absl::Status sent;
  {
    absl::MutexLock lock(&session.mu);
    if (session.ended) {
      sent = absl::UnauthenticatedError("the session has ended");
    } else {
      uint64_t batch = ++session.next_batch;
      wire = RingToWire(std::move(exported), batch);
      std::vector<int> fds;
      for (const UniqueFd& fd : wire.fds) fds.push_back(fd.get());
      sent = session.SendBatch(batch, fds);
      if (sent.ok()) {
        session.rings[ring_id] = SessionRing{worker->second, request.device_uuid(), shape};
      }
    }
  }
  if (!sent.ok()) {
    // The client never received it: nothing imports it.
    worker->second->RetireRing(ring_id, DeviceWorker::RetireReason::kOwnerExited);
    return sent;
  }
  LogSession(session, absl::StrCat("created ring ", ring_id, " on ", request.device_uuid(), " (",
                                   shape.slot_count, " slots of ", shape.slot_bytes, " bytes)"));
  absl::MutexLock lock(&mu_);
  table_.SetRingOwner(ring_id, session.id());
  return wire.descriptor;
}

absl::Status SessionManager::DestroyRing(Session& session, const v1::DestroyRingRequest& request) {
  DeviceWorker* worker = nullptr;
  {
    absl::MutexLock lock(&session.mu);
    auto it = session.rings.find(request.ring_id());
    if (it == session.rings.end()) {
      return absl::NotFoundError(
          absl::StrCat("no ring ", request.ring_id(), " in session ", session.id()));
    }
    worker = it->second.worker;
    session.rings.erase(it);
  }
  {
    absl::MutexLock lock(&mu_);
    table_.ForgetRing(request.ring_id());
  }
  worker->RetireRing(request.ring_id(), DeviceWorker::RetireReason::kClosedByClient);
  LogSession(session, absl::StrCat("destroyed ring ", request.ring_id()));
  return absl::OkStatus();
}

absl::Status SessionManager::SubmitLoad(Session& session, const v1::LoadRequest& request,
                                        std::shared_ptr<LoadEventSink> sink) {
  LoadTask task;
  task.ring_id = request.ring_id();
  task.slot = request.slot();
  task.generation = request.generation();
  task.block = request.block();
  task.sink = std::move(sink);
  DeviceWorker* worker = nullptr;
  absl::Status valid;
  {
    absl::MutexLock lock(&session.mu);
    auto ring = session.rings.find(request.ring_id());
    if (ring == session.rings.end()) {
      ++session.rejected_loads;
      absl::MutexLock owners(&mu_);
      if (std::optional<uint64_t> owner = table_.RingOwner(request.ring_id())) {
        return absl::PermissionDeniedError(
            absl::StrCat("ring ", request.ring_id(), " belongs to another session (", *owner, ")"));
      }
      return absl::NotFoundError(
          absl::StrCat("no ring ", request.ring_id(), " in session ", session.id()));
    }
    worker = ring->second.worker;
    std::shared_ptr<const Model> model = session.models->FindById(request.model_id());
    if (model == nullptr) {
      valid = absl::NotFoundError(absl::StrCat(
          "model '", request.model_id(), "' is not open in this session (register or open it)"));
    } else {
      absl::StatusOr<ResolvedLoad> resolved = ResolveLoad(request, model, ring->second.shape);
      valid = resolved.status();
      if (resolved.ok()) task.SetSource(*std::move(resolved));
    }
    if (valid.ok()) {
      ++session.loads;
    } else {
      ++session.rejected_loads;
    }
  }
  if (!valid.ok()) {
    // Through the worker, so that the ring fails in its status word and a
    // client waiting on the slot hears of it at once.
    worker->Reject(std::move(task), valid);
    return valid;
  }
  worker->Submit(std::move(task));
  return absl::OkStatus();
}

absl::Status SessionManager::ReportStats(Session& session, const v1::ReportStatsRequest& request) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateReportStats(request));
  absl::MutexLock lock(&session.mu);
  for (const v1::PassStats& pass : request.passes()) {
    session.pass_stats.push_back(pass);
    // Fields a newer client may send are not the daemon's to keep: every
    // kept pass stays the size ValidateReportStats bounds.
    session.pass_stats.back().DiscardUnknownFields();
    session.reported_stall_seconds += pass.stall_seconds();
    session.reported_host_wait_seconds += pass.host_wait_seconds();
    session.reported_copy_seconds += pass.copy_seconds();
  }
  if (session.pass_stats.size() > kMaxPassStatsKept) {
    session.pass_stats.erase(session.pass_stats.begin(),
                             session.pass_stats.end() - kMaxPassStatsKept);
  }
  return absl::OkStatus();
}

}  // namespace blockswap::daemon
