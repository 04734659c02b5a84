// Fair copies, checked on the order and not the clock: a real
// blockswapd (host backend, copies slowed so that they queue) serves two
// client processes on one device, a streamer with short compute per block
// and a flooder that requests as far ahead as its ring allows and computes
// nothing. From the daemon's trace (Admin.Trace: copy-ready, copy-issued):
// no ring is issued two copies in a row while the other has a ready copy,
// and while the streamer has a ready copy at most one flooder copy is issued
// before its next (the streamer is never more than one flooder copy behind).
#include <gtest/gtest.h>

#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "shared/protocol/trace_log.h"
#include "tests/integration/client_roles.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/child_process.h"
#include "tests/support/role_report.h"
#include "tests/support/skip_without_test_hooks.h"

namespace blockswap::testing {
namespace {

// What the order of one trace says.
struct IssueOrder {
  int issued = 0;              // copies of either ring
  int streamer_issued = 0;     // of the streamer, from a ready seen in the trace
  int streamer_contended = 0;  // of those, ready while the flooder had one ready
  int back_to_back_while_other_ready = 0;
  // While the streamer had a ready copy: the most flooder copies issued
  // before its next copy.
  int most_flooder_copies_ahead = 0;
  std::string first_violation;
};

IssueOrder ReadIssueOrder(const v1::TraceDevice& device, uint64_t streamer, uint64_t flooder) {
  IssueOrder order;
  std::map<uint64_t, int> ready;  // per ring: ready, not yet issued
  // Flooder copies issued since the streamer last issued one or, if later,
  // since it had a ready copy again.
  int flooder_copies_ahead = 0;
  // Its copies (slot, generation) ready and not yet issued.
  std::set<std::pair<uint32_t, uint32_t>> streamer_waiting;
  uint64_t last_ring = 0;
  std::deque<std::string> recent;  // the events before a violation, for its message
  for (const v1::TraceEvent& event : device.events()) {
    const uint64_t ring = event.ring_id();
    if (ring != streamer && ring != flooder) continue;
    const uint64_t other = ring == streamer ? flooder : streamer;
    const auto key = std::make_pair(event.slot(), event.generation());
    if (event.kind() == static_cast<uint32_t>(TraceKind::kCopyReady) ||
        event.kind() == static_cast<uint32_t>(TraceKind::kCopyIssued)) {
      recent.push_back(absl::StrCat(event.time_ns(), " ring ", ring, " ",
                                    TraceKindName(static_cast<TraceKind>(event.kind())), " slot ",
                                    event.slot(), " generation ", event.generation()));
      if (recent.size() > 16) recent.pop_front();
    }
    if (event.kind() == static_cast<uint32_t>(TraceKind::kCopyReady)) {
      ++ready[ring];
      if (ring == streamer) {
        if (streamer_waiting.empty()) flooder_copies_ahead = 0;
        streamer_waiting.insert(key);
        order.streamer_contended += ready[flooder] > 0;
      }
      continue;
    }
    if (event.kind() != static_cast<uint32_t>(TraceKind::kCopyIssued)) continue;
    ++order.issued;
    if (ready[ring] > 0) --ready[ring];
    if (ring == last_ring && ready[other] > 0) {
      ++order.back_to_back_while_other_ready;
      if (order.first_violation.empty()) {
        order.first_violation = absl::StrCat(
            "ring ", ring, " issued twice in a row at ", event.time_ns(), " while ring ", other,
            " had ", ready[other], " ready; the events up to it:\n", absl::StrJoin(recent, "\n"));
      }
    }
    last_ring = ring;
    if (ring == flooder) {
      if (!streamer_waiting.empty()) ++flooder_copies_ahead;
    } else if (streamer_waiting.erase(key) > 0) {
      ++order.streamer_issued;
      order.most_flooder_copies_ahead =
          std::max(order.most_flooder_copies_ahead, flooder_copies_ahead);
      flooder_copies_ahead = 0;
    }
  }
  return order;
}

class FairCopiesTest : public DaemonClientTest {
 protected:
  void SetUp() override {
    BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS("BLOCKSWAP_HOST_COPY_DELAY_US");
    DaemonClientTest::SetUp();
    // Each copy takes at least 1 ms, so that the flooder's requests queue
    // on the copy stream and the order is the daemon's to choose, even with
    // the flooder's own process slowed (sanitizers, a loaded machine).
    StartDaemon({.env = {{"BLOCKSWAP_HOST_COPY_DELAY_US", "1000"}}});
  }

  uint64_t RingOf(const std::string& name) {
    uint64_t ring = 0;
    EXPECT_TRUE(absl::SimpleAtoi(FirstValue(Report(name), "ring"), &ring)) << Describe(name);
    return ring;
  }
};

TEST_F(FairCopiesTest, AStreamerBesideAFlooderIsNeverMoreThanOneFlooderCopyBehind) {
  const std::string stop_file = dirs_->temp_dir() + "/flooder.stop";
  // The flooder first (the lower ring id: in the order rings are walked, it
  // comes first), as far ahead as 8 slots allow, no compute.
  ChildProcess flooder =
      Spawn("stream", "flooder",
            {"--passes=1000", "--slots=8", "--blocks=8", "--seed=2", "--stop-file=" + stop_file});
  ASSERT_TRUE(AwaitReport("flooder", "streaming")) << Describe("flooder");
  ChildProcess streamer =
      Spawn("stream", "streamer", {"--passes=40", "--slots=2", "--blocks=6", "--compute-us=200"});
  EXPECT_EQ(Finish(streamer, "streamer"), kClientOk) << Describe("streamer");
  { std::ofstream(stop_file) << "stop\n"; }
  EXPECT_EQ(Finish(flooder, "flooder"), kClientOk) << Describe("flooder");

  v1::TraceRequest request;
  v1::TraceReply trace;
  grpc::ClientContext context;
  grpc::Status status = daemon_->Admin()->Trace(&context, request, &trace);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(trace.devices_size(), 1);
  const v1::TraceDevice& device = trace.devices(0);
  EXPECT_EQ(device.lost(), 0u) << "the trace lost events: the check would miss some";

  const uint64_t streamer_ring = RingOf("streamer");
  const uint64_t flooder_ring = RingOf("flooder");
  const IssueOrder order = ReadIssueOrder(device, streamer_ring, flooder_ring);
  const int streamer_loads = static_cast<int>(NumberValue(Report("streamer"), "loads"));
  EXPECT_EQ(order.streamer_issued, streamer_loads) << "every streamer copy, ready then issued";
  std::cout << order.streamer_contended << " of " << streamer_loads
            << " streamer copies became ready while the flooder had one ready; " << order.issued
            << " copies issued in all\n";
  // Not vacuous: the two rings competed for the copy stream most of the time.
  EXPECT_GE(order.streamer_contended, streamer_loads / 4)
      << "the flooder had a ready copy when only " << order.streamer_contended << " of "
      << streamer_loads << " streamer copies became ready";
  EXPECT_EQ(order.back_to_back_while_other_ready, 0) << order.first_violation;
  EXPECT_LE(order.most_flooder_copies_ahead, 1)
      << "a streamer copy waited behind " << order.most_flooder_copies_ahead << " flooder copies";
}

}  // namespace
}  // namespace blockswap::testing
