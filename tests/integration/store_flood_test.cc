// What the masters hold per uid, with real processes: one allowed user registering models of tiny
// distinct blocks until the daemon refuses (store_flood_roles.cc), against a
// daemon limited to 4096 descriptors as a unit's LimitNOFILE= would; then
// another user's new model registers and streams byte-exact, and a model it
// registered before the flood opens and streams.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/open_descriptors.h"

namespace blockswap::testing {
namespace {

constexpr int kResourceExhausted = 8;  // grpc::StatusCode::RESOURCE_EXHAUSTED
constexpr uint64_t kDaemonMaxOpenFiles = 4096;

class StoreFloodTest : public DaemonClientTest {
 protected:
  // A daemon limited to kDaemonMaxOpenFiles descriptors, as a unit's
  // LimitNOFILE= would, that uids 65534 and 65533 may reach.
  void StartLimitedDaemon(std::vector<std::string> args, const std::vector<std::string>& roles) {
    StartSharedDaemon({.extra_args = std::move(args),
                       .output_path = dirs_->temp_dir() + "/daemon.log",
                       .max_open_files = kDaemonMaxOpenFiles},
                      roles);
  }
  int DaemonDescriptors() { return static_cast<int>(OpenDescriptors(daemon_->pid()).size()); }
};

TEST_F(StoreFloodTest, AUidFloodingTinyBlocksIsRefusedAndOtherUsersKeepRegisteringAndOpening) {
  StartLimitedDaemon({}, {"before", "flood", "fresh", "reopen"});
  // uid 65533's model, registered (and streamed) before the flood.
  ASSERT_EQ(Run("stream", "before", {"--as-uid=65533", "--seed=2", "--passes=1"}), kClientOk)
      << Describe("before");
  const std::string registered_before = FirstValue(Report("before"), "model");
  const int descriptors_before = DaemonDescriptors();

  const absl::Time flood_start = absl::Now();
  ASSERT_EQ(Run("block-flood", "flood", {"--uid=65534", "--blocks=1000", "--models=40"}),
            kClientOk)
      << Describe("flood");
  const double flood_seconds = absl::ToDoubleSeconds(absl::Now() - flood_start);
  const int descriptors_after = DaemonDescriptors();
  const ReportLines flood = Report("flood");
  std::cout << "daemon descriptors: " << descriptors_before << " before the flood, "
            << descriptors_after << " after it (limit " << kDaemonMaxOpenFiles << "); flood: "
            << Describe("flood") << " in " << flood_seconds << " s\n";

  // The other user, after the flooder's session ended.
  const int fresh = Run("stream", "fresh", {"--as-uid=65533", "--seed=3", "--passes=2"});
  const int reopen = Run("stream", "reopen",
                         {"--as-uid=65533", "--seed=2", "--passes=2",
                          "--model-id=" + registered_before});
  std::cout << "other uid: new model exit " << fresh << " (" << Describe("fresh")
            << "); registered before the flood exit " << reopen << " (" << Describe("reopen")
            << ")\n";
  EXPECT_EQ(fresh, kClientOk) << Describe("fresh");
  EXPECT_EQ(reopen, kClientOk) << Describe("reopen");

  // The flood was refused by its own uid's limit, by name, not by a
  // descriptor the daemon ran out of.
  ASSERT_TRUE(flood.contains("refused")) << Describe("flood");
  const std::string refusal = FirstValue(flood, "refused");
  EXPECT_TRUE(absl::StartsWith(refusal, absl::StrCat(kResourceExhausted, " "))) << refusal;
  EXPECT_TRUE(absl::StrContains(refusal, "max_master_blocks_per_uid")) << refusal;
  EXPECT_TRUE(absl::StrContains(refusal, "uid 65534")) << refusal;
  // Masters keep no descriptor: what the flood leaves is a handful.
  EXPECT_LT(descriptors_after, descriptors_before + 64);
  EXPECT_GT(Stats().devices_size(), 0) << "the daemon no longer answers";
}

}  // namespace
}  // namespace blockswap::testing
