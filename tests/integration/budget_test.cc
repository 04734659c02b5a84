// Budgets and quotas with real processes: a client asking for more memory
// than the node's budget, or more than its process's or uid's quota, is
// refused with RESOURCE_EXHAUSTED naming the limit (budget_roles.cc checks
// the message), the daemon stays up, and a client streaming beside it keeps
// verifying every byte. The greedy clients are budget_roles.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/core/connection.h"
#include "tests/integration/daemon_client_fixture.h"

namespace blockswap::testing {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

class BudgetTest : public DaemonClientTest {
 protected:
  // Runs each hog (its arguments) beside a streamer that verifies every
  // byte; each hog must be refused as its --expect says.
  void ExpectHogsRefusedBesideAStreamer(const std::vector<std::vector<std::string>>& hogs) {
    ChildProcess streamer = Spawn("stream", "streamer", {"--passes=200"});
    ASSERT_TRUE(AwaitReport("streamer", "streaming"));
    int n = 0;
    for (const std::vector<std::string>& hog : hogs) {
      const std::string name = absl::StrCat("hog", n++);
      EXPECT_EQ(Run("greedy", name, hog), kClientOk) << absl::StrJoin(hog, " ");
    }
    EXPECT_GT(Stats().devices_size(), 0) << "the daemon no longer answers";
    EXPECT_EQ(Finish(streamer, "streamer"), kClientOk) << "the streaming client was disturbed";
  }
  uint64_t Granted(const std::string& hog) {
    return std::stoull("0" + FirstValue(Report(hog), "granted"));
  }
};

// CreateRing 64 x 1 GiB, BeginUpload of 16 GiB, and three sessions' uploads
// of 100 MiB each, under a budget of 256 MiB: each hog is refused naming
// max_memory_bytes (and the use that holds it).
TEST_F(BudgetTest, EveryMemoryHogIsRefusedByTheNodesBudget) {
  // No per-uid limits: they are checked first (docs/store.md, "Checks
  // before work") and would refuse the 16 GiB upload and the 1 GiB rings
  // before the node's budget does.
  StartDaemon({.extra_args = {absl::StrCat("--max-memory-bytes=", 256 * kMiB),
                              "--max-master-bytes-per-uid=0", "--max-device-bytes-per-uid=0"}});
  const std::string budget = absl::StrCat("over max_memory_bytes = ", 256 * kMiB);
  ExpectHogsRefusedBesideAStreamer({
      {"--case=rings", "--attempts=64", absl::StrCat("--slot-bytes=", 1024 * kMiB),
       "--expect=" + budget},
      {"--case=upload", "--blocks=16", absl::StrCat("--block-bytes=", 1024 * kMiB),
       "--expect=" + budget},
      {"--case=upload", "--attempts=3", "--sessions=1", absl::StrCat("--block-bytes=", 100 * kMiB),
       "--expect=staging 209715200, rings"},
  });
  EXPECT_EQ(Granted("hog0"), 0u);
  EXPECT_EQ(Granted("hog2"), 2u) << "two staging areas of 100 MiB fit 256 MiB";
}

// Item 4: ten sessions of one process share the process's quota.
TEST_F(BudgetTest, SessionsOfOneProcessShareItsQuota) {
  StartDaemon({.extra_args = {"--max-rings-per-client=2"}});
  ExpectHogsRefusedBesideAStreamer({
      {"--case=rings", "--attempts=10", "--sessions=1", "--expect=max_rings_per_client = 2"},
  });
  EXPECT_EQ(Granted("hog0"), 2u);
}

// Parked file offers and sessions are counted per process too.
TEST_F(BudgetTest, FileOffersAndSessionsOverTheProcessQuotaAreRefused) {
  StartDaemon({.extra_args = {"--max-file-offers-per-client=8", "--max-sessions-per-client=3"}});
  ExpectHogsRefusedBesideAStreamer({
      {"--case=offers", "--offers=9", "--expect=over max_file_offers_per_client = 8"},
      {"--case=sessions", "--attempts=4", "--sessions=1",
       "--expect=would hold 4 sessions (3 held + 1 asked), over max_sessions_per_client = 3"},
  });
  EXPECT_EQ(Granted("hog1"), 3u);
}

// The uid quota counts every process of the uid: the streamer (root) holds
// the only ring root may have; another root process is refused, a process of
// another uid is not.
TEST_F(BudgetTest, TheUidQuotaCountsEveryProcessOfTheUid) {
  StartDaemon({.extra_args = {"--max-rings-per-uid=1", "--allow-uid=65534"}});
  ASSERT_EQ(::chmod(dirs_->temp_dir().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dirs_->socket_path().c_str(), 0666), 0);
  std::ofstream(ReportPath("hog1")).close();  // for uid 65534 to write into
  ASSERT_EQ(::chmod(ReportPath("hog1").c_str(), 0666), 0);
  ExpectHogsRefusedBesideAStreamer({
      {"--case=rings", "--attempts=1", "--expect=uid 0 would hold 2 rings"},
      {"--case=rings", "--attempts=2", "--uid=65534", "--expect=max_rings_per_uid = 1"},
  });
  EXPECT_EQ(Granted("hog1"), 1u) << "uid 65534 did not get a ring of its own";
}

// Item 2: 300 silent and 300 "PRI "-only connections from one uid neither
// fill the pending places nor reach gRPC: a new client of another uid
// attaches at once while they are open, a streamer is undisturbed, and the
// daemon closes every one of them (over the per-uid pending cap at once, the
// rest at the hello timeout, a "PRI " not being a whole preface).
TEST_F(BudgetTest, AFloodOfSilentAndHalfPrefaceConnectionsLocksNobodyOut) {
  StartDaemon({.extra_args = {"--allow-uid=65534"}});
  ASSERT_EQ(::chmod(dirs_->temp_dir().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dirs_->socket_path().c_str(), 0666), 0);
  std::ofstream(ReportPath("flood")).close();
  ASSERT_EQ(::chmod(ReportPath("flood").c_str(), 0666), 0);
  ChildProcess streamer = Spawn("stream", "streamer", {"--passes=200"});
  ASSERT_TRUE(AwaitReport("streamer", "streaming"));
  ChildProcess flood = Spawn("flood", "flood", {"--uid=65534", "--silent=300", "--pri=300"});
  ASSERT_TRUE(AwaitReport("flood", "flooding")) << Describe("flood");
  const absl::Time start = absl::Now();
  auto fresh = client::Connection::Connect(dirs_->socket_path(), "fresh");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "the new client waited for the flood";
  EXPECT_EQ(Finish(streamer, "streamer"), kClientOk) << "the streaming client was disturbed";
  EXPECT_EQ(Finish(flood, "flood"), kClientOk)
      << "connections the daemon never closed: " << Describe("flood");
}

// A writable memory cgroup under this process's own (v2 memory.max or v1
// memory.limit_in_bytes), removed on destruction; or the reason there is none.
class MemoryCgroup {
 public:
  static absl::StatusOr<std::unique_ptr<MemoryCgroup>> Create(uint64_t limit) {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    std::vector<std::pair<std::string, std::string>> candidates;  // directory, limit file
    while (std::getline(in, line)) {
      std::string path = line.substr(line.rfind(':') + 1);
      if (absl::StartsWith(line, "0::")) {
        candidates.push_back({"/sys/fs/cgroup" + path, "memory.max"});
      } else if (absl::StrContains(line, ":memory:")) {
        candidates.push_back({"/sys/fs/cgroup/memory" + path, "memory.limit_in_bytes"});
      }
    }
    std::string why = "no memory cgroup in /proc/self/cgroup";
    for (const auto& [parent, file] : candidates) {
      auto cgroup = std::unique_ptr<MemoryCgroup>(new MemoryCgroup);
      cgroup->directory_ = absl::StrCat(parent, "/blockswap-test-", ::getpid());
      if (::mkdir(cgroup->directory_.c_str(), 0755) != 0) {
        why = absl::StrCat("mkdir ", cgroup->directory_, ": ", std::strerror(errno));
        cgroup->directory_.clear();
        continue;
      }
      std::ofstream(cgroup->directory_ + "/" + file) << limit << "\n";
      std::ifstream back(cgroup->directory_ + "/" + file);
      uint64_t set = 0;
      if (!(back >> set) || set != limit) {
        why = absl::StrCat(cgroup->directory_, "/", file, " did not take ", limit,
                           " (no memory controller there)");
        continue;
      }
      cgroup->peak_file_ = cgroup->directory_ +
                           (file == "memory.max" ? "/memory.peak" : "/memory.max_usage_in_bytes");
      return cgroup;
    }
    return absl::UnavailableError(why);
  }
  ~MemoryCgroup() {
    if (!directory_.empty()) ::rmdir(directory_.c_str());
  }
  std::string procs() const { return directory_ + "/cgroup.procs"; }
  // The most memory the cgroup has held; 0 when the kernel does not say.
  uint64_t PeakBytes() const {
    std::ifstream in(peak_file_);
    uint64_t peak = 0;
    return in >> peak ? peak : 0;
  }

 private:
  MemoryCgroup() = default;
  std::string directory_;
  std::string peak_file_;
};

// The case: CreateRing 64 x 64 MiB against a daemon in a 512 MiB
// memory cgroup (without a budget it is OOM-killed). The default budget,
// "auto", is 3/4 of the cgroup's limit: the hog is refused, the daemon stays.
TEST_F(BudgetTest, InAMemoryCgroupTheDefaultBudgetKeepsTheDaemonAlive) {
  constexpr uint64_t kLimit = 512 * kMiB;
  auto cgroup = MemoryCgroup::Create(kLimit);
  if (!cgroup.ok()) GTEST_SKIP() << "no writable memory cgroup: " << cgroup.status().message();
  const std::string log = dirs_->temp_dir() + "/daemon.log";
  // No per-uid share of the ring memory, which would refuse the hog at half
  // the budget: this is about the budget.
  StartDaemon({.extra_args = {"--max-device-bytes-per-uid=0"},
               .output_path = log,
               .cgroup_procs = (*cgroup)->procs()});
  ExpectHogsRefusedBesideAStreamer({
      {"--case=rings", "--attempts=64", absl::StrCat("--slot-bytes=", 64 * kMiB),
       absl::StrCat("--expect=over max_memory_bytes = ", kLimit / 4 * 3)},
  });
  EXPECT_GE(Granted("hog0"), 4u) << "the budget refused rings that fit";
  if (uint64_t peak = (*cgroup)->PeakBytes(); peak != 0) {
    EXPECT_GE(peak, Granted("hog0") * 64 * kMiB) << "the rings were not charged to the cgroup";
    EXPECT_LT(peak, kLimit);
  }
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(absl::StrContains(text.str(), "bytes of memory cgroup")) << text.str();
  ASSERT_TRUE(daemon_->Stop(SIGTERM).ok());
}

}  // namespace
}  // namespace blockswap::testing
