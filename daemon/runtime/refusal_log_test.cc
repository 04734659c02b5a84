#include "daemon/runtime/refusal_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace blockswap::daemon {
namespace {

class RefusalLogTest : public ::testing::Test {
 protected:
  std::vector<std::string> lines_;
  RefusalLog log_{[this](absl::string_view line) { lines_.emplace_back(line); }};
  const absl::Time t0_ = absl::FromUnixSeconds(1000);
};

TEST_F(RefusalLogTest, TheFirstRefusalOfAUidIsLoggedTheRestCountedInOneLine) {
  log_.Refused(1000, "closed a connection from pid 1 (uid 1000): first", t0_);
  for (int i = 2; i <= 2000; ++i) {
    log_.Refused(1000, "closed a connection from pid " + std::to_string(i) + " (uid 1000): later",
                 t0_ + absl::Milliseconds(i));
  }
  EXPECT_EQ(lines_, std::vector<std::string>{"closed a connection from pid 1 (uid 1000): first"});
  EXPECT_EQ(log_.next_flush(), t0_ + absl::Seconds(10));
  log_.Flush(t0_ + absl::Seconds(10));
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_EQ(lines_[1],
            "refused 1999 more connections from uid 1000 in the last 10s (the last: closed a "
            "connection from pid 2000 (uid 1000): later)");
  EXPECT_EQ(log_.next_flush(), absl::InfiniteFuture());
  // A new window: logged as it is again.
  log_.Refused(1000, "again", t0_ + absl::Seconds(11));
  EXPECT_EQ(lines_.back(), "again");
}

TEST_F(RefusalLogTest, OneUidsFloodDoesNotHideAnothersRefusal) {
  for (int i = 0; i < 100; ++i) log_.Refused(1000, "flood", t0_);
  log_.Refused(1001, "other", t0_);
  log_.Refused(std::nullopt, "unknown", t0_);
  EXPECT_EQ(lines_, (std::vector<std::string>{"flood", "other", "unknown"}));
  log_.Flush(t0_ + absl::Seconds(10));
  // Only the uid with suppressed refusals gets a summary.
  EXPECT_EQ(lines_.size(), 4u);
  EXPECT_EQ(lines_.back(),
            "refused 99 more connections from uid 1000 in the last 10s (the last: "
            "flood)");
}

TEST_F(RefusalLogTest, TheSummaryCountsWhatItWasMadeFor) {
  RefusalLog quotas([this](absl::string_view line) { lines_.emplace_back(line); },
                    absl::Seconds(10), "request");
  quotas.Refused(1000, "quota refusal 1", t0_);
  quotas.Refused(1000, "quota refusal 2", t0_ + absl::Seconds(1));
  // The next refusal after the window sums up the last one first.
  quotas.Refused(1000, "quota refusal 3", t0_ + absl::Seconds(12));
  EXPECT_EQ(lines_, (std::vector<std::string>{
                        "quota refusal 1",
                        "refused 1 more request from uid 1000 in the last 10s (the last: quota "
                        "refusal 2)",
                        "quota refusal 3"}));
}

}  // namespace
}  // namespace blockswap::daemon
