// Nothing is kept for a client that is gone: after a round of hostile
// clients (bad arguments, stolen tokens, garbage in ring memory, floods of
// connections, sessions, uploads and offers, a daemon crash and restart,
// clients killed mid-session and one that comes back) have all ended, the
// daemon holds no descriptor it did not hold before them, none of a deleted
// file above all (on a tmpfs a deleted file's pages stay allocated while a
// descriptor holds it).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "tests/integration/client_roles.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/open_descriptors.h"
#include "tests/support/safetensors_writer.h"

namespace blockswap::testing {
namespace {

using Descriptors = std::map<int, std::string>;

// Those of `after` that `before` did not hold (a number reused for another
// object counts as new), one per line: "fd N -> TARGET".
std::string Remaining(const Descriptors& before, const Descriptors& after) {
  std::string text;
  for (const auto& [fd, target] : after) {
    auto held = before.find(fd);
    if (held == before.end() || held->second != target) {
      absl::StrAppend(&text, "  fd ", fd, " -> ", target, "\n");
    }
  }
  return text;
}

int DeletedFiles(const Descriptors& descriptors) {
  int deleted = 0;
  for (const auto& [fd, target] : descriptors) deleted += IsDeletedFile(target);
  return deleted;
}

class GoneClientTest : public DaemonClientTest {
 protected:
  // The quotas the rogue and greedy cases run into, and uids 65534 and
  // 65533 allowed for the cases that act as another user.
  void StartDaemonForTheRound() {
    std::vector<std::string> roles = {"flood",
                                      "hostile-register-special-files",
                                      "vanishing-other-uid",
                                      "greedy-other-uid",
                                      "file-flood",
                                      "continuation-flood"};
    StartSharedDaemon(
        {.extra_args = {"--max-rings-per-client=2", "--max-device-bytes-per-client=1MiB",
                        "--max-staging-bytes-per-client=1MiB", "--max-file-offers-per-client=8",
                        "--max-sessions-per-client=3"}},
        roles);
  }

  // The daemon's sessions other than the test process's own.
  int OtherSessions() {
    int others = 0;
    const v1::ClientsReply clients = Clients();
    for (const v1::ClientInfo& client : clients.clients()) {
      others += client.pid() != static_cast<uint32_t>(::getpid());
    }
    return others;
  }

  // The daemon's descriptors once they stop changing (the same for half a
  // second, at most 10 s): a connection just closed by its client is
  // released when the daemon's relay sees the hang-up, a moment later.
  Descriptors SettledDescriptors() {
    Descriptors now = OpenDescriptors(daemon_->pid());
    int same = 0;
    for (absl::Time until = absl::Now() + absl::Seconds(10); same < 5 && absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(100));
      Descriptors next = OpenDescriptors(daemon_->pid());
      same = next == now ? same + 1 : 0;
      now = std::move(next);
    }
    return now;
  }

  void Rogue(const std::string& name, std::vector<std::string> args = {}) {
    args.push_back("--case=" + name);
    EXPECT_EQ(Run("rogue", "rogue-" + name, std::move(args)), kClientOk) << "rogue case " << name;
  }
  void Hostile(const std::string& name, std::vector<std::string> args = {}) {
    args.push_back("--case=" + name);
    EXPECT_EQ(Run("hostile", "hostile-" + name, std::move(args)), kClientOk)
        << "hostile case " << name;
  }
  void Greedy(const std::string& name, std::vector<std::string> args) {
    EXPECT_EQ(Run("greedy", name, std::move(args)), kClientOk) << "greedy " << name;
  }
  // Clients have all ended and the daemon, `which`, is back to the
  // descriptors it held `before` them: it has ended their sessions and
  // released what they held. The daemon hears of an exit from the process's
  // pidfd and of a hang-up from the socket at once, and frees a dead
  // client's ring as soon as its own copies into it are done (none lasts a
  // second here): 10 s is ample on a loaded machine, and nothing may stay
  // for longer.
  void ExpectNothingKept(const Descriptors& before, const std::string& which) {
    const absl::Time gone = absl::Now();
    for (absl::Time until = gone + absl::Seconds(30); OtherSessions() > 0 && absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_EQ(OtherSessions(), 0) << which << ": sessions of clients that are gone remain";
    Descriptors after = OpenDescriptors(daemon_->pid());
    for (absl::Time until = absl::Now() + absl::Seconds(10);
         (after.size() > before.size() || DeletedFiles(after) > DeletedFiles(before)) &&
         absl::Now() < until;
         after = OpenDescriptors(daemon_->pid())) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    std::cout << which << ": daemon descriptors: " << before.size() << " before its clients, "
              << after.size() << " after them (" << DeletedFiles(before) << " and "
              << DeletedFiles(after) << " of deleted files), " << absl::Now() - gone
              << " after the last client ended\n";
    EXPECT_LE(after.size(), before.size())
        << which << " keeps descriptors for clients that are gone; held now and not before:\n"
        << Remaining(before, after) << "all held before:\n"
        << Remaining({}, before);
    EXPECT_LE(DeletedFiles(after), DeletedFiles(before))
        << which << " keeps descriptors of deleted files; held now and not before:\n"
        << Remaining(before, after);
  }

  // A client killed with SIGKILL once it reported `key`.
  void Killed(const std::string& role, const std::string& name, std::vector<std::string> args,
              const std::string& key) {
    ChildProcess child = Spawn(role, name, std::move(args));
    EXPECT_TRUE(AwaitReport(name, key)) << name << ": " << Describe(name);
    child.Kill(SIGKILL);
    EXPECT_EQ(Finish(child, name), 128 + SIGKILL);
  }
};

TEST_F(GoneClientTest, NothingIsKeptForAClientThatIsGone) {
  StartDaemonForTheRound();
  // The test's own session holds 5 models open throughout, as a node's
  // trainers would.
  auto owner = client::Connection::Connect(dirs_->socket_path(), "owner");
  ASSERT_TRUE(owner.ok()) << owner.status();
  std::vector<std::unique_ptr<client::Model>> models;
  for (int m = 0; m < 5; ++m) {
    auto model = client::Model::Register(**owner, absl::StrCat("open-", m),
                                         ModelUploads(ModelTensorData(100 + m, 3, 1024), 3));
    ASSERT_TRUE(model.ok()) << model.status();
    models.push_back(*std::move(model));
  }
  // A warm-up client first: what the daemon opens once, on first use, and
  // keeps for good (a log file, a worker's poller, a device's streams) is
  // then in the baseline rather than counted as kept for a client.
  ASSERT_EQ(Run("stream", "warm-up", {"--passes=2"}), kClientOk) << Describe("warm-up");
  ASSERT_EQ(Run("rogue", "warm-up-shm", {"--case=shm-bad-slot"}), kClientOk);
  for (absl::Time until = absl::Now() + absl::Seconds(30);
       OtherSessions() > 0 && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  const Descriptors before = SettledDescriptors();
  ASSERT_FALSE(before.empty()) << "cannot read /proc/" << daemon_->pid() << "/fd";

  // Bad arguments and stolen tokens.
  Rogue("stolen-token", {"--token=" + (*owner)->token()});
  Rogue("guessed-token");
  for (const char* name : {"unfreed-slot", "unknown-ring", "bad-slot", "bad-block", "unknown-model",
                           "foreign-ring", "foreign-destroy"}) {
    Rogue(name);
  }
  Hostile("unparsable-bodies");
  Hostile("bad-and-huge-reports");
  Hostile("reopen-read-only");
  Hostile("write-masters");
  Hostile("register-special-files", {"--uid=65534"});
  // Garbage in ring memory.
  for (const char* name : {"shm-bad-slot", "shm-unknown-handle", "shm-bad-block",
                           "shm-wrong-generation", "shm-tail-overrun", "shm-foreign-handle"}) {
    Rogue(name);
  }
  // Floods, each up to its quota: rings, device bytes, staging (uploads begun
  // and never written), parked file offers, sessions, connections.
  Rogue("ring-quota");
  Rogue("device-bytes-quota");
  Rogue("staging-quota");
  Greedy("greedy-uploads", {"--case=upload", "--attempts=3", "--block-bytes=400000",
                            "--expect=max_staging_bytes_per_client"});
  Greedy("greedy-offers",
         {"--case=offers", "--offers=9", "--expect=over max_file_offers_per_client = 8"});
  Greedy("greedy-sessions",
         {"--case=sessions", "--attempts=4", "--sessions=1", "--expect=max_sessions_per_client"});
  Greedy("greedy-other-uid",
         {"--case=rings", "--attempts=3", "--uid=65534", "--expect=max_rings_per_client = 2"});
  EXPECT_EQ(Run("flood", "flood", {"--uid=65534", "--silent=40", "--pri=40"}), kClientOk)
      << Describe("flood");
  EXPECT_EQ(Run("continuation-flood", "continuation-flood",
                {"--uid=65534", "--connections=4", "--header-mib=1", "--hold-ms=200"}),
            kClientOk)
      << Describe("continuation-flood");
  ExpectNothingKept(before, "the first daemon");

  // The daemon crashes and restarts under a client that rides it out (a
  // new session, its model reopened, its ring re-created) and one that
  // idles; the test's own session comes back and reopens its 5 models. The
  // new daemon adopts the masters; what follows runs on it, and it must end
  // where the first one began.
  ChildProcess survivor = Spawn("stream", "survivor", {"--reopen=1", "--passes=20"});
  ASSERT_TRUE(AwaitReport("survivor", "ready")) << Describe("survivor");
  ChildProcess idle = Spawn("idle", "idle-across", {});
  ASSERT_TRUE(AwaitReport("idle-across", "attached")) << Describe("idle-across");
  ASSERT_TRUE(daemon_->Stop(SIGKILL).ok());
  StartDaemonForTheRound();
  ASSERT_TRUE((*owner)->Reconnect(absl::Seconds(10)).ok());
  for (std::unique_ptr<client::Model>& model : models) {
    auto reopened = client::Model::Open(**owner, model->id());
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    model = *std::move(reopened);
  }
  EXPECT_EQ(Finish(survivor, "survivor"), kClientOk) << Describe("survivor");
  idle.Kill(SIGKILL);
  EXPECT_EQ(Finish(idle, "idle-across"), 128 + SIGKILL);

  // Clients killed mid-session: one holding everything at once, one
  // idling with a ring, one whose copy waits behind a `free` that never
  // completes; then a client that comes back and streams.
  Killed("hostile", "vanishing", {"--case=vanish-mid-session"}, "vanishing");
  Killed("hostile", "vanishing-other-uid", {"--case=vanish-mid-session", "--uid=65534"},
         "vanishing");
  Killed("idle", "idle", {}, "attached");
  // Registrations of a file with a huge header, running and queued when
  // their client dies, the file deleted meanwhile.
  const std::string file = dirs_->temp_dir() + "/deleted.safetensors";
  ASSERT_TRUE(WriteSafetensorsFile(file, ManyTinyTensors(200000, 100), /*seed=*/3).ok());
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  ChildProcess files =
      Spawn("file-flood", "file-flood", {"--uid=65534", "--file=" + file, "--registrations=16"});
  absl::SleepFor(absl::Milliseconds(500));
  ASSERT_EQ(::unlink(file.c_str()), 0);
  files.Kill(SIGKILL);
  (void)Finish(files, "file-flood");
  Killed("hog", "hog", {}, "holding");
  EXPECT_EQ(Run("stream", "back", {"--passes=2"}), kClientOk) << Describe("back");

  ExpectNothingKept(before, "the restarted daemon");
}

}  // namespace
}  // namespace blockswap::testing
