#include "tools/blockswapctl/trace_json.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "shared/protocol/trace_log.h"

namespace blockswap::ctl {
namespace {

using json = nlohmann::json;
using LoadKey = std::tuple<uint64_t, uint32_t, uint32_t>;  // ring, slot, generation

constexpr int kLoadsTid = 1;
constexpr int kStallsTid = 2;
constexpr int kHostWaitsTid = 3;

double Micros(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

LoadKey KeyOf(const v1::TraceEvent& event) {
  return {event.ring_id(), event.slot(), event.generation()};
}

TraceKind KindOf(const v1::TraceEvent& event) { return static_cast<TraceKind>(event.kind()); }

// What the daemon recorded for one load.
struct DaemonLoad {
  const v1::TraceEvent* accepted = nullptr;
  const v1::TraceEvent* issued = nullptr;
  const v1::TraceEvent* filled = nullptr;
  const v1::TraceEvent* done = nullptr;
  int device_tid = 0;
};

struct ClientRef {
  uint32_t pid = 0;
  std::string name;
};

json Metadata(const char* what, uint32_t pid, int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

json LoadArgs(const LoadKey& key, const DaemonLoad& load) {
  json args = {{"ring", std::get<0>(key)}, {"slot", std::get<1>(key)},
               {"generation", std::get<2>(key)}};
  const v1::TraceEvent* any = load.accepted ? load.accepted : load.issued;
  if (any != nullptr) {
    args["block"] = any->block();
    args["bytes"] = any->value();
  }
  if (load.issued) args["copy_issued_us"] = Micros(load.issued->time_ns());
  if (load.done) args["copy_done_us"] = Micros(load.done->time_ns());
  return args;
}

}  // namespace

json TraceToChromeJson(const v1::TraceReply& reply, uint64_t since_ns) {
  json events = json::array();
  const uint32_t daemon_pid = reply.daemon_pid();
  events.push_back(Metadata("process_name", daemon_pid, 0, "blockswapd"));

  // The daemon's side of every load, and which client owns which ring.
  std::map<LoadKey, DaemonLoad> loads;
  std::map<uint64_t, ClientRef> owner_of_ring;
  for (const v1::TraceClient& client : reply.clients()) {
    for (uint64_t ring : client.ring_ids()) owner_of_ring[ring] = {client.pid(), client.client_name()};
  }
  for (int d = 0; d < reply.devices_size(); ++d) {
    const v1::TraceDevice& device = reply.devices(d);
    const int tid = d + 1;
    events.push_back(Metadata("thread_name", daemon_pid, tid,
                              absl::StrCat("copies ", device.name(), " ", device.uuid())));
    for (const v1::TraceEvent& event : device.events()) {
      if (event.time_ns() < since_ns) continue;
      DaemonLoad& load = loads[KeyOf(event)];
      load.device_tid = tid;
      switch (KindOf(event)) {
        case TraceKind::kAccepted:
          load.accepted = &event;
          break;
        case TraceKind::kCopyIssued:
          load.issued = &event;
          break;
        case TraceKind::kFilled:
          load.filled = &event;
          break;
        case TraceKind::kCopyDone:
          load.done = &event;
          break;
        case TraceKind::kRejected: {
          const ClientRef& owner = owner_of_ring[event.ring_id()];
          events.push_back({{"ph", "i"}, {"s", "t"}, {"name", "rejected"}, {"cat", "error"},
                            {"pid", daemon_pid}, {"tid", tid}, {"ts", Micros(event.time_ns())},
                            {"args", {{"ring", event.ring_id()}, {"slot", event.slot()},
                                      {"generation", event.generation()},
                                      {"client_pid", owner.pid}}}});
          break;
        }
        default:
          break;
      }
    }
  }

  // Copies per device in issue order: a copy can start once it is issued and
  // the copy before it on the same stream is done.
  std::map<int, std::vector<std::pair<const LoadKey*, const DaemonLoad*>>> copies_by_device;
  for (const auto& [key, load] : loads) {
    if (load.issued == nullptr || load.done == nullptr) continue;
    copies_by_device[load.device_tid].push_back({&key, &load});
  }
  std::map<LoadKey, double> copy_start_us;
  for (auto& [tid, copies] : copies_by_device) {
    std::sort(copies.begin(), copies.end(), [](const auto& a, const auto& b) {
      return a.second->issued->time_ns() < b.second->issued->time_ns();
    });
    uint64_t previous_done = 0;
    for (const auto& [key, load] : copies) {
      uint64_t issued = load->issued->time_ns();
      uint64_t done = std::max(load->done->time_ns(), issued);
      uint64_t start = std::max(issued, previous_done);
      if (start > done) start = issued;  // completed in one batch with the previous copy
      previous_done = std::max(previous_done, done);
      copy_start_us[*key] = Micros(start);
      const ClientRef& owner = owner_of_ring[std::get<0>(*key)];
      json args = LoadArgs(*key, *load);
      args["client_pid"] = owner.pid;
      args["client_name"] = owner.name;
      events.push_back({{"ph", "X"}, {"name", absl::StrCat("copy block ", load->issued->block())},
                        {"cat", "copy"}, {"pid", daemon_pid}, {"tid", tid},
                        {"ts", Micros(start)}, {"dur", Micros(done - start)}, {"args", args}});
    }
  }

  uint64_t flow_id = 0;
  for (const v1::TraceClient& client : reply.clients()) {
    const uint32_t pid = client.pid();
    events.push_back(Metadata("process_name", pid, 0,
                              absl::StrCat(client.client_name(), " (pid ", pid, ")")));
    events.push_back(Metadata("thread_name", pid, kLoadsTid, "loads"));
    events.push_back(Metadata("thread_name", pid, kStallsTid, "stalls"));
    events.push_back(Metadata("thread_name", pid, kHostWaitsTid, "host waits"));
    for (const v1::TraceEvent& event : client.events()) {
      if (event.time_ns() < since_ns) continue;
      const LoadKey key = KeyOf(event);
      if (KindOf(event) == TraceKind::kRequest) {
        auto found = loads.find(key);
        if (found == loads.end() || found->second.filled == nullptr) continue;  // the edge
        const DaemonLoad& load = found->second;
        uint64_t filled = std::max(load.filled->time_ns(), event.time_ns());
        events.push_back({{"ph", "X"}, {"name", absl::StrCat("load block ", load.filled->block())},
                          {"cat", "load"}, {"pid", pid}, {"tid", kLoadsTid},
                          {"ts", Micros(event.time_ns())},
                          {"dur", Micros(filled - event.time_ns())},
                          {"args", LoadArgs(key, load)}});
        auto start = copy_start_us.find(key);
        if (start != copy_start_us.end()) {
          ++flow_id;
          events.push_back({{"ph", "s"}, {"name", "load"}, {"cat", "load"}, {"id", flow_id},
                            {"pid", pid}, {"tid", kLoadsTid}, {"ts", Micros(event.time_ns())}});
          events.push_back({{"ph", "f"}, {"bp", "e"}, {"name", "load"}, {"cat", "load"},
                            {"id", flow_id}, {"pid", daemon_pid}, {"tid", load.device_tid},
                            {"ts", start->second}});
        }
      } else if (KindOf(event) == TraceKind::kStall ||
                 (KindOf(event) == TraceKind::kWait && (event.flags() & kTraceStalled) != 0)) {
        const bool stall = KindOf(event) == TraceKind::kStall;
        auto found = loads.find(key);
        json args = {{"ring", event.ring_id()}, {"slot", event.slot()},
                     {"generation", event.generation()}};
        if (found != loads.end() && found->second.filled != nullptr) {
          args["block"] = found->second.filled->block();
        }
        events.push_back(
            {{"ph", "X"},
             {"name", absl::StrCat(stall ? "stall slot " : "host wait slot ", event.slot())},
             {"cat", stall ? "stall" : "host_wait"}, {"pid", pid},
             {"tid", stall ? kStallsTid : kHostWaitsTid}, {"ts", Micros(event.time_ns())},
             {"dur", Micros(event.value())}, {"args", args}});
      }
    }
  }

  json lost = json::object();
  for (const v1::TraceDevice& device : reply.devices()) lost[device.uuid()] = device.lost();
  for (const v1::TraceClient& client : reply.clients()) {
    lost[absl::StrCat("pid ", client.pid())] = client.lost();
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"daemon_pid", daemon_pid}, {"since_us", Micros(since_ns)},
            {"until_us", Micros(reply.now_ns())}, {"lost_events", lost}}}};
}

std::string TraceLossReport(const v1::TraceReply& reply) {
  std::string out;
  for (const v1::TraceDevice& device : reply.devices()) {
    if (device.lost() > 0) {
      absl::StrAppend(&out, "device ", device.uuid(), ": ", device.lost(),
                      " daemon events of the window lost to its bounded trace ring (the oldest)\n");
    }
    if (device.retired_rings_dropped() > 0) {
      absl::StrAppend(&out, "device ", device.uuid(), ": traces of ",
                      device.retired_rings_dropped(), " freed rings no longer kept\n");
    }
  }
  for (const v1::TraceClient& client : reply.clients()) {
    if (client.lost() > 0) {
      absl::StrAppend(&out, "client ", client.client_name(), " (pid ", client.pid(), "): ",
                      client.lost(), " events of the window lost to its rings' bounded trace buffers (the oldest)\n");
    }
    if (client.invalid() > 0) {
      absl::StrAppend(&out, "client ", client.client_name(), " (pid ", client.pid(), "): ",
                      client.invalid(), " trace entries refused (not its kinds, ring or slots)\n");
    }
  }
  return out;
}

}  // namespace blockswap::ctl
