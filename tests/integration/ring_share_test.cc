// What one uid may hold in rings leaves the others room, with real
// processes: uid 65534 holds every session and ring its quotas let it
// (ring_hoard_roles.cc), against a daemon limited to 4096 descriptors as a
// unit's LimitNOFILE= would; then root registers a model and streams it
// byte-exact. Everything else is the default configuration, but for the
// node's budget: "auto" would be 3/4 of the test machine's memory, so it is
// 512 MiB here, as a cgroup's MemoryMax= would make it.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/open_descriptors.h"

namespace blockswap::testing {
namespace {

constexpr uint64_t kDaemonMaxOpenFiles = 4096;
constexpr uint64_t kBudget = uint64_t{512} << 20;
// A client process may hold 16 sessions and 64 rings (max_*_per_client),
// the uid 128 and 512 (max_*_per_uid): nine processes reach the uid's
// limits whichever comes first.
constexpr int kHoarders = 9;

class RingShareTest : public DaemonClientTest {};

TEST_F(RingShareTest, AUidHoldingEveryRingItMayLeavesRootRegisteringAndStreaming) {
  std::vector<std::string> roles = {"root"};
  for (int i = 0; i < kHoarders; ++i) roles.push_back(absl::StrCat("hoard", i));
  StartSharedDaemon({.extra_args = {absl::StrCat("--max-memory-bytes=", kBudget)},
                     .output_path = dirs_->temp_dir() + "/daemon.log",
                     .max_open_files = kDaemonMaxOpenFiles},
                    roles);
  const int descriptors_before = static_cast<int>(OpenDescriptors(daemon_->pid()).size());
  const std::string stop_file = dirs_->temp_dir() + "/stop";
  // Rings of 16 MiB first, halved after each refusal: the first hoarder
  // takes the ring memory its uid may have, the next ones the rest.
  std::vector<ChildProcess> hoarders;
  uint64_t rings = 0, sessions = 0, ring_bytes = 0;
  std::set<std::string> refusals;
  for (int i = 0; i < kHoarders; ++i) {
    const std::string name = absl::StrCat("hoard", i);
    hoarders.push_back(Spawn(
        "ring-hoard", name,
        {"--uid=65534", "--sessions=16", "--slot-bytes=16777216", "--stop-file=" + stop_file}));
    ASSERT_TRUE(AwaitReport(name, "holding", absl::Seconds(120))) << Describe(name);
    const ReportLines report = Report(name);
    rings += std::stoull("0" + FirstValue(report, "rings"));
    sessions += std::stoull("0" + FirstValue(report, "sessions"));
    ring_bytes += std::stoull("0" + FirstValue(report, "ring_bytes"));
    if (auto it = report.find("refused"); it != report.end()) {
      refusals.insert(it->second.begin(), it->second.end());
    }
  }
  const int descriptors_held = static_cast<int>(OpenDescriptors(daemon_->pid()).size());
  std::cout << "uid 65534 holds " << sessions << " sessions and " << rings << " rings of "
            << ring_bytes << " bytes; daemon descriptors " << descriptors_before << " before, "
            << descriptors_held << " now (limit " << kDaemonMaxOpenFiles << "); refusals:\n";
  for (const std::string& refusal : refusals) std::cout << "  " << refusal << "\n";
  EXPECT_GT(rings, 0u) << "uid 65534 got no ring at all";

  const int root = Run("stream", "root", {"--passes=2"});
  std::cout << "root: exit " << root << " (" << Describe("root") << ")\n";
  EXPECT_EQ(root, kClientOk) << "root could not register and stream beside uid 65534's rings: "
                             << Describe("root");
  EXPECT_EQ(FirstValue(Report("root"), "wrong"), "0");

  std::ofstream(stop_file).close();
  for (int i = 0; i < kHoarders; ++i) {
    EXPECT_EQ(Finish(hoarders[i], absl::StrCat("hoard", i)), kClientOk)
        << Describe(absl::StrCat("hoard", i));
  }
  EXPECT_GT(Stats().devices_size(), 0) << "the daemon no longer answers";
  // The uid met its own limits, by name: its share of the ring memory and
  // of the daemon's descriptors.
  auto named = [&](absl::string_view key) {
    return std::any_of(refusals.begin(), refusals.end(),
                       [&](const std::string& r) { return absl::StrContains(r, key); });
  };
  EXPECT_TRUE(named("max_device_bytes_per_uid")) << "no refusal named the ring memory share";
  EXPECT_TRUE(named("max_descriptors_per_uid")) << "no refusal named the descriptor share";
}

}  // namespace
}  // namespace blockswap::testing
