#include "daemon/server/metrics.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/budget/master_limits.h"
#include "daemon/server/admin_service.h"
#include "daemon/session/model_visibility.h"

namespace blockswap::daemon {
namespace {

// Our families are named blockswap_*; the process_* ones keep Prometheus'
// standard names, so that dashboards made for them work.
enum class Prefix { kBlockswap, kNone };

// One metric family: HELP and TYPE once, then its samples.
class Family {
 public:
  Family(std::string* out, absl::string_view name, absl::string_view type, absl::string_view help,
         Prefix prefix = Prefix::kBlockswap)
      : out_(out), name_(absl::StrCat(prefix == Prefix::kBlockswap ? "blockswap_" : "", name)) {
    absl::StrAppend(out_, "# HELP ", name_, " ", help, "\n# TYPE ", name_, " ", type, "\n");
  }
  // `suffix`: a histogram's _bucket, _sum and _count samples.
  template <typename Number>
  void Sample(absl::string_view labels, Number value, absl::string_view suffix = "") {
    absl::StrAppend(out_, name_, suffix, labels.empty() ? "" : "{", labels,
                    labels.empty() ? "" : "}", " ", value, "\n");
  }

 private:
  std::string* out_;
  std::string name_;
};

std::string DeviceLabels(const DeviceMetrics& device) {
  return absl::StrCat("device=\"", EscapeLabelValue(device.uuid), "\"");
}

std::string ClientLabels(const ClientMetrics& client) {
  return absl::StrCat("session=\"", client.session_id, "\",client=\"",
                      EscapeLabelValue(client.client_name), "\",pid=\"", client.pid, "\",uid=\"",
                      client.uid, "\"");
}

}  // namespace

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

MetricsSnapshot CollectMetrics(const DaemonView& view) {
  MetricsSnapshot snapshot;
  const v1::StatusReply status = BuildStatus(view, nullptr);
  snapshot.store_counters = ShowsStoreCounters(view, nullptr);
  snapshot.per_session_series =
      view.sessions->visibility().access() == ModelAccess::kAllowedUsers;
  snapshot.version = status.version();
  snapshot.backend = status.backend() == v1::BACKEND_CUDA ? "cuda" : "host";
  snapshot.uptime_seconds = status.uptime_seconds();
  snapshot.pinned_bytes = status.pinned_bytes();
  snapshot.max_pinned_bytes = view.store->max_pinned_bytes();
  snapshot.models = view.store->List().size();
  snapshot.master_blocks = status.master_blocks();
  snapshot.staged_bytes = status.staged_bytes();
  snapshot.staged_blocks = status.staged_blocks();
  const ModelStoreStats store_stats = view.store->stats();
  for (int reason = 0; reason < kEvictionReasons; ++reason) {
    snapshot.evictions.emplace_back(EvictionReasonName(static_cast<EvictionReason>(reason)),
                                    store_stats.evicted_by[reason]);
  }
  snapshot.file_reads = status.file_reads();
  snapshot.file_bytes_read = status.file_bytes_read();
  if (view.refused_connections != nullptr) {
    snapshot.refused_connections = view.refused_connections->load(std::memory_order_relaxed);
  }
  snapshot.quota_refusals = view.sessions->quota_refusals();
  if (absl::StatusOr<ProcessStats> process = ReadProcessStats(); process.ok()) {
    snapshot.process = *process;
  }
  snapshot.draining = view.sessions->draining();
  snapshot.quotas = view.sessions->quotas().Get();
  std::map<uint64_t, uint64_t> bytes_by_session;
  for (const auto& device : view.backend->devices()) {
    DeviceMetrics out;
    out.uuid = device->info().uuid;
    out.name = device->info().name;
    out.total_memory_bytes = device->info().total_memory_bytes;
    if (absl::Status health = device->health(); !health.ok())
      out.error = std::string(health.message());
    if (auto worker = view.workers.find(out.uuid); worker != view.workers.end()) {
      out.stats = worker->second->stats();
      for (const RingSnapshot& ring : worker->second->Snapshot()) {
        bytes_by_session[ring.session_id] += ring.bytes;
      }
    }
    snapshot.devices.push_back(std::move(out));
  }
  for (const auto& session : view.sessions->Sessions()) {
    ClientMetrics client;
    client.session_id = session->id();
    client.client_name = session->client_name();
    client.pid = static_cast<uint32_t>(session->peer().pid);
    client.uid = session->peer().uid;
    client.bytes = bytes_by_session[session->id()];
    absl::MutexLock lock(&session->mu);
    client.rings = static_cast<uint32_t>(session->rings.size());
    for (const auto& [id, ring] : session->rings) {
      client.ring_bytes += uint64_t{ring.shape.slot_count} * ring.shape.slot_bytes;
    }
    for (const auto& [id, upload] : session->uploads) client.staging_bytes += upload.staging.size();
    client.loads = session->all_loads();
    client.rejected_loads = session->all_rejected_loads();
    client.stall_seconds = session->reported_stall_seconds;
    client.host_wait_seconds = session->reported_host_wait_seconds;
    client.copy_seconds = session->reported_copy_seconds;
    snapshot.clients.push_back(std::move(client));
  }
  return snapshot;
}

std::string FormatMetrics(const MetricsSnapshot& s) {
  std::string out;
  Family(&out, "info", "gauge", "blockswapd's version and backend (value 1)")
      .Sample(absl::StrCat("version=\"", EscapeLabelValue(s.version), "\",backend=\"",
                           EscapeLabelValue(s.backend), "\""),
              1);
  Family(&out, "uptime_seconds", "gauge", "seconds since blockswapd started")
      .Sample("", s.uptime_seconds);
  Family(&out, "draining", "gauge", "1 while blockswapd shuts down and refuses new sessions")
      .Sample("", s.draining ? 1 : 0);
  if (s.store_counters) {
  Family(&out, "pinned_bytes", "gauge",
         "bytes of masters held in pinned host memory, each distinct block once")
      .Sample("", s.pinned_bytes);
  Family(&out, "max_pinned_bytes", "gauge",
         "the budget of pinned_bytes (max_pinned_bytes; 0: only the tmpfs limits)")
      .Sample("", s.max_pinned_bytes);
  Family(&out, "staged_bytes", "gauge",
         "bytes of masters not pinned, copied through the staging buffers (the pinning policy)")
      .Sample("", s.staged_bytes);
  Family(&out, "models", "gauge", "sealed models on this node").Sample("", s.models);
  Family(&out, "master_blocks", "gauge", "distinct blocks held, whatever models name them")
      .Sample("", s.master_blocks);
  Family(&out, "staged_blocks", "gauge",
         "of master_blocks: those not pinned, copied through the staging buffers")
      .Sample("", s.staged_blocks);
  {
    Family evictions(&out, "evictions_total", "counter",
                     "models evicted, by reason: an operator's evict, or the limit a "
                     "registration that will commit was short of");
    for (const auto& [reason, count] : s.evictions) {
      evictions.Sample(absl::StrCat("reason=\"", EscapeLabelValue(reason), "\""), count);
    }
  }
  Family(&out, "file_reads_total", "counter", "passes over safetensors files to register models")
      .Sample("", s.file_reads);
  Family(&out, "file_read_bytes_total", "counter", "bytes read from safetensors files")
      .Sample("", s.file_bytes_read);
  }
  Family(&out, "sessions", "gauge", "attached client sessions").Sample("", s.clients.size());
  Family(&out, "refused_connections_total", "counter",
         "connections refused (a peer not allowed, over a per-uid cap), closed before they were "
         "served (no first message in time) or closed for sending past the transport's limits")
      .Sample("", s.refused_connections);
  Family(&out, "quota_refusals_total", "counter",
         "requests refused with RESOURCE_EXHAUSTED because a per-process or per-uid quota was full")
      .Sample("", s.quota_refusals);

  // Counts and byte sizes are separate families: a sum or a unit over one
  // family must mean something.
  for (const bool bytes : {false, true}) {
    Family f(&out, bytes ? "quota_bytes" : "quota_count", "gauge",
             bytes ? "per-client and per-uid byte quota in force, by its config key (0: "
                     "unlimited; none for a per-device \"auto\")"
                   : "per-client and per-uid count quota in force, by its config key (0: "
                     "unlimited)");
    for (QuotaScope scope : {QuotaScope::kClient, QuotaScope::kUid}) {
      const ClientAmounts& limits =
          scope == QuotaScope::kClient ? s.quotas.per_client : s.quotas.per_uid;
      for (const QuotaKind& kind : QuotaKinds()) {
        // "auto" bytes are a share of each device, no one number.
        if (kind.bytes != bytes || limits.*kind.member == kAutoLimit) continue;
        f.Sample(absl::StrCat("quota=\"", QuotaKey(kind, scope), "\""), limits.*kind.member);
      }
    }
  }
  {
    Family f(&out, "device_info", "gauge",
             "a device blockswapd drives (value 1), with its compute mode and MIG state "
             "(CUDA IPC does not work under MIG: rings cannot be served there)");
    for (const DeviceMetrics& d : s.devices) {
      f.Sample(absl::StrCat(DeviceLabels(d), ",name=\"", EscapeLabelValue(d.name),
                            "\",compute_mode=\"", EscapeLabelValue(d.compute_mode), "\",mig=\"",
                            EscapeLabelValue(d.mig), "\""),
               1);
    }
  }
  auto per_device = [&](absl::string_view name, absl::string_view type, absl::string_view help,
                        auto value) {
    Family f(&out, name, type, help);
    for (const DeviceMetrics& d : s.devices) f.Sample(DeviceLabels(d), value(d));
  };
  per_device("device_healthy", "gauge", "0 once a sticky device error poisoned the device",
             [](const DeviceMetrics& d) { return d.error.empty() ? 1 : 0; });
  per_device("device_memory_bytes", "gauge", "total memory of the device",
             [](const DeviceMetrics& d) { return d.total_memory_bytes; });
  per_device("device_loads_total", "counter", "block loads copied to the device",
             [](const DeviceMetrics& d) { return d.stats.loads; });
  per_device("device_bytes_total", "counter", "bytes copied to the device",
             [](const DeviceMetrics& d) { return d.stats.bytes; });
  per_device("device_copy_seconds_total", "counter", "seconds the device's copy stream was busy",
             [](const DeviceMetrics& d) { return d.stats.copy_seconds; });
  per_device("device_queue_depth", "gauge", "loads accepted and waiting for their slot's free",
             [](const DeviceMetrics& d) { return d.stats.queue_depth; });
  per_device("device_protocol_errors_total", "counter", "load requests that broke the protocol",
             [](const DeviceMetrics& d) { return d.stats.protocol_errors; });
  per_device("device_rings", "gauge", "rings on the device",
             [](const DeviceMetrics& d) { return d.stats.rings; });
  per_device("device_releases_at_request_total", "counter",
             "copies whose slot was already free when their request arrived",
             [](const DeviceMetrics& d) { return d.stats.releases_at_request; });
  per_device("device_releases_notified_total", "counter",
             "copies issued when the client's notification said their slot was free",
             [](const DeviceMetrics& d) { return d.stats.releases_notified; });
  per_device("device_staged_loads_total", "counter",
             "block loads copied through the staging buffers (masters not pinned)",
             [](const DeviceMetrics& d) { return d.stats.staged_loads; });
  per_device("device_staged_bytes_total", "counter", "bytes copied through the staging buffers",
             [](const DeviceMetrics& d) { return d.stats.staged_bytes; });
  {
    Family f(&out, "device_load_latency_seconds", "histogram",
             "seconds from a load's copy being issued (its slot free) to the copy seen "
             "complete: the copy and its queueing behind other copies on the device");
    for (const DeviceMetrics& d : s.devices) {
      const LatencyHistogram& h = d.stats.load_latency;
      const std::string device = DeviceLabels(d);
      for (size_t b = 0; b <= LatencyHistogram::kBounds.size(); ++b) {
        const std::string le = b < LatencyHistogram::kBounds.size()
                                   ? absl::StrCat(LatencyHistogram::kBounds[b])
                                   : std::string("+Inf");
        f.Sample(absl::StrCat(device, ",le=\"", le, "\""), h.CumulativeCount(b), "_bucket");
      }
      f.Sample(device, h.sum(), "_sum");
      f.Sample(device, h.count(), "_count");
    }
  }

  auto per_client = [&](absl::string_view name, absl::string_view type, absl::string_view help,
                        auto value) {
    if (!s.per_session_series) return;
    Family f(&out, name, type, help);
    for (const ClientMetrics& c : s.clients) f.Sample(ClientLabels(c), value(c));
  };
  per_client("client_rings", "gauge", "rings the client holds",
             [](const ClientMetrics& c) { return c.rings; });
  per_client("client_ring_bytes", "gauge", "device memory of the client's rings",
             [](const ClientMetrics& c) { return c.ring_bytes; });
  per_client("client_staging_bytes", "gauge", "host memory of the client's uploads in progress",
             [](const ClientMetrics& c) { return c.staging_bytes; });
  per_client("client_loads_total", "counter", "loads the client asked for and the daemon accepted",
             [](const ClientMetrics& c) { return c.loads; });
  per_client("client_protocol_errors_total", "counter", "the client's rejected load requests",
             [](const ClientMetrics& c) { return c.rejected_loads; });
  per_client("client_bytes_total", "counter", "bytes copied into the client's rings",
             [](const ClientMetrics& c) { return c.bytes; });
  per_client("client_stall_seconds_total", "counter",
             "seconds the client's compute stream sat idle waiting for a block, as the client "
             "reported them",
             [](const ClientMetrics& c) { return c.stall_seconds; });
  per_client("client_host_wait_seconds_total", "counter",
             "seconds the client's training thread blocked waiting for a block (mostly its own "
             "compute draining), as the client reported them",
             [](const ClientMetrics& c) { return c.host_wait_seconds; });
  per_client("client_copy_seconds_total", "counter",
             "seconds from request to fill of the client's loads, as the client reported them",
             [](const ClientMetrics& c) { return c.copy_seconds; });
  if (s.process.has_value()) {
    const ProcessStats& p = *s.process;
    auto process = [&out](absl::string_view name, absl::string_view type, absl::string_view help,
                          auto value) {
      Family(&out, name, type, help, Prefix::kNone).Sample("", value);
    };
    process("process_cpu_seconds_total", "counter", "user and system CPU time of blockswapd",
            p.cpu_seconds);
    if (s.store_counters) {
      process("process_resident_memory_bytes", "gauge", "resident memory of blockswapd",
              p.resident_memory_bytes);
      process("process_virtual_memory_bytes", "gauge", "virtual memory of blockswapd",
              p.virtual_memory_bytes);
    }
    process("process_open_fds", "gauge", "open file descriptors of blockswapd", p.open_fds);
    process("process_max_fds", "gauge", "blockswapd's descriptor limit (RLIMIT_NOFILE)", p.max_fds);
    process("process_start_time_seconds", "gauge", "when blockswapd started, since the epoch",
            p.start_time_seconds);
    process("process_threads", "gauge", "threads of blockswapd", p.threads);
  }
  return out;
}

}  // namespace blockswap::daemon
