#include "tools/blockswapctl/trace_json.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/protocol/trace_log.h"

namespace blockswap::ctl {
namespace {

using json = nlohmann::json;

constexpr uint32_t kDaemonPid = 100;
constexpr uint32_t kClientA = 200;
constexpr uint32_t kClientB = 300;

void Add(google::protobuf::RepeatedPtrField<v1::TraceEvent>* events, TraceKind kind,
         uint64_t time_ns, uint64_t ring, uint32_t slot, uint32_t generation, uint64_t value = 0,
         uint32_t flags = 0, uint32_t block = 7) {
  v1::TraceEvent* event = events->Add();
  event->set_time_ns(time_ns);
  event->set_kind(static_cast<uint32_t>(kind));
  event->set_ring_id(ring);
  event->set_slot(slot);
  event->set_generation(generation);
  event->set_value(value);
  event->set_flags(flags);
  event->set_block(block);
}

// Client A (ring 1) and client B (ring 2) each load slot 0 once; B's copy is
// issued while A's is still running, so it starts when A's is done.
v1::TraceReply TwoClientsOneLoadEach() {
  v1::TraceReply reply;
  reply.set_daemon_pid(kDaemonPid);
  reply.set_now_ns(100000);
  v1::TraceDevice* device = reply.add_devices();
  device->set_uuid("HOST-0");
  device->set_name("host");
  auto* daemon = device->mutable_events();
  Add(daemon, TraceKind::kAccepted, 11000, 1, 0, 1, 4096);
  Add(daemon, TraceKind::kCopyIssued, 12000, 1, 0, 1, 4096);
  Add(daemon, TraceKind::kFilled, 13000, 1, 0, 1, 4096);
  Add(daemon, TraceKind::kAccepted, 13000, 2, 0, 1, 4096);
  Add(daemon, TraceKind::kCopyIssued, 14000, 2, 0, 1, 4096);
  Add(daemon, TraceKind::kFilled, 15000, 2, 0, 1, 4096);
  Add(daemon, TraceKind::kCopyDone, 20000, 1, 0, 1, 4096);
  Add(daemon, TraceKind::kCopyDone, 30000, 2, 0, 1, 4096);

  v1::TraceClient* a = reply.add_clients();
  a->set_pid(kClientA);
  a->set_client_name("a");
  a->add_ring_ids(1);
  Add(a->mutable_events(), TraceKind::kRequest, 10000, 1, 0, 1);
  Add(a->mutable_events(), TraceKind::kWait, 14000, 1, 0, 1, /*value=*/6000, kTraceStalled);
  // The compute stream reached the wait later than the thread, and idled less.
  Add(a->mutable_events(), TraceKind::kStall, 17000, 1, 0, 1, /*value=*/2500);
  Add(a->mutable_events(), TraceKind::kWait, 25000, 1, 0, 1, /*value=*/100, /*flags=*/0);
  Add(a->mutable_events(), TraceKind::kRelease, 26000, 1, 0, 1);
  v1::TraceClient* b = reply.add_clients();
  b->set_pid(kClientB);
  b->set_client_name("b");
  b->add_ring_ids(2);
  Add(b->mutable_events(), TraceKind::kRequest, 12500, 2, 0, 1);
  return reply;
}

std::vector<json> Events(const json& document, const std::string& ph, const std::string& cat = "") {
  std::vector<json> out;
  for (const json& event : document["traceEvents"]) {
    if (event["ph"] == ph && (cat.empty() || event.value("cat", "") == cat)) out.push_back(event);
  }
  return out;
}

TEST(TraceJson, DocumentHasTheShapePerfettoNeeds) {
  json document = TraceToChromeJson(TwoClientsOneLoadEach(), 0);
  ASSERT_TRUE(document["traceEvents"].is_array());
  ASSERT_FALSE(document["traceEvents"].empty());
  const std::set<std::string> phases = {"X", "i", "M", "s", "f"};
  for (const json& event : document["traceEvents"]) {
    ASSERT_TRUE(event.contains("ph") && event.contains("pid") && event.contains("tid")) << event;
    EXPECT_TRUE(phases.contains(event["ph"].get<std::string>())) << event;
    EXPECT_TRUE(event["pid"].is_number_unsigned()) << event;
    if (event["ph"] != "M") {
      EXPECT_TRUE(event["ts"].is_number()) << event;
    }
    if (event["ph"] == "X") {
      EXPECT_GE(event["dur"].get<double>(), 0.0) << event;
    }
  }
  std::map<uint32_t, std::string> process_names;
  for (const json& event : Events(document, "M")) {
    if (event["name"] == "process_name") process_names[event["pid"]] = event["args"]["name"];
  }
  EXPECT_EQ(process_names[kDaemonPid], "blockswapd");
  EXPECT_EQ(process_names[kClientA], "a (pid 200)");
  EXPECT_EQ(process_names[kClientB], "b (pid 300)");
  EXPECT_EQ(document["displayTimeUnit"], "ms");
}

TEST(TraceJson, ALoadSpansFromItsRequestToFilledInMicroseconds) {
  json document = TraceToChromeJson(TwoClientsOneLoadEach(), 0);
  std::vector<json> loads = Events(document, "X", "load");
  ASSERT_EQ(loads.size(), 2u);
  const json& a = loads[0]["pid"] == kClientA ? loads[0] : loads[1];
  EXPECT_DOUBLE_EQ(a["ts"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(a["dur"].get<double>(), 3.0);
  EXPECT_EQ(a["tid"], 1);
  EXPECT_EQ(a["args"]["ring"], 1);
  EXPECT_EQ(a["args"]["block"], 7);
  EXPECT_EQ(a["args"]["bytes"], 4096);
  EXPECT_DOUBLE_EQ(a["args"]["copy_done_us"].get<double>(), 20.0);
}

TEST(TraceJson, ACopyStartsWhenTheCopyBeforeItOnTheDeviceIsDone) {
  json document = TraceToChromeJson(TwoClientsOneLoadEach(), 0);
  std::vector<json> copies = Events(document, "X", "copy");
  ASSERT_EQ(copies.size(), 2u);
  for (const json& copy : copies) {
    EXPECT_EQ(copy["pid"], kDaemonPid);
    EXPECT_EQ(copy["tid"], 1);  // the first device
    if (copy["args"]["ring"] == 1) {
      EXPECT_DOUBLE_EQ(copy["ts"].get<double>(), 12.0);
      EXPECT_DOUBLE_EQ(copy["dur"].get<double>(), 8.0);
      EXPECT_EQ(copy["args"]["client_pid"], kClientA);
    } else {
      EXPECT_DOUBLE_EQ(copy["ts"].get<double>(), 20.0);  // issued at 14, A's done at 20
      EXPECT_DOUBLE_EQ(copy["dur"].get<double>(), 10.0);
      EXPECT_EQ(copy["args"]["client_pid"], kClientB);
      EXPECT_EQ(copy["args"]["client_name"], "b");
    }
  }
}

TEST(TraceJson, StallsAreTheComputeStreamsIdleTimeNotTheThreadsWait) {
  json document = TraceToChromeJson(TwoClientsOneLoadEach(), 0);
  std::vector<json> stalls = Events(document, "X", "stall");
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0]["pid"], kClientA);
  EXPECT_EQ(stalls[0]["tid"], 2);
  EXPECT_DOUBLE_EQ(stalls[0]["ts"].get<double>(), 17.0);
  EXPECT_DOUBLE_EQ(stalls[0]["dur"].get<double>(), 2.5);
  EXPECT_EQ(stalls[0]["args"]["block"], 7);
}

TEST(TraceJson, OnlyHostWaitsThatFoundTheSlotUnfilledAreShown) {
  json document = TraceToChromeJson(TwoClientsOneLoadEach(), 0);
  std::vector<json> waits = Events(document, "X", "host_wait");
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0]["pid"], kClientA);
  EXPECT_EQ(waits[0]["tid"], 3);
  EXPECT_DOUBLE_EQ(waits[0]["ts"].get<double>(), 14.0);
  EXPECT_DOUBLE_EQ(waits[0]["dur"].get<double>(), 6.0);
}

TEST(TraceJson, AFlowLinksEachRequestToItsCopy) {
  json document = TraceToChromeJson(TwoClientsOneLoadEach(), 0);
  std::vector<json> starts = Events(document, "s");
  std::vector<json> ends = Events(document, "f");
  ASSERT_EQ(starts.size(), 2u);
  ASSERT_EQ(ends.size(), 2u);
  for (const json& start : starts) {
    const json* end = nullptr;
    for (const json& candidate : ends) {
      if (candidate["id"] == start["id"]) end = &candidate;
    }
    ASSERT_NE(end, nullptr) << start;
    EXPECT_EQ((*end)["pid"], kDaemonPid);
    EXPECT_GE((*end)["ts"].get<double>(), start["ts"].get<double>());
  }
}

TEST(TraceJson, EventsBeforeTheWindowAndLoadsCutByItAreLeftOut) {
  // From 11 µs: A's request (10 µs) is outside, so A has no load span; its
  // copy (issued at 12 µs) is inside.
  json document = TraceToChromeJson(TwoClientsOneLoadEach(), 11000);
  std::vector<json> loads = Events(document, "X", "load");
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_EQ(loads[0]["pid"], kClientB);
  EXPECT_EQ(Events(document, "X", "copy").size(), 2u);
  EXPECT_DOUBLE_EQ(document["otherData"]["since_us"].get<double>(), 11.0);
}

TEST(TraceJson, RejectedRequestsAreInstantEventsOnTheirDevice) {
  v1::TraceReply reply = TwoClientsOneLoadEach();
  Add(reply.mutable_devices(0)->mutable_events(), TraceKind::kRejected, 40000, 2, 1, 5);
  json document = TraceToChromeJson(reply, 0);
  std::vector<json> rejected = Events(document, "i");
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0]["name"], "rejected");
  EXPECT_EQ(rejected[0]["args"]["client_pid"], kClientB);
  EXPECT_EQ(rejected[0]["args"]["generation"], 5);
}

TEST(TraceJson, LossReportNamesEachSourceThatLostEvents) {
  v1::TraceReply reply = TwoClientsOneLoadEach();
  EXPECT_EQ(TraceLossReport(reply), "");
  reply.mutable_devices(0)->set_lost(5);
  reply.mutable_clients(1)->set_lost(3);
  reply.mutable_clients(0)->set_invalid(2);
  std::string report = TraceLossReport(reply);
  EXPECT_NE(report.find("device HOST-0: 5 daemon events"), std::string::npos) << report;
  EXPECT_NE(report.find("client b (pid 300): 3 events"), std::string::npos) << report;
  EXPECT_NE(report.find("client a (pid 200): 2 trace entries refused"), std::string::npos)
      << report;
}

}  // namespace
}  // namespace blockswap::ctl
