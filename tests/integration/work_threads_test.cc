// The daemon's work threads against an allowed user who registers
// safetensors files whose headers name hundreds of thousands of tensors
// (work_threads_roles.cc, acting as uid 65534): a header costs CPU in
// proportion to its size, the other users' uploads wait for at most one of
// the flood's items, work whose client left is dropped, and a stop ends
// within its grace.
#include <gtest/gtest.h>
#include <signal.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/process_cpu.h"
#include "tests/support/safetensors_writer.h"

namespace blockswap::testing {
namespace {

// A real sharded checkpoint has tens of thousands of tensors in a file; the
// flood's files have 200,000 (an 18 MB header).
constexpr size_t kFloodTensors = 200000;
constexpr size_t kTensorsPerBlock = 100;
constexpr char kBlockPattern[] = R"(^layers\.(\d+)\.)";
// Registrations each flooding role keeps in flight: more than the daemon has
// work threads, so that some wait in its queue.
constexpr int kFloodRegistrations = 16;
// More than an idle daemon's CPU in a second (its heartbeats and polls).
constexpr double kIdleCpuSeconds = 0.25;

class WorkThreadsTest : public DaemonClientTest {
 protected:
  // A safetensors file of `tensors` one-byte tensors, readable by every uid.
  std::string WriteManyTensorFile(size_t tensors) {
    const std::string path = absl::StrCat(dirs_->temp_dir(), "/tensors-", tensors, ".safetensors");
    absl::Status written =
        WriteSafetensorsFile(path, ManyTinyTensors(tensors, kTensorsPerBlock), /*seed=*/3);
    EXPECT_TRUE(written.ok()) << written;
    return path;
  }

  // Two roles of uid 65534, each registering `file` kFloodRegistrations times
  // at once (with `extra_args`); returns once both have made their calls and
  // the daemon had a moment to start on them.
  std::vector<ChildProcess> StartFloods(const std::string& file,
                                        const std::vector<std::string>& extra_args = {}) {
    std::vector<ChildProcess> floods;
    for (const char* name : {"flood-1", "flood-2"}) {
      std::vector<std::string> args = {"--uid=65534", "--file=" + file,
                                       absl::StrCat("--registrations=", kFloodRegistrations)};
      args.insert(args.end(), extra_args.begin(), extra_args.end());
      floods.push_back(Spawn("file-flood", name, std::move(args)));
    }
    for (const char* name : {"flood-1", "flood-2"}) {
      EXPECT_TRUE(AwaitReport(name, "calling")) << name << ": " << Describe(name);
    }
    absl::SleepFor(absl::Milliseconds(500));
    return floods;
  }

  double DaemonCpuSeconds() { return ProcessCpuSeconds(daemon_->pid()); }
  // The daemon's CPU time over one second, starting half a second from now:
  // running work notices its cancellation at its next check.
  double DaemonCpuOverASecond() {
    absl::SleepFor(absl::Milliseconds(500));
    const double before = DaemonCpuSeconds();
    absl::SleepFor(absl::Seconds(1));
    const double cpu = DaemonCpuSeconds() - before;
    std::cout << "daemon CPU over a second: " << cpu << " s\n";
    return cpu;
  }
};

TEST_F(WorkThreadsTest, AFortyThousandTensorHeaderTakesTheDaemonUnderTwoSecondsOfCpu) {
  StartSharedDaemon({}, {"register"});
  const std::string file = WriteManyTensorFile(40000);
  const double cpu_before = DaemonCpuSeconds();
  ChildProcess role = Spawn("file-flood", "register",
                            {"--uid=65534", "--file=" + file, "--registrations=1",
                             absl::StrCat("--block-pattern=", kBlockPattern)});
  ASSERT_EQ(Finish(role, "register", absl::Seconds(60)), kClientOk) << Describe("register");
  const double cpu = DaemonCpuSeconds() - cpu_before;
  std::cout << "40,000 tensors (400 blocks) registered in "
            << NumberValue(Report("register"), "seconds") << " s, " << cpu << " s of daemon CPU\n";
  EXPECT_TRUE(Report("register").contains("registered")) << Describe("register");
  EXPECT_LT(cpu, 2.0) << "the header's parse grows faster than the header";
}

// Both work threads busy with the flood and 28 more of its registrations
// queued: uid 65533's upload (two work items: reserving the staging area,
// then hashing and copying it) still waits for at most one flood item each.
// Measured against one flood item and one upload alone, timed in the same
// run: the bound is four of each (one item per upload step, and a loaded
// machine's slack), where waiting behind the queue would be fourteen items.
TEST_F(WorkThreadsTest, AnotherUidsUploadWaitsForAtMostOneItemOfTwoHugeHeaderFloods) {
  StartSharedDaemon({}, {"one-item", "upload-alone", "flood-1", "flood-2", "upload"});
  const std::string file = WriteManyTensorFile(kFloodTensors);
  ChildProcess one_item =
      Spawn("file-flood", "one-item", {"--uid=65534", "--file=" + file, "--registrations=1"});
  ASSERT_EQ(Finish(one_item, "one-item", absl::Seconds(60)), kClientOk) << Describe("one-item");
  const double item_seconds = NumberValue(Report("one-item"), "seconds");
  ChildProcess alone = Spawn("upload", "upload-alone", {"--uid=65533", "--bytes=1048576"});
  ASSERT_EQ(Finish(alone, "upload-alone", absl::Seconds(30)), kClientOk)
      << Describe("upload-alone");
  const double alone_seconds = NumberValue(Report("upload-alone"), "seconds");

  std::vector<ChildProcess> floods = StartFloods(file);
  ChildProcess upload = Spawn("upload", "upload", {"--uid=65533", "--bytes=1048576"});
  ASSERT_EQ(Finish(upload, "upload", absl::Seconds(60)), kClientOk) << Describe("upload");
  const double seconds = NumberValue(Report("upload"), "seconds");
  std::cout << "uid 65533's 1 MiB upload beside two floods of " << kFloodRegistrations
            << " registrations of " << kFloodTensors << " tensors: " << seconds
            << " s; alone: " << alone_seconds << " s; one flood item: " << item_seconds << " s\n";
  EXPECT_TRUE(Report("upload").contains("model")) << Describe("upload");
  EXPECT_GT(item_seconds, 0);
  EXPECT_LT(seconds, 4 * (item_seconds + alone_seconds)) << "the upload waited behind the flood";
}

// The flooding clients die with their registrations running and queued: the
// daemon drops them rather than parsing headers nobody waits for.
TEST_F(WorkThreadsTest, RegistrationsOfAClientThatLeftAreDropped) {
  StartSharedDaemon({}, {"flood-1", "flood-2"});
  const std::string file = WriteManyTensorFile(kFloodTensors);
  std::vector<ChildProcess> floods = StartFloods(file);
  for (ChildProcess& flood : floods) {
    flood.Kill(SIGKILL);
    EXPECT_TRUE(flood.Wait(absl::Seconds(10)).ok());
  }
  // The sessions end with their processes.
  EXPECT_LT(DaemonCpuOverASecond(), kIdleCpuSeconds)
      << "the daemon kept working for clients that had left";
  EXPECT_GT(Stats().devices_size(), 0) << "the daemon no longer answers";
}

// The flood's calls carry a deadline that passes while most of them still
// wait in the queue, and its clients stay: the daemon drops the calls it has
// not started and stops the running ones.
TEST_F(WorkThreadsTest, RegistrationsWhoseDeadlinePassedAreDropped) {
  StartSharedDaemon({}, {"flood-1", "flood-2"});
  const std::string file = WriteManyTensorFile(kFloodTensors);
  std::vector<ChildProcess> floods = StartFloods(file, {"--deadline-ms=1000", "--hold-ms=30000"});
  for (const char* name : {"flood-1", "flood-2"}) {
    ASSERT_TRUE(AwaitReport(name, "done")) << name << ": " << Describe(name);
    const ReportLines report = Report(name);
    int late = 0;
    for (const std::string& answer : report.at("answered")) late += answer.rfind("4 ", 0) == 0;
    EXPECT_GE(late, kFloodRegistrations / 2) << "expected DEADLINE_EXCEEDED: " << Describe(name);
  }
  EXPECT_LT(DaemonCpuOverASecond(), kIdleCpuSeconds) << "the daemon worked past the deadlines";
  EXPECT_GT(Stats().devices_size(), 0) << "the daemon no longer answers";
  for (ChildProcess& flood : floods) flood.Kill(SIGKILL);
}

// A stop while the flood runs and waits in the queue: the stop cancels it
// and the daemon exits within its grace (and the time to end what it runs).
TEST_F(WorkThreadsTest, AStopCancelsQueuedWorkAndEndsWithinItsGrace) {
  constexpr absl::Duration kGrace = absl::Seconds(1);
  StartSharedDaemon(
      {.extra_args = {absl::StrCat("--shutdown-grace=", absl::ToDoubleSeconds(kGrace))}},
      {"flood-1", "flood-2"});
  const std::string file = WriteManyTensorFile(kFloodTensors);
  std::vector<ChildProcess> floods = StartFloods(file);
  const absl::Time start = absl::Now();
  absl::StatusOr<int> stopped = daemon_->Stop(SIGTERM, absl::Seconds(20));
  const absl::Duration took = absl::Now() - start;
  std::cout << "stop with a grace of " << kGrace << " beside the flood: " << took << "\n";
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, 0);
  EXPECT_LT(took, kGrace + absl::Seconds(2)) << "the stop waited for the flood";
  for (ChildProcess& flood : floods) flood.Kill(SIGKILL);
}

}  // namespace
}  // namespace blockswap::testing
