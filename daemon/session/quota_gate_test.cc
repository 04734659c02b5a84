#include "daemon/session/quota_gate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/test_peer.h"

namespace blockswap::daemon {
namespace {

using ::blockswap::testing::TestPeer;

// One session per process.
ClientQuotas OneSessionEach() {
  ClientQuotas quotas;
  quotas.per_client.sessions = 1;
  return quotas;
}

TEST(QuotaGate, ChargesUnderTheQuotasInForceAndCountsWhatIsHeld) {
  QuotaGate gate([](absl::string_view) {});
  gate.quotas().Set(OneSessionEach());
  absl::StatusOr<Reservation> first = gate.Charge(TestPeer(42, 1000), {.sessions = 1});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(gate.accounts().HeldByProcess(42).sessions, 1u);
  EXPECT_EQ(gate.accounts().HeldByUid(1000).sessions, 1u);
  EXPECT_TRUE(gate.Charge(TestPeer(43, 1000), {.sessions = 1}).ok()) << "another process";
  first->Release();
  EXPECT_EQ(gate.accounts().HeldByProcess(42).sessions, 0u);
  EXPECT_EQ(gate.refusals(), 0u);
}

// A gate of OneSessionEach whose process 42 holds its session; the lines it
// logs.
class FullGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gate_.quotas().Set(OneSessionEach());
    ASSERT_TRUE(held_.ok()) << held_.status();
  }

  std::vector<std::string> lines_;
  QuotaGate gate_{[this](absl::string_view line) { lines_.emplace_back(line); }};
  absl::StatusOr<Reservation> held_ = gate_.Charge(TestPeer(42, 1000), {.sessions = 1});
};

TEST_F(FullGateTest, CountsAndLogsARefusalNamingTheProcess) {
  const std::vector<std::string>& lines = lines_;
  absl::StatusOr<Reservation> refused = gate_.Charge(TestPeer(42, 1000), {.sessions = 1});
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_EQ(gate_.refusals(), 1u);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("quota refusal for pid 42 (uid 1000): ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(std::string(refused.status().message())), std::string::npos) << lines[0];
}

TEST_F(FullGateTest, ARefusalRetriedInALoopIsCountedEachTimeButLoggedOnce) {
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(gate_.Charge(TestPeer(42, 1000), {.sessions = 1}).ok());
  }
  EXPECT_EQ(gate_.refusals(), 5u);
  EXPECT_EQ(lines_.size(), 1u);
}

TEST(QuotaGate, ANewLimitAppliesToTheNextCharge) {
  QuotaGate gate([](absl::string_view) {});
  absl::StatusOr<Reservation> held = gate.Charge(TestPeer(42, 1000), {.sessions = 1});
  ASSERT_TRUE(held.ok()) << "0 is unlimited";
  gate.quotas().Set(OneSessionEach());
  EXPECT_FALSE(gate.Charge(TestPeer(42, 1000), {.sessions = 1}).ok());
  EXPECT_EQ(gate.accounts().HeldByProcess(42).sessions, 1u) << "what is held stays";
}

}  // namespace
}  // namespace blockswap::daemon
