// Reliability (docs/reliability.md): whatever dies — a client at any point
// of a pass, the daemon mid-pass — nothing is lost and nobody stalls; a full
// session cycle leaves no leak; the P7 soak. Real blockswapd, real client
// processes (the stream role of client_roles.cc, blockswap_abi_client).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/client_roles.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/skip_without_test_hooks.h"

namespace blockswap::testing {
namespace {

class ReliabilityTest : public DaemonClientTest {
 protected:
  // Whether Admin still lists a session of `pid`.
  bool Listed(pid_t pid) {
    const v1::ClientsReply clients = Clients();
    for (const v1::ClientInfo& client : clients.clients()) {
      if (client.pid() == static_cast<uint32_t>(pid)) return true;
    }
    return false;
  }
  // The ids of the sessions Admin lists for `pid`.
  std::vector<uint64_t> SessionsOf(pid_t pid) {
    std::vector<uint64_t> ids;
    const v1::ClientsReply clients = Clients();
    for (const v1::ClientInfo& client : clients.clients()) {
      if (client.pid() == static_cast<uint32_t>(pid)) ids.push_back(client.session_id());
    }
    return ids;
  }
  // How long until Admin stops listing `pid` (at most `limit`; InfiniteDuration if it never does).
  absl::Duration TimeUntilGone(pid_t pid, absl::Time since, absl::Duration limit) {
    while (absl::Now() - since < limit) {
      if (!Listed(pid)) return absl::Now() - since;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return absl::InfiniteDuration();
  }
  int Mismatches(const std::string& name) {
    auto report = ReadRoleReport(ReportPath(name));
    auto it = report.find("mismatch");
    return it == report.end() ? 0 : static_cast<int>(it->second.size());
  }
};

// Item 1: 20 rounds; in each a random one of four streaming clients is
// SIGKILLed at a random point of a pass while the three others stream with
// every byte checked. The dead session must leave Admin promptly, its ring
// must be gone, and no other client may see one wrong byte; at the end the
// four clients left finish cleanly. "Promptly" is relative to this machine:
// within 1 s, or 10 x the slowest of three clean exits measured first
// beside the same four streaming clients, whichever is longer (a daemon
// that missed the death would keep the session until its client's
// connection timed out, or for ever).
TEST_F(ReliabilityTest, TwentyClientKillsMidPassDisturbNobody) {
  StartDaemon();
  const std::string stop_file = dirs_->temp_dir() + "/stop";
  std::mt19937 random(std::random_device{}());
  std::vector<std::unique_ptr<ChildProcess>> pool;
  std::vector<std::string> names;
  int spawned = 0;
  auto spawn = [&] {
    std::string name = absl::StrCat("client", spawned++);
    names.push_back(name);
    return std::make_unique<ChildProcess>(
        Spawn("stream", name, {"--passes=1000000", "--stop-file=" + stop_file}));
  };
  for (int i = 0; i < 4; ++i) pool.push_back(spawn());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(AwaitReport(names[i], "streaming")) << names[i];
  std::vector<std::string> current = names;
  absl::Duration slowest_clean_exit = absl::ZeroDuration();
  for (int i = 0; i < 3; ++i) {
    const std::string name = absl::StrCat("clean", i);
    const std::string own_stop = dirs_->temp_dir() + "/stop-" + name;
    ChildProcess leaving = Spawn("stream", name, {"--passes=1000000", "--stop-file=" + own_stop});
    ASSERT_TRUE(AwaitReport(name, "streaming")) << name;
    std::ofstream(own_stop) << "stop\n";
    const absl::Time asked = absl::Now();
    const absl::Duration gone = TimeUntilGone(leaving.pid(), asked, absl::Seconds(30));
    ASSERT_NE(gone, absl::InfiniteDuration()) << name << " never left Admin";
    slowest_clean_exit = std::max(slowest_clean_exit, gone);
    ASSERT_EQ(leaving.Wait(absl::Seconds(30)).value_or(-1), kClientOk) << name;
  }
  const absl::Duration limit = std::max(absl::Seconds(1), 10 * slowest_clean_exit);
  absl::Duration worst = absl::ZeroDuration();
  for (int round = 0; round < 20; ++round) {
    const size_t victim = std::uniform_int_distribution<size_t>(0, 3)(random);
    // A random point of a pass (a pass takes a few milliseconds here).
    absl::SleepFor(absl::Microseconds(std::uniform_int_distribution<int>(0, 20000)(random)));
    const pid_t pid = pool[victim]->pid();
    ASSERT_FALSE(pool[victim]->TryWait().has_value()) << current[victim] << " exited early";
    pool[victim]->Kill(SIGKILL);
    const absl::Time killed = absl::Now();
    const absl::Duration gone = TimeUntilGone(pid, killed, limit + absl::Seconds(5));
    EXPECT_LE(gone, limit) << "round " << round << ": session of pid " << pid
                           << " still listed (limit " << limit << ")";
    worst = std::max(worst, gone);
    const std::string ring = FirstValue(ReadRoleReport(ReportPath(current[victim])), "ring");
    const v1::ResidencyReply residency = Residency();
    for (const v1::RingResidency& listed : residency.rings()) {
      EXPECT_NE(absl::StrCat(listed.ring_id()), ring) << "round " << round << ": ring remains";
    }
    for (const std::string& name : names) {
      EXPECT_EQ(Mismatches(name), 0) << "round " << round << ": " << name << " saw wrong bytes";
    }
    (void)pool[victim]->Wait(absl::Seconds(5));
    pool[victim] = spawn();
    current[victim] = names.back();
    ASSERT_TRUE(AwaitReport(current[victim], "streaming")) << current[victim];
  }
  std::ofstream(stop_file) << "stop\n";
  for (size_t i = 0; i < pool.size(); ++i) {
    auto code = pool[i]->Wait(absl::Seconds(60));
    ASSERT_TRUE(code.ok()) << current[i] << ": " << code.status();
    EXPECT_EQ(*code, kClientOk) << current[i] << ": "
                                << FirstValue(ReadRoleReport(ReportPath(current[i])), "error");
    EXPECT_EQ(FirstValue(ReadRoleReport(ReportPath(current[i])), "wrong"), "0") << current[i];
  }
  std::cerr << "20 client kills: the slowest session was gone from Admin after " << worst
            << " (slowest of 3 clean exits: " << slowest_clean_exit << ")\n";
}

// Item 2: the daemon is SIGKILLed while a host trainer (the C ABI's
// scheduler, null stream) runs, and restarted on the same socket and master
// directory. The scheduler re-attaches, reopens the model by id (adopted by
// the new daemon: one masters file, nothing uploaded), re-creates its ring,
// reloads, and finishes with every streamed block byte-exact.
TEST_F(ReliabilityTest, SchedulerRidesOutADaemonKilledAndRestarted) {
  StartDaemon();
  ChildProcess trainer = SpawnAbiClient(
      "trainer",
      {"--scheduler-blocks=10", "--blocks=4", "--slots=2", "--passes=400", "--hook-sleep-us=100"});
  ASSERT_TRUE(AwaitReport("trainer", "streaming"));
  const std::string model = FirstValue(ReadRoleReport(ReportPath("trainer")), "model");
  ASSERT_TRUE(daemon_->Stop(SIGKILL).ok());
  ASSERT_FALSE(trainer.TryWait().has_value()) << "the trainer ended before the daemon died";
  absl::SleepFor(absl::Milliseconds(300));  // the trainer retries meanwhile
  StartDaemon();
  bool reattached = false;
  for (absl::Time until = absl::Now() + absl::Seconds(10); !reattached && absl::Now() < until;) {
    reattached = Listed(trainer.pid());
    if (!reattached) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(reattached) << "the trainer did not attach to the restarted daemon";
  auto code = trainer.Wait(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status();
  ReportLines report = ReadRoleReport(ReportPath("trainer"));
  EXPECT_EQ(*code, 0) << FirstValue(report, "error");
  EXPECT_EQ(FirstValue(report, "wrong"), "0");
  v1::ModelsReply models = Models();
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).model_id(), model);
  EXPECT_EQ(CountShm(".manifest"), 1) << "the restarted daemon must adopt, not re-register";
}

// A daemon stopped (SIGSTOP) past the rings' 10 s heartbeat limit and
// continued: its client takes it for lost and re-attaches, but the daemon
// never died and still holds the old session. The new Attach names it, and
// the process keeps one session, not one a pause. The rings here have no
// ready words (as on a GPU without stream memory operations), so the
// client waits on the host and watches the heartbeat; a stream waiting on a
// ready word just waits out a pause, its session kept.
TEST_F(ReliabilityTest, ADaemonPausedPastTheHeartbeatLeavesItsClientOneSession) {
  StartDaemon({.env = {{"BLOCKSWAP_HOST_NO_STREAM_WORDS", "1"}}});
  ChildProcess trainer = SpawnAbiClient(
      "paused", {"--scheduler-blocks=10", "--blocks=4", "--slots=2", "--passes=1000000",
                 "--reconnect-timeout-ms=60000"});
  ASSERT_TRUE(AwaitReport("paused", "streaming"));
  const std::vector<uint64_t> before = SessionsOf(trainer.pid());
  ASSERT_EQ(before.size(), 1u);
  ASSERT_EQ(::kill(daemon_->pid(), SIGSTOP), 0);
  // Past the 10 s heartbeat limit by as much again: the client must notice
  // even when its wait began late (a sanitized build on a loaded machine
  // once did not within 14 s), or when the pause began inside its pass's
  // statistics report, which gives up after kStatsReportTimeout (5 s) and
  // leaves the rest of the pause to the next wait.
  absl::SleepFor(absl::Seconds(20));
  ASSERT_EQ(::kill(daemon_->pid(), SIGCONT), 0);
  std::vector<uint64_t> after = before;
  for (absl::Time until = absl::Now() + absl::Seconds(20);
       absl::Now() < until && (after.empty() || after == before || after.size() > 1);) {
    absl::SleepFor(absl::Milliseconds(50));
    after = SessionsOf(trainer.pid());
  }
  // A little longer: a session that stays would still be listed.
  absl::SleepFor(absl::Milliseconds(500));
  after = SessionsOf(trainer.pid());
  ::kill(trainer.pid(), SIGKILL);
  (void)trainer.Wait(absl::Seconds(10));
  ASSERT_FALSE(after.empty()) << "the client did not re-attach: "
                              << FirstValue(ReadRoleReport(ReportPath("paused")), "error");
  EXPECT_EQ(after.size(), 1u) << "sessions of the client after the pause: "
                              << absl::StrJoin(after, ", ") << " (before: " << before[0] << ")";
  EXPECT_NE(after[0], before[0]) << "the client never noticed the pause: "
                                 << Describe("paused");
}

// Item 2, no restart: the scheduler tries to re-attach for its configured
// timeout (2 s here), then its hook fails UNAVAILABLE saying so.
TEST_F(ReliabilityTest, SchedulerWithoutItsDaemonFailsUnavailableAfterItsTimeout) {
  StartDaemon();
  ChildProcess trainer =
      SpawnAbiClient("orphan", {"--scheduler-blocks=10", "--blocks=4", "--slots=2",
                                "--passes=1000000", "--reconnect-timeout-ms=2000"});
  ASSERT_TRUE(AwaitReport("orphan", "streaming"));
  ASSERT_TRUE(daemon_->Stop(SIGKILL).ok());
  const absl::Time killed = absl::Now();
  auto code = trainer.Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << "the trainer hung: " << code.status();
  const absl::Duration took = absl::Now() - killed;
  const std::string error = FirstValue(ReadRoleReport(ReportPath("orphan")), "error");
  EXPECT_EQ(*code, 1);
  EXPECT_TRUE(absl::StartsWith(error, "14 ")) << "UNAVAILABLE expected: " << error;
  EXPECT_TRUE(absl::StrContains(error, "could not bring the session back within 2s")) << error;
  EXPECT_GE(took, absl::Seconds(2));
  EXPECT_LE(took, absl::Seconds(6));
  std::cerr << "without its daemon the trainer failed after " << took << ": " << error << "\n";
}

// A daemon that dies never leaves a client's stream waiting: it is SIGKILLed
// while a client's stream waits
// on a copy in flight (copies take 1.5 s here). The client's watchdog
// copies the block into the slot itself and then releases the stream's wait
// on the ready word, within its timeout: the work behind the wait reads the
// right bytes, nothing is void, the step fails UNAVAILABLE, the stream still
// runs work, and with a daemon back on the socket the next step succeeds
// byte-exact. Without the watchdog the
// stream would wait for a word nobody writes any more (the host backend's
// word waits, like a GPU's, watch no process), and the step would time out.
TEST_F(ReliabilityTest, DaemonKilledUnderAWaitingStreamReleasesItAndTheNextStepSucceeds) {
  BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS("BLOCKSWAP_HOST_COPY_DELAY_US");
  const DaemonFlags slow_copies{.env = {{"BLOCKSWAP_HOST_COPY_DELAY_US", "1500000"}}};
  StartDaemon(slow_copies);
  ChildProcess client = Spawn("orphan-stream", "orphan", {"--timeout-ms=5000"});
  ASSERT_TRUE(AwaitReport("orphan", "waiting"))
      << FirstValue(ReadRoleReport(ReportPath("orphan")), "error");
  EXPECT_EQ(FirstValue(ReadRoleReport(ReportPath("orphan")), "ready_path"), "words");
  ASSERT_TRUE(daemon_->Stop(SIGKILL).ok());
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(AwaitReport("orphan", "stream_after", absl::Seconds(10)))
      << "the client's stream was not released: "
      << FirstValue(ReadRoleReport(ReportPath("orphan")), "stream");
  const absl::Duration released = absl::Now() - killed;
  ReportLines report = ReadRoleReport(ReportPath("orphan"));
  EXPECT_TRUE(absl::StartsWith(FirstValue(report, "step_error"), "14 "))
      << "UNAVAILABLE expected: " << FirstValue(report, "step_error");
  EXPECT_EQ(FirstValue(report, "stream_after"), "ok");
  EXPECT_LT(released, absl::Seconds(5)) << "released only after the client's 5 s timeout";
  // The stream's wait had been committed before the daemon died, and the
  // daemon's copy never wrote the word: the client copied the block into its
  // slot itself, from the master it maps, before it let the wait go, so the
  // work behind the wait read the right bytes and nothing is void.
  EXPECT_EQ(FirstValue(report, "exact_1"), "1") << "the healed slot read wrong bytes";
  EXPECT_TRUE(absl::StartsWith(FirstValue(report, "unfinished"), "0 "))
      << "no DATA_LOSS expected: " << FirstValue(report, "unfinished");
  EXPECT_EQ(FirstValue(report, "unfinished_again"), "ok");
  StartDaemon(slow_copies);
  auto code = client.Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  report = ReadRoleReport(ReportPath("orphan"));
  EXPECT_EQ(*code, 0) << FirstValue(report, "error");
  EXPECT_EQ(FirstValue(report, "recovered"), "ok");
  std::cerr << "stream released " << released
            << " after the daemon was killed (step: " << FirstValue(report, "step_error") << ")\n";
}

// Reconnection off (timeout 0): the daemon's loss fails the hook at once.
TEST_F(ReliabilityTest, SchedulerWithReconnectionOffFailsAtOnce) {
  StartDaemon();
  ChildProcess trainer =
      SpawnAbiClient("no-reconnect", {"--scheduler-blocks=10", "--blocks=4", "--slots=2",
                                      "--passes=1000000", "--reconnect-timeout-ms=0"});
  ASSERT_TRUE(AwaitReport("no-reconnect", "streaming"));
  ASSERT_TRUE(daemon_->Stop(SIGKILL).ok());
  const absl::Time killed = absl::Now();
  auto code = trainer.Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << "the trainer hung: " << code.status();
  const std::string error = FirstValue(ReadRoleReport(ReportPath("no-reconnect")), "error");
  EXPECT_EQ(*code, 1);
  EXPECT_TRUE(absl::StartsWith(error, "14 ")) << "UNAVAILABLE expected: " << error;
  EXPECT_FALSE(absl::StrContains(error, "could not bring the session back")) << error;
  // At once: no reconnection attempt (30 s by default); 3 s leaves room for
  // a sanitizer build on a loaded machine (about 0.1 s otherwise).
  EXPECT_LE(absl::Now() - killed, absl::Seconds(3));
}

// Item 4: a whole session cycle — attach, register, ring, loads, ring
// destroyed, detach — then SIGTERM. Built with AddressSanitizer
// (configuration B), LeakSanitizer runs at the daemon's and the client's
// exit: a leak makes the exit code non-zero and prints its report.
TEST_F(ReliabilityTest, FullSessionCycleLeavesNoLeakAndTheDaemonExitsZero) {
  const std::string log = dirs_->temp_dir() + "/daemon.log";
  StartDaemon({.output_path = log});
  EXPECT_EQ(Run("stream", "cycle", {"--passes=20"}), kClientOk);
  EXPECT_EQ(Run("stream", "reopen", {"--passes=5", "--slots=3"}), kClientOk);
  auto code = daemon_->Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  std::stringstream output;
  output << std::ifstream(log).rdbuf();
  EXPECT_EQ(*code, 0) << output.str();
  EXPECT_FALSE(absl::StrContains(output.str(), "Sanitizer")) << output.str();
}

// Item 5: P7 — many clients, each streaming verified loads at once, no error.
// CI runs 16 clients x 1000 loads; tests/bench/p7-soak.sh the full 64 x 10000
// (BLOCKSWAP_P7_CLIENTS, BLOCKSWAP_P7_LOADS).
int64_t EnvInt(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  int64_t parsed = 0;
  return value != nullptr && absl::SimpleAtoi(value, &parsed) && parsed > 0 ? parsed : fallback;
}

TEST_F(ReliabilityTest, P7SoakManyClientsVerifiedLoadsNoError) {
  const int64_t clients = EnvInt("BLOCKSWAP_P7_CLIENTS", 16);
  const int64_t loads = EnvInt("BLOCKSWAP_P7_LOADS", 1000);
  constexpr int64_t kBlocks = 4;
  StartDaemon({.env = {{"BLOCKSWAP_HOST_JITTER_US", "20"}}});
  std::vector<ChildProcess> children;
  for (int64_t i = 0; i < clients; ++i) {
    children.push_back(Spawn("stream", absl::StrCat("soak", i),
                             {absl::StrCat("--passes=", (loads + kBlocks - 1) / kBlocks),
                              absl::StrCat("--blocks=", kBlocks), "--elements=1024"},
                             {{"BLOCKSWAP_HOST_JITTER_US", "20"}}));
  }
  int64_t errors = 0, verified = 0;
  for (int64_t i = 0; i < clients; ++i) {
    auto code = children[i].Wait(absl::Minutes(30));
    const ReportLines report = ReadRoleReport(ReportPath(absl::StrCat("soak", i)));
    int64_t wrong = 0, done = 0;
    const bool counted = absl::SimpleAtoi(FirstValue(report, "wrong"), &wrong) &&
                         absl::SimpleAtoi(FirstValue(report, "loads"), &done);
    verified += counted ? done : 0;
    // A client that failed counts as one error besides its wrong loads.
    errors += (counted ? wrong : 0) + (!code.ok() || *code != kClientOk || !counted ? 1 : 0);
    EXPECT_TRUE(code.ok() && *code == kClientOk)
        << "soak" << i << ": "
        << (code.ok() ? absl::StrCat("exit ", *code) : code.status().ToString()) << " "
        << FirstValue(report, "error");
  }
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(verified, clients * ((loads + kBlocks - 1) / kBlocks) * kBlocks);
  std::cout << "P7 scale (" << clients << " clients x " << loads
            << " verified loads) goal=0 errors measured=" << errors << " errors "
            << (errors == 0 ? "PASS" : "MISS") << std::endl;
}

}  // namespace
}  // namespace blockswap::testing
