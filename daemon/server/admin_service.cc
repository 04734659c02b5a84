#include "daemon/server/admin_service.h"

#include <unistd.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "daemon/runtime/logging.h"
#include "daemon/session/model_visibility.h"
#include "shared/build_info/build_info.h"
#include "shared/protocol/grpc_status.h"

namespace blockswap::daemon {
namespace {

// Passes (each at most ~100 bytes, request_validation.h) in one StatsReply:
// about 6.5 MiB, a tenth of the message limit, however many sessions report.
constexpr size_t kMaxPassesInStatsReply = 65536;

void FillDevice(const Device& device, v1::Device* out) {
  out->set_uuid(device.info().uuid);
  out->set_name(device.info().name);
  out->set_total_memory_bytes(device.info().total_memory_bytes);
  if (absl::Status health = device.health(); !health.ok()) {
    out->set_error(std::string(health.message()));
  }
}

void FillTraceEvent(const TraceEvent& event, v1::TraceEvent* out) {
  out->set_time_ns(event.time_ns);
  out->set_kind(static_cast<uint32_t>(event.kind));
  out->set_ring_id(event.ring_id);
  out->set_slot(event.slot);
  out->set_generation(event.generation);
  out->set_block(event.block);
  out->set_value(event.value);
  out->set_flags(event.flags);
}

// Whose sessions (Admin.Clients, Stats, Residency, Trace) a caller may see:
// every session under "allowed-users" and for the privileged; under
// "registrant-group" its own uid's only, even where it may see every model
// they hold: when another user streams, how much and from where is that
// user's business (model_visibility.h).
class SessionFilter {
 public:
  SessionFilter(const DaemonView& view, const Peer& caller)
      : caller_uid_(caller.uid), all_(!view.sessions->visibility().Restricted(caller)) {}

  bool Shows(uint32_t owner_uid) const { return all_ || owner_uid == caller_uid_; }
  // Whether node-wide totals, which move with everybody's sessions, are shown.
  bool ShowsTotals() const { return all_; }

 private:
  const uid_t caller_uid_;
  const bool all_;
};

}  // namespace

bool ShowsStoreCounters(const DaemonView& view, const Peer* caller) {
  const ModelVisibility& visibility = view.sessions->visibility();
  if (visibility.access() == ModelAccess::kAllowedUsers) return true;
  return caller != nullptr && visibility.Privileged(*caller);
}

v1::StatusReply BuildStatus(const DaemonView& view, const Peer* caller) {
  v1::StatusReply reply;
  reply.set_version(ThisBuild().version);
  reply.set_backend(view.backend->kind() == BackendKind::kCuda ? v1::BACKEND_CUDA
                                                               : v1::BACKEND_HOST);
  for (const auto& device : view.backend->devices()) FillDevice(*device, reply.add_devices());
  reply.set_boot_id(view.boot_id);
  reply.set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - view.started_at));
  reply.set_pinning(std::string(PinningPolicyName(view.store->pinning())));
  if (!ShowsStoreCounters(view, caller)) {
    // Said, so that a client does not print the unset counters as zeros.
    reply.set_store_counters_withheld(
        absl::StrCat("model_access = ", ModelAccessName(view.sessions->visibility().access())));
    return reply;
  }
  reply.set_pinned_bytes(view.store->pinned_bytes());
  FileIngestStats files = view.sessions->file_ingest().stats();
  reply.set_file_reads(files.reads);
  reply.set_file_bytes_read(files.bytes_read);
  reply.set_evictions(view.store->stats().evicted);
  reply.set_master_blocks(view.store->block_count());
  const BlockTotals staged = view.store->staged_blocks();
  reply.set_staged_bytes(staged.bytes);
  reply.set_staged_blocks(static_cast<uint32_t>(staged.blocks));
  return reply;
}

v1::ClientsReply BuildClients(const DaemonView& view, const Peer& caller) {
  v1::ClientsReply reply;
  const SessionFilter filter(view, caller);
  for (const auto& session : view.sessions->Sessions()) {
    if (!filter.Shows(session->peer().uid)) continue;
    v1::ClientInfo* client = reply.add_clients();
    client->set_session_id(session->id());
    client->set_client_name(session->client_name());
    client->set_pid(static_cast<uint32_t>(session->peer().pid));
    client->set_uid(session->peer().uid);
    client->set_gid(session->peer().gid);
    client->set_copy(CopyPathToProto(session->copy()));
    client->set_attached_seconds(absl::ToDoubleSeconds(absl::Now() - session->attached_at()));
    absl::MutexLock lock(&session->mu);
    client->set_ring_count(static_cast<uint32_t>(session->rings.size()));
    client->set_loads(session->all_loads());
    std::set<std::string> devices;
    for (const auto& [id, ring] : session->rings) devices.insert(ring.device_uuid);
    for (const std::string& uuid : devices) client->add_device_uuids(uuid);
  }
  return reply;
}

v1::ModelsReply BuildModels(const DaemonView& view, const Peer& caller) {
  const ModelVisibility& visibility = view.sessions->visibility();
  const SessionFilter filter(view, caller);
  std::map<std::string, uint32_t> open_in;  // by the sessions the caller sees
  for (const auto& session : view.sessions->Sessions()) {
    if (!filter.Shows(session->peer().uid)) continue;
    for (const std::string& id : session->models->Ids()) ++open_in[id];
  }
  v1::ModelsReply reply;
  // Page-locked for DMA: a model whose blocks the store pinned, on the cuda
  // backend (the host backend's "pinning" locks nothing).
  const bool cuda = view.backend->kind() == BackendKind::kCuda;
  std::vector<std::shared_ptr<const Model>> visible;
  for (auto& model : view.store->List()) {
    if (visibility.MaySee(caller, model->registrants().List())) visible.push_back(std::move(model));
  }
  // Shared among the models the caller sees only: a block it uploaded that
  // only a model hidden from it names too shows as not shared.
  const std::vector<uint64_t> shared = ModelStore::SharedBytes(visible);
  for (size_t m = 0; m < visible.size(); ++m) {
    const std::shared_ptr<const Model>& model = visible[m];
    const std::vector<Registrant> registrants = model->registrants().List();
    v1::ModelInfo* info = reply.add_models();
    info->set_source(visibility.Sources(caller, registrants));
    info->set_pinned(cuda && model->pinned());
    info->set_staged_blocks(static_cast<uint32_t>(model->staged_blocks()));
    // Where other users' sessions are not shown, their references are not
    // counted either: only the caller's own opens.
    info->set_references(filter.ShowsTotals()
                             ? ModelStore::References(model) - 1  // less `visible`'s own copy
                             : open_in[model->id()]);
    info->set_model_id(model->id());
    info->set_name(visibility.Name(caller, registrants, model->name()));
    info->set_block_count(static_cast<uint32_t>(model->block_count()));
    info->set_bytes(model->masters_bytes());
    info->set_shared_bytes(shared[m]);
    info->set_open_sessions(open_in[model->id()]);
  }
  return reply;
}

v1::ResidencyReply BuildResidency(const DaemonView& view, const Peer& caller) {
  v1::ResidencyReply reply;
  std::map<uint64_t, uint32_t> uid_of;  // by session id
  for (const auto& session : view.sessions->Sessions()) uid_of[session->id()] = session->peer().uid;
  const SessionFilter filter(view, caller);
  for (const auto& [uuid, worker] : view.workers) {
    for (const RingSnapshot& ring : worker->Snapshot()) {
      auto uid = uid_of.find(ring.session_id);
      if (!filter.Shows(uid == uid_of.end() ? UINT32_MAX : uid->second)) continue;
      v1::RingResidency* out = reply.add_rings();
      out->set_session_id(ring.session_id);
      out->set_ring_id(ring.ring_id);
      out->set_device_uuid(uuid);
      for (uint32_t s = 0; s < ring.slots.size(); ++s) {
        const SlotSnapshot& slot = ring.slots[s];
        v1::SlotResidency* slot_out = out->add_slots();
        slot_out->set_slot(s);
        if (slot.loaded) {
          slot_out->set_model_id(slot.model_id);
          slot_out->set_block(slot.block);
        }
        slot_out->set_filled_seq(slot.filled_seq);
        slot_out->set_consumed_seq(slot.consumed_seq);
      }
    }
  }
  return reply;
}

v1::StatsReply BuildStats(const DaemonView& view, const Peer& caller) {
  v1::StatsReply reply;
  const SessionFilter filter(view, caller);
  size_t passes_left = kMaxPassesInStatsReply;
  std::map<uint64_t, uint64_t> bytes_by_session;
  for (const auto& [uuid, worker] : view.workers) {
    for (const RingSnapshot& ring : worker->Snapshot())
      bytes_by_session[ring.session_id] += ring.bytes;
    // A device's counters are everybody's loads: left out where other
    // users' sessions are (Admin.Status names the policy that withholds).
    if (!filter.ShowsTotals()) continue;
    DeviceStats stats = worker->stats();
    v1::DeviceStats* out = reply.add_devices();
    out->set_device_uuid(uuid);
    out->set_loads(stats.loads);
    out->set_bytes_copied(stats.bytes);
    out->set_copy_seconds(stats.copy_seconds);
    out->set_queue_depth(stats.queue_depth);
    out->set_protocol_errors(stats.protocol_errors);
    out->set_rings(static_cast<uint32_t>(stats.rings));
    out->set_releases_at_request(stats.releases_at_request);
    out->set_releases_notified(stats.releases_notified);
    out->set_staged_loads(stats.staged_loads);
    out->set_staged_bytes(stats.staged_bytes);
  }
  for (const auto& session : view.sessions->Sessions()) {
    if (!filter.Shows(session->peer().uid)) continue;
    v1::ClientStats* client = reply.add_clients();
    client->set_session_id(session->id());
    client->set_client_name(session->client_name());
    client->set_bytes(bytes_by_session[session->id()]);
    absl::MutexLock lock(&session->mu);
    client->set_loads(session->all_loads());
    client->set_rejected_loads(session->all_rejected_loads());
    // The newest passes, as many as the reply's budget still allows.
    const size_t shown = std::min(session->pass_stats.size(), passes_left);
    passes_left -= shown;
    client->set_passes_omitted(session->pass_stats.size() - shown);
    for (size_t i = session->pass_stats.size() - shown; i < session->pass_stats.size(); ++i) {
      *client->add_passes() = session->pass_stats[i];
    }
  }
  return reply;
}

template <typename Reply, typename Build>
grpc::ServerUnaryReactor* AdminService::Answer(grpc::CallbackServerContext* context, Reply* reply,
                                               Build build) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<Peer> caller = CallerOf(peers_, *context);
  if (caller.ok()) *reply = build(view_, *caller);
  reactor->Finish(ToGrpcStatus(caller.status()));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::Status(grpc::CallbackServerContext* context,
                                               const v1::StatusRequest*, v1::StatusReply* reply) {
  return Answer(context, reply, [](const DaemonView& view, const Peer& caller) {
    return BuildStatus(view, &caller);
  });
}
grpc::ServerUnaryReactor* AdminService::Clients(grpc::CallbackServerContext* context,
                                                const v1::ClientsRequest*,
                                                v1::ClientsReply* reply) {
  return Answer(context, reply, &BuildClients);
}
grpc::ServerUnaryReactor* AdminService::Models(grpc::CallbackServerContext* context,
                                               const v1::ModelsRequest*, v1::ModelsReply* reply) {
  return Answer(context, reply, &BuildModels);
}
grpc::ServerUnaryReactor* AdminService::Residency(grpc::CallbackServerContext* context,
                                                  const v1::ResidencyRequest*,
                                                  v1::ResidencyReply* reply) {
  return Answer(context, reply, &BuildResidency);
}
grpc::ServerUnaryReactor* AdminService::Stats(grpc::CallbackServerContext* context,
                                              const v1::StatsRequest*, v1::StatsReply* reply) {
  return Answer(context, reply, &BuildStats);
}

v1::TraceReply BuildTrace(const DaemonView& view, const v1::TraceRequest& request,
                          const Peer& caller) {
  v1::TraceReply reply;
  const SessionFilter filter(view, caller);
  reply.set_daemon_pid(static_cast<uint32_t>(::getpid()));
  reply.set_now_ns(MonotonicNanos());
  struct Client {
    RingOwner owner;
    bool live = false;
    std::vector<uint64_t> ring_ids;
    std::vector<TraceEvent> events;
    uint64_t lost = 0;
    uint64_t invalid = 0;
  };
  std::map<uint64_t, Client> clients;  // by session id
  for (const auto& [uuid, worker] : view.workers) {
    DeviceTrace trace = worker->ReadTrace(request.since_ns());
    v1::TraceDevice* device = reply.add_devices();
    device->set_uuid(uuid);
    device->set_name(worker->device().info().name);
    std::set<uint64_t> hidden_rings;
    for (const RingTrace& ring : trace.rings) {
      if (!filter.Shows(ring.owner.uid)) hidden_rings.insert(ring.ring_id);
    }
    for (const TraceEvent& event : trace.events) {
      if (!hidden_rings.contains(event.ring_id)) FillTraceEvent(event, device->add_events());
    }
    if (filter.ShowsTotals()) {  // they count every ring's events
      device->set_lost(trace.lost);
      device->set_retired_rings_dropped(trace.retired_rings_dropped);
    }
    for (RingTrace& ring : trace.rings) {
      if (hidden_rings.contains(ring.ring_id)) continue;
      Client& client = clients[ring.session_id];
      client.owner = ring.owner;
      client.live = client.live || !ring.retired;
      client.ring_ids.push_back(ring.ring_id);
      client.events.insert(client.events.end(), ring.events.begin(), ring.events.end());
      client.lost += ring.lost;
      client.invalid += ring.invalid;
    }
  }
  for (auto& [session_id, client] : clients) {
    // Only clients active in the window: a ring kept since its session ended
    // (retired rings stay traced for a while) would otherwise show a client
    // that exited long ago.
    if (client.events.empty() && client.lost == 0 && client.invalid == 0) continue;
    v1::TraceClient* out = reply.add_clients();
    out->set_session_id(session_id);
    out->set_pid(client.owner.pid);
    out->set_client_name(client.owner.client_name);
    for (uint64_t ring_id : client.ring_ids) out->add_ring_ids(ring_id);
    std::stable_sort(
        client.events.begin(), client.events.end(),
        [](const TraceEvent& a, const TraceEvent& b) { return a.time_ns < b.time_ns; });
    for (const TraceEvent& event : client.events) FillTraceEvent(event, out->add_events());
    out->set_lost(client.lost);
    out->set_invalid(client.invalid);
    out->set_ended(!client.live);
  }
  return reply;
}

grpc::ServerUnaryReactor* AdminService::Trace(grpc::CallbackServerContext* context,
                                              const v1::TraceRequest* request,
                                              v1::TraceReply* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<Peer> caller = CallerOf(peers_, *context);
  if (caller.ok()) *reply = BuildTrace(view_, *request, *caller);
  absl::Status status = caller.status();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status AdminService::CheckVisible(const Peer& caller, const std::string& model_id) const {
  if (view_.store == nullptr) return absl::OkStatus();
  // Not Find: an admin's look must not count as a use for the LRU order.
  for (const auto& model : view_.store->List()) {
    if (model->id() != model_id) continue;
    if (view_.sessions->visibility().MaySee(caller, model->registrants().List())) {
      return absl::OkStatus();
    }
    break;
  }
  // Unknown or not visible: the same answer (model_visibility.h says why).
  return NoSuchModelError(model_id);
}

grpc::ServerUnaryReactor* AdminService::VerifyModel(grpc::CallbackServerContext* context,
                                                    const v1::VerifyModelRequest* request,
                                                    v1::VerifyModelReply* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<Peer> caller = CallerOf(peers_, *context);
  absl::Status status = caller.status();
  if (status.ok() && (view_.verify == nullptr)) {
    status = absl::UnimplementedError("this blockswapd cannot verify models");
  }
  if (status.ok()) status = ValidateModelId(request->model_id());
  if (status.ok()) status = CheckVisible(*caller, request->model_id());
  if (status.ok()) {
    const std::string id = request->model_id();
    const uid_t uid = caller->uid;
    status = view_.verify->Submit(
        uid, id, [reactor, reply, id, uid](const absl::StatusOr<VerifyResult>& verified) {
          if (verified.ok()) {
            reply->set_blocks(static_cast<uint32_t>(verified->blocks));
            reply->set_bytes(verified->bytes);
            Log(LogLevel::kInfo, absl::StrCat("verified model ", id.substr(0, 16), " for uid ", uid,
                                              ": ", verified->blocks, " blocks, ", verified->bytes,
                                              " bytes match the manifest"));
          } else {
            Log(LogLevel::kWarning, absl::StrCat("verify of model ", id.substr(0, 16), " for uid ",
                                                 uid, ": ", verified.status().message()));
          }
          reactor->Finish(ToGrpcStatus(verified.status()));
        });
  }
  if (!status.ok()) reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::EvictModel(grpc::CallbackServerContext* context,
                                                   const v1::EvictModelRequest* request,
                                                   v1::EvictModelReply*) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<Peer> caller = CallerOf(peers_, *context);
  absl::Status status = caller.status();
  if (status.ok() && view_.store == nullptr) {
    status = absl::UnimplementedError("this blockswapd cannot evict models");
  }
  if (status.ok()) status = ValidateModelId(request->model_id());
  if (status.ok()) status = CheckVisible(*caller, request->model_id());
  if (status.ok()) {
    // A restricted caller may have registered content others registered too:
    // only its own registration goes, the model stays theirs (and an answer
    // that depended on their sessions would tell it they use the model).
    const bool own_only = view_.sessions->visibility().Restricted(*caller);
    // Held by the caller's own sessions: refused as Evict refuses a held
    // model, counting only those (others' would tell it they use it).
    uint32_t open = 0;
    for (const auto& session : view_.sessions->Sessions()) {
      if (!own_only || session->peer().uid != caller->uid) continue;
      for (const std::string& id : session->models->Ids()) open += id == request->model_id();
    }
    const std::string who = absl::StrCat("blockswapctl evict by uid ", caller->uid);
    if (open != 0) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "model ", request->model_id(), " is open in ", open, " session(s) of uid ", caller->uid,
          "; its registration can be evicted once none of them holds it"));
    } else if (own_only) {
      // The store logs the model's eviction when this was its last registration.
      status = view_.store->EvictRegistration(request->model_id(), caller->uid, who);
      if (status.ok()) {
        Log(LogLevel::kInfo, absl::StrCat("removed uid ", caller->uid, "'s registration of model ",
                                          request->model_id().substr(0, 16)));
      }
    } else {
      // The store logs the eviction, with who asked.
      status = view_.store->Evict(request->model_id(), who);
    }
  }
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace blockswap::daemon
