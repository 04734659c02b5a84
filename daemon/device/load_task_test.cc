#include "daemon/device/load_task.h"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <memory>

#include "absl/status/status.h"

namespace blockswap::daemon {
namespace {

TEST(LoadErrorEventTest, NamesTheRequestAndCarriesTheError) {
  v1::LoadEvent event =
      LoadErrorEvent(7, 3, 12, absl::OutOfRangeError("slot 5 out of range (ring has 4 slots)"));
  EXPECT_EQ(event.ring_id(), 7u);
  EXPECT_EQ(event.slot(), 3u);
  EXPECT_EQ(event.generation(), 12u);
  EXPECT_EQ(event.error_code(), static_cast<int>(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(event.error_message(), "slot 5 out of range (ring has 4 slots)");
}

TEST(LoadTaskTest, SetSourceTakesWhatTheResolverFound) {
  static const std::array<std::byte, 8> kMaster{};
  auto mapping = std::make_shared<int>(0);
  ResolvedLoad resolved;
  resolved.source = kMaster.data();
  resolved.bytes = kMaster.size();
  resolved.keep_alive = mapping;
  resolved.model_id = "model-a";
  resolved.staged = true;
  LoadTask task;
  task.SetSource(std::move(resolved));
  EXPECT_EQ(task.source, kMaster.data());
  EXPECT_EQ(task.bytes, kMaster.size());
  EXPECT_EQ(task.model_id, "model-a");
  EXPECT_TRUE(task.staged);
  // The task now keeps the master mapped, and nothing else does but the test.
  EXPECT_EQ(task.keep_alive.get(), mapping.get());
  EXPECT_EQ(mapping.use_count(), 2);
}

}  // namespace
}  // namespace blockswap::daemon
