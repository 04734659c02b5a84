#include "daemon/server/metrics.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "daemon/server/admin_service.h"
#include "absl/time/clock.h"

namespace blockswap::daemon {
namespace {

// One metric family: HELP and TYPE once, then its samples.
class Family {
 public:
  Family(std::string* out, absl::string_view name, absl::string_view type, absl::string_view help)
      : out_(out), name_(absl::StrCat("blockswap_", name)) {
    absl::StrAppend(out_, "# HELP ", name_, " ", help, "\n# TYPE ", name_, " ", type, "\n");
  }
  template <typename Number>
  void Sample(absl::string_view labels, Number value) {
    absl::StrAppend(out_, name_, labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}", " ",
                    value, "\n");
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
  const v1::StatusReply status = BuildStatus(view);
  snapshot.version = status.version();
  snapshot.backend = status.backend() == v1::BACKEND_CUDA ? "cuda" : "host";
  snapshot.uptime_seconds = status.uptime_seconds();
  snapshot.pinned_bytes = status.pinned_bytes();
  snapshot.models = view.store->List().size();
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
  Family(&out, "pinned_bytes", "gauge", "bytes of masters held in pinned host memory")
      .Sample("", s.pinned_bytes);
  Family(&out, "models", "gauge", "sealed models on this node").Sample("", s.models);
  Family(&out, "sessions", "gauge", "attached client sessions").Sample("", s.clients.size());

  {
    Family f(&out, "client_quota", "gauge",
             "per-client and per-uid quota in force, by its config key (0: unlimited)");
    for (QuotaScope scope : {QuotaScope::kClient, QuotaScope::kUid}) {
      const ClientAmounts& limits =
          scope == QuotaScope::kClient ? s.quotas.per_client : s.quotas.per_uid;
      for (const QuotaKind& kind : QuotaKinds()) {
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
  per_device("device_releases_polled_total", "counter",
             "copies whose free slot the fallback poll found (the client did not notify)",
             [](const DeviceMetrics& d) { return d.stats.releases_polled; });

  auto per_client = [&](absl::string_view name, absl::string_view type, absl::string_view help,
                        auto value) {
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
  return out;
}

}  // namespace blockswap::daemon
