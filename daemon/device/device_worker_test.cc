// DeviceWorker, in-process on the host backend: the worker's thread serves
// real rings (DaemonRing + RingProducer) whose client halves (RingImport +
// RingConsumer) live in this test, as a client process would hold them.
//
// No assertion depends on how fast anything runs: a test that must know the
// worker has looked at something synchronizes with the worker's loop
// (AwaitWorkerPasses), and every wait has a generous deadline that only
// turns a hang into a failure.
#include "daemon/device/device_worker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "shared/backend/backend.h"
#include "shared/backend/host_lifetime.h"
#include "shared/protocol/load_protocol.h"
#include "shared/protocol/request_queue.h"
#include "shared/protocol/ring.h"
#include "tests/support/child_process.h"
#include "tests/support/held_copy_device.h"
#include "tests/support/process_cpu.h"
#include "tests/support/recording_load_sink.h"

namespace blockswap::daemon {
namespace {

using ::blockswap::testing::ProcessCpuSeconds;
using ::testing::HasSubstr;

constexpr uint64_t kBootId = 0xd3f1ce;
constexpr uint64_t kSessionId = 7;
constexpr uint64_t kSlotBytes = 4096;
// Only turns a hang into a failure; never a measure of speed.
constexpr absl::Duration kHangGuard = absl::Seconds(10);
// A ring id no test creates.
constexpr uint64_t kNoSuchRing = 1'000'000;

using RecordingSink = ::blockswap::testing::RecordingLoadSink;

// A process that only lives: the owner of a detached session's ring.
int RunLiving(const std::vector<std::string>&) {
  while (true) absl::SleepFor(absl::Seconds(1));
}
BLOCKSWAP_CHILD_ROLE("living", RunLiving);

// The client's half of one ring.
struct TestRing {
  uint64_t id = 0;
  std::unique_ptr<RingImport> client;
  // The client's release notifications; destroyed (drained) before
  // `client`, into which its host functions write.
  std::unique_ptr<Stream> notifier;
  std::unique_ptr<RingConsumer> consumer;

  const DaemonControlBlock& control() const { return client->control(); }
  uint32_t filled_seq(uint32_t slot) const {
    return control().filled_seq[slot].load(std::memory_order_acquire);
  }
  absl::StatusCode error_code() const {
    return static_cast<absl::StatusCode>(
        control().status.error_code.load(std::memory_order_acquire));
  }
  std::string error_message() const { return control().error_message; }
  // The client's teardown before it asks for the ring to be freed: its
  // imports are closed (freeing them first is undefined on CUDA, a breach
  // on the host backend). What its streams still have queued keeps working.
  void Close() {
    consumer.reset();
    if (notifier != nullptr) (void)notifier->Synchronize();
    notifier.reset();
    client.reset();
  }
};

class DeviceWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OpenDevice(HostBackendOptions{});
    for (size_t i = 0; i < block_a_.size(); ++i) {
      block_a_[i] = static_cast<std::byte>(i * 7 + 1);
      block_b_[i] = static_cast<std::byte>(i * 13 + 5);
    }
  }

  void TearDown() override {
    // A test that failed half-way may leave the compute stream held.
    if (!release_compute_.HasBeenNotified()) release_compute_.Notify();
    if (compute_ != nullptr) (void)compute_->Synchronize();
    if (held_ != nullptr) held_->ReleaseCopies();
    rings_.clear();
    worker_.reset();
    compute_.reset();
  }

  // Replaces the worker by one whose copies run only once the test calls
  // held_->ReleaseCopies(); before any ring is created.
  void HoldCopies(CopyWeights copy_weights = {}) {
    held_ = std::make_unique<::blockswap::testing::HeldCopyDevice>(*device_);
    worker_.reset();
    auto started =
        DeviceWorker::Start(*held_, kBootId, {}, std::nullopt, false, std::move(copy_weights));
    ASSERT_TRUE(started.ok()) << started.status();
    worker_ = std::move(started).value();
  }

  // Replaces the backend, worker and compute stream by ones on a device
  // without stream words (as a GPU whose probe failed); before any ring is
  // created.
  void UseDeviceWithoutStreamWords() {
    OpenDevice(HostBackendOptions{.without_stream_words = true});
  }

  // A host backend of `options`, its first device, a worker on it and the
  // client's compute stream, replacing any before.
  void OpenDevice(const HostBackendOptions& options) {
    worker_.reset();
    compute_.reset();
    backend_ = OpenHostBackend(options);
    device_ = backend_->devices()[0].get();
    auto started = DeviceWorker::Start(*device_, kBootId);
    ASSERT_TRUE(started.ok()) << started.status();
    worker_ = std::move(started).value();
    auto compute = device_->CreateStream();
    ASSERT_TRUE(compute.ok()) << compute.status();
    compute_ = std::move(compute).value();
  }

  void RestartWorker(WorkerMemoryOptions memory) {
    worker_.reset();
    auto started = DeviceWorker::Start(*device_, kBootId, memory);
    ASSERT_TRUE(started.ok()) << started.status();
    worker_ = std::move(started).value();
  }

  // Creates ring `id` on the worker and imports it as a client would; its
  // consumer tells the worker when a slot's free completes, as the client
  // library does. `uid`: whose ring it is (its copy weight).
  TestRing& CreateRing(uint64_t id, uint32_t slots = 2,
                       std::shared_ptr<const LoadResolver> resolver = nullptr, uint32_t uid = 0) {
    auto exported = worker_->CreateRing(
        id, kSessionId, RingShape{slots, kSlotBytes},
        RingOwner{static_cast<uint32_t>(::getpid()), "test", uid}, std::move(resolver));
    EXPECT_TRUE(exported.ok()) << exported.status();
    auto imported = RingImport::Import(*device_, std::move(exported).value());
    EXPECT_TRUE(imported.ok()) << imported.status();
    auto ring = std::make_unique<TestRing>();
    ring->id = id;
    ring->client = std::move(imported).value();
    auto notifier = device_->CreateStream();
    EXPECT_TRUE(notifier.ok()) << notifier.status();
    ring->notifier = std::move(notifier).value();
    ring->consumer = std::make_unique<RingConsumer>(
        *ring->client, ConsumerOptions{.notifier = ring->notifier.get()});
    rings_.push_back(std::move(ring));
    return *rings_.back();
  }

  LoadTask Task(const TestRing& ring, uint32_t slot, uint32_t generation,
                const std::vector<std::byte>& block, size_t bytes = kSlotBytes) {
    LoadTask task;
    task.ring_id = ring.id;
    task.slot = slot;
    task.generation = generation;
    task.source = block.data();
    task.bytes = bytes;
    task.model_id = "model";
    task.block = 3;
    task.sink = sink_;
    return task;
  }

  // The client's step 1 for `slot`, then the request: returns the generation.
  uint32_t RequestLoad(TestRing& ring, uint32_t slot, const std::vector<std::byte>& block) {
    absl::StatusOr<uint32_t> generation = ring.consumer->BeginLoad(slot, *compute_);
    EXPECT_TRUE(generation.ok()) << generation.status();
    worker_->Submit(Task(ring, slot, *generation, block));
    return *generation;
  }

  // The client's step 3 for `slot`, then the slot's bytes once the compute
  // stream may read them.
  absl::Status AwaitLoaded(TestRing& ring, uint32_t slot) {
    absl::Status loaded = ring.consumer->AwaitLoaded(slot, *compute_, kHangGuard);
    if (!loaded.ok()) return loaded;
    return compute_->Synchronize();
  }
  bool SlotHolds(const TestRing& ring, uint32_t slot, const std::vector<std::byte>& block) {
    return std::memcmp(ring.client->slot(slot), block.data(), kSlotBytes) == 0;
  }

  // Returns once the worker has completed `passes` whole passes of its loop
  // that began after this call: each probe (a load for no ring) is answered
  // in the pass that takes it, and the next probe is taken by a later pass.
  void AwaitWorkerPasses(int passes) {
    auto probe = std::make_shared<RecordingSink>();
    for (int i = 1; i <= passes + 1; ++i) {
      LoadTask task;
      task.ring_id = kNoSuchRing;
      task.sink = probe;
      worker_->Submit(std::move(task));
      ASSERT_EQ(probe->AwaitEvents(i).size(), static_cast<size_t>(i)) << "the worker is stuck";
    }
  }

  // Once the loads requested are accepted: their slots' `free` records done
  // (the compute stream runs them on its own thread, which a loaded machine
  // delays) and the releases published, then two passes after the fallback
  // poll's period (at most 8 ms) so that the worker has found every one of
  // them released: every accepted copy is ready.
  void AwaitEveryAcceptedCopyReady() {
    ASSERT_TRUE(compute_->Synchronize().ok());
    for (const auto& ring : rings_) ASSERT_TRUE(ring->notifier->Synchronize().ok());
    absl::SleepFor(absl::Milliseconds(20));
    AwaitWorkerPasses(2);
  }

  // Waits (bounded) until `ring`'s status word reports an error.
  static void AwaitRingError(const TestRing& ring) {
    const absl::Time deadline = absl::Now() + kHangGuard;
    while (ring.error_code() == absl::StatusCode::kOk && absl::Now() < deadline) {
      absl::SleepFor(absl::Microseconds(100));
    }
  }

  bool AwaitIdle() {
    const absl::Time deadline = absl::Now() + kHangGuard;
    while (!worker_->idle()) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Microseconds(100));
    }
    return true;
  }

  // Holds the compute stream until release_compute_ is notified: a slot
  // released on it after this call is still in use by the client.
  void HoldCompute() {
    ASSERT_TRUE(compute_->LaunchHostFunc([this] { release_compute_.WaitForNotification(); }).ok());
  }

  // Loads slot 0 of `ring` twice: the second load is requested while the
  // client's compute still uses the slot (held by a host function of its
  // own, so that the helper can run more than once in a test), so its copy
  // waits for the release. Returns the statistics from between the two loads.
  DeviceStats LoadAgainBehindHeldCompute(TestRing& ring) {
    RequestLoad(ring, 0, block_a_);
    EXPECT_TRUE(AwaitLoaded(ring, 0).ok());
    const uint32_t filled = ring.filled_seq(0);
    // filled_seq is published inside the worker's pass, the counters after
    // it: a later whole pass has counted the load.
    AwaitWorkerPasses(1);
    const DeviceStats before = worker_->stats();
    absl::Notification release;
    EXPECT_TRUE(compute_->LaunchHostFunc([&release] { release.WaitForNotification(); }).ok());
    RequestLoad(ring, 0, block_b_);
    AwaitWorkerPasses(2);
    EXPECT_EQ(ring.filled_seq(0), filled) << "copied into a slot the client still uses";
    release.Notify();
    EXPECT_TRUE(AwaitLoaded(ring, 0).ok());  // synchronizes the compute stream
    EXPECT_TRUE(SlotHolds(ring, 0, block_b_));
    AwaitWorkerPasses(1);
    return before;
  }

  std::vector<RingSnapshot> SnapshotOf(uint64_t ring_id) const {
    std::vector<RingSnapshot> out;
    for (RingSnapshot& ring : worker_->Snapshot()) {
      if (ring.ring_id == ring_id) out.push_back(std::move(ring));
    }
    return out;
  }

  std::unique_ptr<Backend> backend_;
  Device* device_ = nullptr;
  std::unique_ptr<::blockswap::testing::HeldCopyDevice> held_;  // see HoldCopies()
  std::unique_ptr<DeviceWorker> worker_;
  std::unique_ptr<Stream> compute_;  // the client's stream that uses the slots
  absl::Notification release_compute_;
  std::vector<std::unique_ptr<TestRing>> rings_;
  std::shared_ptr<RecordingSink> sink_ = std::make_shared<RecordingSink>();
  std::vector<std::byte> block_a_ = std::vector<std::byte>(kSlotBytes);
  std::vector<std::byte> block_b_ = std::vector<std::byte>(kSlotBytes);
};

TEST_F(DeviceWorkerTest, ALoadFillsTheSlotAndPublishesItsGeneration) {
  TestRing& ring = CreateRing(1);
  uint32_t generation = RequestLoad(ring, 1, block_a_);
  ASSERT_EQ(generation, 1u);
  ASSERT_TRUE(AwaitLoaded(ring, 1).ok());
  EXPECT_EQ(ring.filled_seq(1), 1u);
  EXPECT_EQ(ring.filled_seq(0), 0u) << "only the requested slot is filled";
  EXPECT_TRUE(SlotHolds(ring, 1, block_a_));
  EXPECT_EQ(ring.error_code(), absl::StatusCode::kOk) << ring.error_message();
  EXPECT_TRUE(sink_->events().empty()) << "a good load reports nothing";
}

TEST_F(DeviceWorkerTest, TheNextGenerationOfASlotOverwritesItOnceReleased) {
  TestRing& ring = CreateRing(1);
  RequestLoad(ring, 0, block_a_);
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  ASSERT_EQ(RequestLoad(ring, 0, block_b_), 2u);
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  EXPECT_EQ(ring.filled_seq(0), 2u);
  EXPECT_TRUE(SlotHolds(ring, 0, block_b_));
}

TEST_F(DeviceWorkerTest, ALoadIsCopiedOnlyAfterTheSlotsFreeEventHasCompleted) {
  TestRing& ring = CreateRing(1);
  RequestLoad(ring, 0, block_b_);
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  // The client's compute still uses slot 0 when it asks for the next load:
  // free[0] is recorded behind that work.
  HoldCompute();
  RequestLoad(ring, 0, block_a_);
  AwaitWorkerPasses(3);
  std::vector<RingSnapshot> held = SnapshotOf(ring.id);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_TRUE(held[0].slots[0].loaded) << "the worker accepted the load";
  EXPECT_EQ(ring.filled_seq(0), 1u) << "copied into a slot the client still uses";
  EXPECT_EQ(worker_->stats().queue_depth, 1u) << "the copy waits in the worker";
  EXPECT_TRUE(SlotHolds(ring, 0, block_b_)) << "the slot's bytes changed under the client";

  release_compute_.Notify();
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  EXPECT_EQ(ring.filled_seq(0), 2u);
  EXPECT_TRUE(SlotHolds(ring, 0, block_a_));
  EXPECT_EQ(worker_->stats().queue_depth, 0u);
}

// A slot never used is free: its first copy waits for nothing, however busy
// the client's stream is (the ring starts with releasable_seq = 1).
TEST_F(DeviceWorkerTest, TheFirstLoadOfASlotWaitsForNoRelease) {
  TestRing& ring = CreateRing(1);
  HoldCompute();
  RequestLoad(ring, 0, block_a_);
  const absl::Time deadline = absl::Now() + kHangGuard;
  while (ring.filled_seq(0) != 1 && absl::Now() < deadline) absl::SleepFor(absl::Microseconds(100));
  EXPECT_EQ(ring.filled_seq(0), 1u);
  release_compute_.Notify();
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  EXPECT_TRUE(SlotHolds(ring, 0, block_a_));
}

// The second load waits for the held compute; its release is then seen by
// the client's notification, which is traced.
TEST_F(DeviceWorkerTest, AReleaseTheClientNotifiesIsSeenByTheNotification) {
  TestRing& ring = CreateRing(1);
  const DeviceStats before = LoadAgainBehindHeldCompute(ring);
  const DeviceStats after = worker_->stats();
  EXPECT_EQ(after.releases_at_request, before.releases_at_request);
  EXPECT_EQ(after.releases_notified - before.releases_notified, 1u);
  std::vector<TraceEvent> notified;
  for (const TraceEvent& event : worker_->ReadTrace(0).events) {
    if (event.kind == TraceKind::kReleaseNotified) notified.push_back(event);
  }
  ASSERT_FALSE(notified.empty()) << "the notification is traced";
  EXPECT_EQ(notified.back().generation, 2u);
}

// The client's word is the daemon's one sign that a slot is free (no event
// crosses processes): a client that publishes a release early gets its own
// slot overwritten, and nobody else's.
TEST_F(DeviceWorkerTest, AReleaseTheClientPublishesEarlyIsTrustedForItsOwnRingOnly) {
  TestRing& liar = CreateRing(1);
  TestRing& other = CreateRing(2);
  RequestLoad(other, 0, block_b_);
  ASSERT_TRUE(AwaitLoaded(other, 0).ok());
  RequestLoad(liar, 0, block_b_);
  ASSERT_TRUE(AwaitLoaded(liar, 0).ok());
  ASSERT_TRUE(liar.notifier->Synchronize().ok());  // as in the test below
  HoldCompute();
  const uint32_t generation = RequestLoad(liar, 0, block_a_);
  liar.client->client_control().releasable_seq[0].store(generation, std::memory_order_release);
  liar.client->doorbell()->Ring();
  const absl::Time deadline = absl::Now() + kHangGuard;
  while (liar.filled_seq(0) != generation && absl::Now() < deadline) {
    absl::SleepFor(absl::Microseconds(100));
  }
  EXPECT_EQ(liar.filled_seq(0), generation) << "the client's release was not trusted";
  EXPECT_EQ(other.filled_seq(0), 1u);
  EXPECT_TRUE(SlotHolds(other, 0, block_b_)) << "another ring's slot changed";
  release_compute_.Notify();
}

// A release of a generation the client has not been given is its protocol
// error: the ring fails, saying so, and copies nothing.
TEST_F(DeviceWorkerTest, AReleaseAheadOfTheRequestedGenerationFailsTheRing) {
  TestRing& ring = CreateRing(1);
  RequestLoad(ring, 0, block_b_);
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  // The first load's release published: the notifier's host function runs
  // on its own thread, and one a loaded machine delays would overwrite the
  // lie below with the truth of generation 1.
  ASSERT_TRUE(ring.notifier->Synchronize().ok());
  HoldCompute();
  const uint32_t generation = RequestLoad(ring, 0, block_a_);
  ring.client->client_control().releasable_seq[0].store(generation + 5,
                                                        std::memory_order_release);
  ring.client->doorbell()->Ring();
  AwaitRingError(ring);
  EXPECT_EQ(ring.error_code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ring.error_message(), HasSubstr("releasable_seq=7"));
  EXPECT_EQ(ring.filled_seq(0), 1u);
  EXPECT_TRUE(SlotHolds(ring, 0, block_b_));
  release_compute_.Notify();
}

// An eviction drops the model store's reference to a model's masters; the
// copies reading them hold theirs (LoadTask::keep_alive) until they have
// completed, not until the slot's next request.
TEST_F(DeviceWorkerTest, AnEvictedMasterStaysMappedUntilTheQueuedCopyFromItCompletes) {
  HoldCopies();
  TestRing& ring = CreateRing(1);
  auto master_a = std::make_shared<std::vector<std::byte>>(block_a_);
  auto master_b = std::make_shared<std::vector<std::byte>>(block_b_);
  std::weak_ptr<std::vector<std::byte>> a = master_a, b = master_b;
  auto submit = [&](std::shared_ptr<std::vector<std::byte>>& master) {
    absl::StatusOr<uint32_t> generation = ring.consumer->BeginLoad(0, *compute_);
    ASSERT_TRUE(generation.ok()) << generation.status();
    LoadTask task = Task(ring, 0, *generation, *master);
    task.keep_alive = std::move(master);  // the worker holds the only reference
    worker_->Submit(std::move(task));
  };
  submit(master_a);
  ASSERT_TRUE(ring.consumer->Drain(kHangGuard).ok()) << "issued (its copy is held)";
  submit(master_b);  // the slot's next request, while the copy of A is queued
  AwaitWorkerPasses(3);
  EXPECT_FALSE(a.expired()) << "the master of a queued copy was let go";
  EXPECT_FALSE(b.expired());

  held_->ReleaseCopies();
  const absl::Time deadline = absl::Now() + kHangGuard;
  while ((!a.expired() || !b.expired()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Microseconds(200));
  }
  EXPECT_TRUE(a.expired()) << "a completed copy still holds its master";
  EXPECT_TRUE(b.expired());
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  EXPECT_TRUE(SlotHolds(ring, 0, block_b_));
}

TEST_F(DeviceWorkerTest, ACopyHeldBackOnOneRingDoesNotDelayAnotherRing) {
  TestRing& held = CreateRing(1);
  TestRing& other = CreateRing(2);
  // A second client stream, free to run, for the other ring.
  auto other_stream = device_->CreateStream();
  ASSERT_TRUE(other_stream.ok());
  RequestLoad(held, 0, block_b_);
  ASSERT_TRUE(AwaitLoaded(held, 0).ok());
  HoldCompute();
  RequestLoad(held, 0, block_a_);
  absl::StatusOr<uint32_t> generation = other.consumer->BeginLoad(0, **other_stream);
  ASSERT_TRUE(generation.ok()) << generation.status();
  worker_->Submit(Task(other, 0, *generation, block_b_));
  ASSERT_TRUE(other.consumer->AwaitLoaded(0, **other_stream, kHangGuard).ok());
  ASSERT_TRUE((*other_stream)->Synchronize().ok());
  EXPECT_TRUE(SlotHolds(other, 0, block_b_));
  EXPECT_EQ(held.filled_seq(0), 1u) << "the held ring's slot is still in use";
  release_compute_.Notify();
  EXPECT_TRUE(AwaitLoaded(held, 0).ok());
}

// The rings of each copy issued so far, in issue order (the worker's trace).
std::vector<uint64_t> IssuedRings(const DeviceWorker& worker) {
  std::vector<uint64_t> rings;
  for (const TraceEvent& event : worker.ReadTrace(0).events) {
    if (event.kind == TraceKind::kCopyIssued) rings.push_back(event.ring_id);
  }
  return rings;
}

// Waits (bounded) until `count` copies are issued: the slots' `free`
// completes on the compute stream's worker, and the client's release reaches
// the worker.
void AwaitIssued(const DeviceWorker& worker, size_t count) {
  const absl::Time deadline = absl::Now() + kHangGuard;
  while (IssuedRings(worker).size() < count && absl::Now() < deadline) {
    absl::SleepFor(absl::Microseconds(200));
  }
}

// Waits (bounded) until `count` loads are accepted and not issued (the
// worker has read their requests).
void AwaitAccepted(const DeviceWorker& worker, uint64_t count) {
  const absl::Time deadline = absl::Now() + kHangGuard;
  while (worker.stats().queue_depth < count && absl::Now() < deadline) {
    absl::SleepFor(absl::Microseconds(200));
  }
}

TEST_F(DeviceWorkerTest, ARingAloneHasTheCopyStreamToItselfAndSharedItHoldsThreeCopies) {
  HoldCopies();
  TestRing& first = CreateRing(1, 4);
  for (uint32_t slot = 0; slot < 4; ++slot) RequestLoad(first, slot, block_a_);
  AwaitIssued(*worker_, 4);
  EXPECT_EQ(IssuedRings(*worker_).size(), 4u) << "a ring alone: every ready copy at once";

  TestRing& second = CreateRing(2, 4);
  TestRing& third = CreateRing(3, 4);
  // Rings 2 and 3 share the stream: their copies go 3 at a time, each
  // batch after the previous copies completed (the host stream runs them).
  // They request while the first ring's four copies are still held on the
  // stream (more than three: nothing more goes on it while rings share it),
  // and the copies are released only once the worker has every copy of both
  // ready; else a ring whose requests came first is rightly issued two in a
  // row.
  for (uint32_t slot = 0; slot < 4; ++slot) {
    RequestLoad(second, slot, block_a_);
    RequestLoad(third, slot, block_b_);
  }
  AwaitAccepted(*worker_, 8);
  ASSERT_EQ(worker_->stats().queue_depth, 8u) << "every load of both rings accepted, none issued";
  AwaitEveryAcceptedCopyReady();
  held_->ReleaseCopies();
  ASSERT_TRUE(first.consumer->Drain(kHangGuard).ok());
  ASSERT_TRUE(second.consumer->Drain(kHangGuard).ok());
  ASSERT_TRUE(third.consumer->Drain(kHangGuard).ok());
  AwaitWorkerPasses(1);  // traced after filled_seq is published
  std::vector<uint64_t> shared = IssuedRings(*worker_);
  ASSERT_EQ(shared.size(), 12u);
  shared.erase(shared.begin(), shared.begin() + 4);
  for (size_t i = 1; i < shared.size(); ++i) {
    EXPECT_NE(shared[i], shared[i - 1]) << "ring " << shared[i] << " twice in a row at " << i;
  }
  for (uint32_t slot = 0; slot < 4; ++slot) {
    ASSERT_TRUE(AwaitLoaded(second, slot).ok());
    ASSERT_TRUE(AwaitLoaded(third, slot).ok());
    EXPECT_TRUE(SlotHolds(second, slot, block_a_)) << slot;
    EXPECT_TRUE(SlotHolds(third, slot, block_b_)) << slot;
  }
}

TEST_F(DeviceWorkerTest, WhileRingsShareTheStreamAtMostThreeCopiesAreOnIt) {
  HoldCopies();
  TestRing& first = CreateRing(1, 4);
  TestRing& second = CreateRing(2, 4);
  for (uint32_t slot = 0; slot < 4; ++slot) {
    RequestLoad(first, slot, block_a_);
    RequestLoad(second, slot, block_b_);
  }
  AwaitIssued(*worker_, CopyScheduler::kStreamDepth);
  // Every copy is ready by now (the fallback poll's period is at most 8 ms):
  // a pass that issued more would have done so here.
  absl::SleepFor(absl::Milliseconds(20));
  AwaitWorkerPasses(2);
  EXPECT_EQ(IssuedRings(*worker_).size(), CopyScheduler::kStreamDepth)
      << "copies queued beyond the stream's depth would delay a ring's next copy";
  EXPECT_EQ(worker_->stats().queue_depth, 8u - CopyScheduler::kStreamDepth);
  held_->ReleaseCopies();
  ASSERT_TRUE(first.consumer->Drain(kHangGuard).ok()) << "topped up as copies complete";
  ASSERT_TRUE(second.consumer->Drain(kHangGuard).ok());
  AwaitWorkerPasses(1);
  EXPECT_EQ(IssuedRings(*worker_).size(), 8u);
}

TEST_F(DeviceWorkerTest, ARingOfAUidOfWeightTwoTakesTwoCopiesPerTurn) {
  constexpr uint32_t kHeavyUid = 1000;
  HoldCopies(CopyWeights{{kHeavyUid, 2}});
  // A third ring's four copies, held, fill the stream first, so that both
  // rings have every copy ready before either is issued one (else a ring
  // whose requests reached the worker first is rightly issued first).
  TestRing& blocker = CreateRing(3, 4);
  for (uint32_t slot = 0; slot < 4; ++slot) RequestLoad(blocker, slot, block_a_);
  AwaitIssued(*worker_, 4);
  TestRing& heavy = CreateRing(1, 8, nullptr, kHeavyUid);
  TestRing& light = CreateRing(2, 8);
  for (uint32_t slot = 0; slot < 8; ++slot) {
    RequestLoad(heavy, slot, block_a_);
    RequestLoad(light, slot, block_b_);
  }
  AwaitAccepted(*worker_, 16);
  ASSERT_EQ(worker_->stats().queue_depth, 16u) << "every load of both rings accepted, none issued";
  AwaitEveryAcceptedCopyReady();
  held_->ReleaseCopies();
  ASSERT_TRUE(blocker.consumer->Drain(kHangGuard).ok());
  ASSERT_TRUE(heavy.consumer->Drain(kHangGuard).ok());
  ASSERT_TRUE(light.consumer->Drain(kHangGuard).ok());
  AwaitWorkerPasses(1);
  std::vector<uint64_t> order = IssuedRings(*worker_);
  ASSERT_EQ(order.size(), 20u);
  order.erase(order.begin(), order.begin() + 4);  // the blocker's
  // While both had ready copies (the heavy ring's 8 go in its first 12
  // turns), the heavy ring took two of every three.
  EXPECT_EQ(std::count(order.begin(), order.begin() + 12, 1u), 8)
      << "the first 12 copies of: " << absl::StrJoin(order, " ");
}

// A staged master's loads go through the worker's staging buffers (made at
// the first such load) and land like any other; the stats count them.
TEST_F(DeviceWorkerTest, AStagedLoadIsCopiedThroughTheStagingBuffersAndCounted) {
  worker_.reset();
  auto started = DeviceWorker::Start(
      *device_, kBootId, {},
      StagingOptions{.buffer_bytes = 1000, .buffers = 2, .threads = 2, .jitter_us = 50});
  ASSERT_TRUE(started.ok()) << started.status();
  worker_ = std::move(started).value();
  TestRing& ring = CreateRing(1);
  for (int pass = 0; pass < 20; ++pass) {
    for (uint32_t slot = 0; slot < 2; ++slot) {
      const std::vector<std::byte>& block = (pass + slot) % 2 == 0 ? block_a_ : block_b_;
      absl::StatusOr<uint32_t> generation = ring.consumer->BeginLoad(slot, *compute_);
      ASSERT_TRUE(generation.ok()) << generation.status();
      LoadTask task = Task(ring, slot, *generation, block);
      task.staged = true;
      worker_->Submit(std::move(task));
      ASSERT_TRUE(AwaitLoaded(ring, slot).ok());
      ASSERT_TRUE(SlotHolds(ring, slot, block)) << "pass " << pass << ", slot " << slot;
    }
  }
  const DeviceStats stats = worker_->stats();
  EXPECT_EQ(stats.staged_loads, 40u);
  EXPECT_EQ(stats.staged_bytes, 40u * kSlotBytes);
  EXPECT_EQ(stats.loads, 40u);
}

// Under "auto" the pool is made at the first staged load, but its bytes are
// charged to the node's budget at start: masters that fill the budget later
// cannot leave that load without its buffers, and options the pool could
// never be made with refuse the start.
TEST_F(DeviceWorkerTest, TheStagingPoolIsChargedAtStartAndBadOptionsRefuseIt) {
  worker_.reset();
  MemoryBudget budget(10000);
  StagingOptions options{.buffer_bytes = 1000, .buffers = 3, .threads = 1};
  auto started = DeviceWorker::Start(*device_, kBootId, {.staging_budget = &budget}, options);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(budget.used(MemoryUse::kCopyStaging), 3000u) << "charged before any staged load";
  auto masters = budget.Reserve(MemoryUse::kMasters, 7000, "masters filling the rest");
  ASSERT_TRUE(masters.ok()) << masters.status();
  worker_ = std::move(started).value();
  TestRing& ring = CreateRing(1);
  absl::StatusOr<uint32_t> generation = ring.consumer->BeginLoad(0, *compute_);
  ASSERT_TRUE(generation.ok()) << generation.status();
  LoadTask task = Task(ring, 0, *generation, block_a_);
  task.staged = true;
  worker_->Submit(std::move(task));
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok()) << "the first staged load finds its buffers";
  EXPECT_TRUE(SlotHolds(ring, 0, block_a_));
  EXPECT_EQ(budget.used(MemoryUse::kCopyStaging), 3000u) << "charged once";
  rings_.clear();
  worker_.reset();
  EXPECT_EQ(budget.used(MemoryUse::kCopyStaging), 0u);

  auto more = budget.Reserve(MemoryUse::kMasters, 1, "one more byte of masters");
  ASSERT_TRUE(more.ok()) << more.status();
  auto over = DeviceWorker::Start(*device_, kBootId, {.staging_budget = &budget}, options);
  EXPECT_TRUE(absl::IsResourceExhausted(over.status())) << over.status();
  options.buffers = 0;
  auto zero = DeviceWorker::Start(*device_, kBootId, {}, options);
  EXPECT_TRUE(absl::IsInvalidArgument(zero.status())) << zero.status();
  EXPECT_THAT(zero.status().message(), HasSubstr("staging_buffers"));
}

TEST_F(DeviceWorkerTest, AStagedLoadOnAWorkerWithoutStagingFailsItsRingSayingWhy) {
  TestRing& ring = CreateRing(1);
  absl::StatusOr<uint32_t> generation = ring.consumer->BeginLoad(0, *compute_);
  ASSERT_TRUE(generation.ok());
  LoadTask task = Task(ring, 0, *generation, block_a_);
  task.staged = true;
  worker_->Submit(std::move(task));
  std::vector<v1::LoadEvent> events = sink_->AwaitEvents(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0].error_message(), HasSubstr("has no staging buffers"));
  EXPECT_EQ(ring.error_code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ring.filled_seq(0), 0u);
}

TEST_F(DeviceWorkerTest, AWrongGenerationFailsTheRingWithAMessageAndReportsIt) {
  TestRing& ring = CreateRing(1);
  ASSERT_TRUE(ring.consumer->BeginLoad(0, *compute_).ok());
  worker_->Submit(Task(ring, 0, /*generation=*/2, block_a_));  // the next one is 1

  std::vector<v1::LoadEvent> events = sink_->AwaitEvents(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].ring_id(), ring.id);
  EXPECT_EQ(events[0].slot(), 0u);
  EXPECT_EQ(events[0].generation(), 2u);
  EXPECT_EQ(events[0].error_code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(events[0].error_message(), HasSubstr("the next generation is 1"));
  // The client waiting on the ring reads the same error in its status word.
  EXPECT_EQ(ring.error_code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ring.error_message(), HasSubstr("the next generation is 1"));
  EXPECT_EQ(ring.control().status.error_slot.load(), 0u);
  EXPECT_EQ(ring.filled_seq(0), 0u) << "nothing is copied for a protocol error";
  EXPECT_EQ(worker_->stats().protocol_errors, 1u);
}

TEST_F(DeviceWorkerTest, ARequestBeforeTheClientPublishedConsumedSeqFailsTheRing) {
  TestRing& ring = CreateRing(1);
  RequestLoad(ring, 0, block_a_);
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  // Generation 2 without releasing the slot: consumed_seq[0] is still 0.
  worker_->Submit(Task(ring, 0, /*generation=*/2, block_b_));

  std::vector<v1::LoadEvent> events = sink_->AwaitEvents(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].error_code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(events[0].error_message(), HasSubstr("consumed_seq=0 (must be 1"));
  EXPECT_EQ(ring.error_code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(SlotHolds(ring, 0, block_a_)) << "the client's bytes were overwritten";
  EXPECT_EQ(ring.filled_seq(0), 1u);
  std::vector<RingSnapshot> snapshot = SnapshotOf(ring.id);
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_EQ(snapshot[0].status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(DeviceWorkerTest, ARingFailedByAProtocolErrorLeavesOtherRingsServing) {
  TestRing& broken = CreateRing(1);
  TestRing& healthy = CreateRing(2);
  worker_->Submit(Task(broken, 0, /*generation=*/5, block_a_));
  ASSERT_EQ(sink_->AwaitEvents(1).size(), 1u);
  ASSERT_EQ(broken.error_code(), absl::StatusCode::kFailedPrecondition);

  RequestLoad(healthy, 1, block_b_);
  ASSERT_TRUE(AwaitLoaded(healthy, 1).ok());
  EXPECT_TRUE(SlotHolds(healthy, 1, block_b_));
  EXPECT_EQ(healthy.error_code(), absl::StatusCode::kOk) << healthy.error_message();
  EXPECT_EQ(sink_->events().size(), 1u) << "the healthy ring's load reported an error";
}

TEST_F(DeviceWorkerTest, AFailedRingRefusesEveryLaterLoad) {
  TestRing& ring = CreateRing(1);
  worker_->Submit(Task(ring, 0, /*generation=*/3, block_a_));
  ASSERT_EQ(sink_->AwaitEvents(1).size(), 1u);
  // A correct request after the failure: the ring stays failed, with the
  // first error, and nothing is copied.
  RequestLoad(ring, 1, block_b_);
  ASSERT_EQ(sink_->AwaitEvents(2).size(), 2u);
  EXPECT_THAT(ring.error_message(), HasSubstr("generation 3 requested"));
  EXPECT_EQ(ring.filled_seq(1), 0u);
  EXPECT_FALSE(AwaitLoaded(ring, 1).ok()) << "a wait on a failed ring must fail";
}

TEST_F(DeviceWorkerTest, ARejectedRequestFailsItsRingWithTheRejection) {
  TestRing& ring = CreateRing(1);
  LoadTask task = Task(ring, 1, 1, block_a_);
  worker_->Reject(std::move(task), absl::OutOfRangeError("block 9 out of range (model has 2)"));
  AwaitRingError(ring);
  EXPECT_EQ(ring.error_code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ring.error_message(), "block 9 out of range (model has 2)");
  EXPECT_EQ(ring.control().status.error_slot.load(), 1u);
  EXPECT_EQ(ring.filled_seq(1), 0u);
  EXPECT_EQ(worker_->stats().protocol_errors, 1u);
  EXPECT_EQ(worker_->stats().loads, 0u);
}

TEST_F(DeviceWorkerTest, ALoadForARingThatNoLongerExistsIsReportedNotFound) {
  TestRing& ring = CreateRing(4);
  ring.Close();
  worker_->RetireRing(ring.id, DeviceWorker::RetireReason::kOwnerExited);
  worker_->Submit(Task(ring, 0, 1, block_a_));
  std::vector<v1::LoadEvent> events = sink_->AwaitEvents(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].ring_id(), 4u);
  EXPECT_EQ(events[0].error_code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_THAT(events[0].error_message(),
              HasSubstr("ring 4 no longer exists on " + device_->info().uuid));
}

TEST_F(DeviceWorkerTest, ABadRequestRingEntryFailsTheRingAndCountsARefusal) {
  auto models = std::make_shared<SessionModels>(kSessionId);  // none open
  auto counts = std::make_shared<FastPathLoadCounts>();
  TestRing& ring = CreateRing(1, 2, std::make_shared<LoadResolver>(models, counts));
  ASSERT_NE(ring.client->doorbell(), nullptr) << "a ring with a resolver gets the doorbell";
  ASSERT_TRUE(ring.consumer->BeginLoad(0, *compute_).ok());

  ASSERT_TRUE(RequestQueueWriter(ring.client->client_control(), ring.control())
                  .Push({.slot = 0, .generation = 1, .model_handle = 1, .block = 0})
                  .ok());
  ring.client->doorbell()->Ring();
  AwaitRingError(ring);
  EXPECT_EQ(ring.error_code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ring.error_message(), HasSubstr("model handle 1 is not open in session 7"));
  EXPECT_EQ(counts->rejected.load(), 1u);
  EXPECT_EQ(counts->loads.load(), 0u);
  EXPECT_EQ(ring.filled_seq(0), 0u);
}

TEST_F(DeviceWorkerTest, ARetiredRingIsNoLongerServed) {
  TestRing& ring = CreateRing(3);
  ASSERT_EQ(SnapshotOf(3).size(), 1u);
  EXPECT_EQ(worker_->stats().rings, 1u);
  ring.Close();
  worker_->RetireRing(ring.id, DeviceWorker::RetireReason::kClosedByClient);
  EXPECT_TRUE(SnapshotOf(3).empty());
  EXPECT_EQ(worker_->stats().rings, 0u);
}

// The daemon frees a closed ring once no copy of its own into it can run:
// the client's view is its own mapping (closed before it asks), which keeps
// the memory for as long as it holds it.
TEST_F(DeviceWorkerTest, AClosedRingIsFreedAndItsClientTraceKept) {
  TestRing& ring = CreateRing(3);
  RequestLoad(ring, 0, block_a_);
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  ring.Close();
  worker_->RetireRing(ring.id, DeviceWorker::RetireReason::kClosedByClient);
  EXPECT_TRUE(AwaitIdle()) << "the closed ring was not freed";
  // Its client trace is kept, marked as the one read when it was freed.
  DeviceTrace trace = worker_->ReadTrace(0);
  ASSERT_EQ(trace.rings.size(), 1u);
  EXPECT_EQ(trace.rings[0].ring_id, 3u);
  EXPECT_TRUE(trace.rings[0].retired);
  EXPECT_EQ(trace.rings[0].owner.client_name, "test");
}

// A failed ring's producer queues writes to its ready words on the shared
// copy stream (RingProducer::Fail); here they wait behind another ring's
// held copy. The failed ring, closed by its client and with no copy of its
// own in flight, must stay allocated until those writes have run: freeing it
// unregisters the words' page, and a write to an unregistered page faults
// the daemon's context on a GPU (the host backend reports it, which aborts
// the test process).
TEST_F(DeviceWorkerTest, AFailedRingIsFreedOnlyOnceTheWritesToItsReadyWordsHaveRun) {
  HoldCopies();
  TestRing& busy = CreateRing(1);
  TestRing& failed = CreateRing(2);
  ASSERT_NE(failed.client->ready_words(), nullptr) << "the host device has stream words";
  RequestLoad(busy, 0, block_a_);
  AwaitIssued(*worker_, 1);  // its copy holds the copy stream
  worker_->Submit(Task(failed, 0, /*generation=*/5, block_b_));  // a protocol error
  AwaitRingError(failed);
  ASSERT_EQ(failed.error_code(), absl::StatusCode::kFailedPrecondition);
  failed.Close();
  worker_->RetireRing(failed.id, DeviceWorker::RetireReason::kClosedByClient);
  AwaitWorkerPasses(5);
  EXPECT_FALSE(worker_->idle()) << "freed with writes to its ready words still queued";

  held_->ReleaseCopies();
  EXPECT_TRUE(AwaitLoaded(busy, 0).ok());
  EXPECT_TRUE(AwaitIdle()) << "not freed once the writes had run";
  EXPECT_EQ(host_lifetime::LifetimeViolationCount(), 0u);
}

// Without stream words the client's stream cannot wait on the device for
// the daemon's signal (no event crosses processes): the client waits on the
// host until the daemon has seen the copy complete (landed_seq), so a copy
// still queued keeps AwaitLoaded from returning.
TEST_F(DeviceWorkerTest, WithoutStreamWordsTheClientWaitsOnTheHostUntilTheCopyHasCompleted) {
  UseDeviceWithoutStreamWords();
  HoldCopies();
  TestRing& ring = CreateRing(1);
  ASSERT_EQ(ring.client->ready_words(), nullptr);
  EXPECT_THAT(device_->stream_words_status().message(), HasSubstr("no stream words"));
  RequestLoad(ring, 0, block_a_);
  AwaitIssued(*worker_, 1);  // filled_seq[0] is published; the copy is held
  ASSERT_EQ(ring.filled_seq(0), 1u);
  absl::Status early = ring.consumer->AwaitLoaded(0, *compute_, absl::Milliseconds(200));
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded)
      << "the client was let use a slot whose copy is still queued: " << early;
  EXPECT_THAT(early.message(), HasSubstr("landed_seq=0"));

  held_->ReleaseCopies();
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  EXPECT_TRUE(SlotHolds(ring, 0, block_a_));
}

// What a ring was charged (the client's quotas) is held by the ring itself,
// retired or not, until the worker frees it: once no copy into it can still
// run.
TEST_F(DeviceWorkerTest, ARetiredRingKeepsItsChargeUntilItIsFreed) {
  HoldCopies();
  Ledger rings("process 1", "rings");
  Reservation charged;
  charged.Add(*rings.Reserve(1, {}));
  auto exported = worker_->CreateRing(3, kSessionId, RingShape{2, kSlotBytes}, RingOwner{}, nullptr,
                                      std::move(charged));
  ASSERT_TRUE(exported.ok()) << exported.status();
  auto imported = RingImport::Import(*device_, std::move(exported).value());
  ASSERT_TRUE(imported.ok()) << imported.status();
  auto consumer = std::make_unique<RingConsumer>(**imported);
  absl::StatusOr<uint32_t> generation = consumer->BeginLoad(0, *compute_);
  ASSERT_TRUE(generation.ok()) << generation.status();
  LoadTask task;
  task.ring_id = 3;
  task.slot = 0;
  task.generation = *generation;
  task.source = block_a_.data();
  task.bytes = kSlotBytes;
  task.model_id = "model";
  task.sink = sink_;
  worker_->Submit(std::move(task));
  AwaitIssued(*worker_, 1);  // its copy is held on the stream
  consumer.reset();
  imported->reset();  // closed before the ring is destroyed
  worker_->RetireRing(3, DeviceWorker::RetireReason::kClosedByClient);
  AwaitWorkerPasses(5);
  ASSERT_FALSE(worker_->idle());
  EXPECT_EQ(rings.used(), 1u) << "a retired ring not yet freed stopped counting";
  held_->ReleaseCopies();
  ASSERT_TRUE(AwaitIdle());
  EXPECT_EQ(rings.used(), 0u) << "a freed ring still counts";
}

TEST_F(DeviceWorkerTest, ARingOverTheNodesMemoryBudgetIsRefusedBeforeAnythingIsAllocated) {
  MemoryBudget budget(3 * kSlotBytes);
  RestartWorker({.host_budget = &budget});
  auto first = worker_->CreateRing(1, kSessionId, RingShape{2, kSlotBytes});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(budget.used(MemoryUse::kRings), 2 * kSlotBytes);
  auto second = worker_->CreateRing(2, kSessionId, RingShape{2, kSlotBytes});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("ring 2 of ", 2 * kSlotBytes, " bytes on ",
                                     device_->info().uuid, ": blockswapd would hold")));
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("over max_memory_bytes = ", 3 * kSlotBytes)));
  EXPECT_EQ(worker_->stats().rings, 1u);
  worker_->RetireRing(1, DeviceWorker::RetireReason::kOwnerExited);
  ASSERT_TRUE(AwaitIdle());
  EXPECT_EQ(budget.used(), 0u) << "a freed ring's memory is still charged";
}

TEST_F(DeviceWorkerTest, AUidsRingsAreChargedToItsShareOfTheDeviceUnderAuto) {
  // On the host backend the device holds for rings at most the node's
  // budget: a uid's share is half of it, 4 slots.
  MemoryBudget budget(8 * kSlotBytes);
  RestartWorker({.host_budget = &budget});
  auto ring = [&](uint64_t id, uint32_t uid) {
    return worker_->CreateRing(id, kSessionId, RingShape{2, kSlotBytes}, RingOwner{.uid = uid},
                               nullptr, {}, /*device_share=*/true);
  };
  ASSERT_TRUE(ring(1, 1000).ok());
  ASSERT_TRUE(ring(2, 1000).ok());
  auto over = ring(3, 1000);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      over.status().message(),
      HasSubstr(absl::StrCat("uid 1000 would hold ", 6 * kSlotBytes, " bytes of ring memory on ",
                             device_->info().uuid, " (", 4 * kSlotBytes, " held + ", 2 * kSlotBytes,
                             " asked), over max_device_bytes_per_uid (\"auto\": half of "
                             "what ",
                             device_->info().uuid, " holds for rings) = ", 4 * kSlotBytes)));
  EXPECT_TRUE(ring(4, 1001).ok()) << "another uid has the other half";
  EXPECT_TRUE(worker_
                  ->CreateRing(5, kSessionId, RingShape{2, kSlotBytes},
                               RingOwner{.pid = 1, .client_name = "test", .uid = 1000})
                  .ok())
      << "a number for max_device_bytes_per_uid is the client accounts' to check";
  worker_->RetireRing(1, DeviceWorker::RetireReason::kOwnerExited);
  ASSERT_TRUE(AwaitIdle());
  EXPECT_TRUE(ring(6, 1000).ok()) << "a freed ring gives its bytes back to the share";
}

TEST_F(DeviceWorkerTest, ARingThatWouldLeaveLessThanTheDeviceReserveFreeIsRefused) {
  RestartWorker({.device_reserve_bytes = uint64_t{1} << 62});
  auto ring = worker_->CreateRing(1, kSessionId, RingShape{2, kSlotBytes});
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(ring.status().message(),
              HasSubstr("bytes free, and the ring would leave less than "
                        "device_memory_reserve_bytes = 4611686018427387904"));
  EXPECT_EQ(worker_->stats().rings, 0u);
}

// A session that ended while its process lives (Detach) leaves that process
// able to map its rings: they are held until it exits, and the worker does
// not poll quickly for them (it stays idle meanwhile).
TEST_F(DeviceWorkerTest, ARingOfADetachedProcessIsHeldUntilTheProcessExits) {
  TestRing& ring = CreateRing(3);
  ring.Close();  // this process stands in for the owner; the child's life decides
  auto owner = ::blockswap::testing::ChildProcess::Spawn("living", {});
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto pidfd = std::make_shared<const UniqueFd>(
      static_cast<int>(::syscall(SYS_pidfd_open, owner->pid(), 0)));
  ASSERT_TRUE(pidfd->valid());
  worker_->RetireRing(ring.id, DeviceWorker::RetireReason::kOwnerDetached, pidfd);
  AwaitWorkerPasses(5);
  const auto freed = [this] {
    for (const RingTrace& traced : worker_->ReadTrace(0).rings) {
      if (traced.ring_id == 3 && traced.retired) return true;
    }
    return false;
  };
  EXPECT_FALSE(freed()) << "freed while its process may still map it";
  EXPECT_TRUE(worker_->idle()) << "a ring held for a live process kept the worker busy";
  owner->Kill(SIGKILL);
  ASSERT_TRUE(owner->Wait(kHangGuard).ok());
  const absl::Time deadline = absl::Now() + kHangGuard;
  while (!freed() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(freed()) << "not freed once its process had exited";
}

TEST_F(DeviceWorkerTest, StatisticsCountAcceptedLoadsAndTheirBytes) {
  TestRing& ring = CreateRing(1);
  RequestLoad(ring, 0, block_a_);
  ASSERT_TRUE(ring.consumer->BeginLoad(1, *compute_).ok());
  worker_->Submit(Task(ring, 1, 1, block_b_, /*bytes=*/1000));
  ASSERT_TRUE(AwaitLoaded(ring, 0).ok());
  ASSERT_TRUE(AwaitLoaded(ring, 1).ok());

  DeviceStats stats = worker_->stats();
  EXPECT_EQ(stats.loads, 2u);
  EXPECT_EQ(stats.bytes, kSlotBytes + 1000);
  EXPECT_EQ(stats.rings, 1u);
  EXPECT_EQ(stats.protocol_errors, 0u);
  EXPECT_EQ(stats.queue_depth, 0u);
  std::vector<RingSnapshot> snapshot = SnapshotOf(ring.id);
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_EQ(snapshot[0].session_id, kSessionId);
  EXPECT_EQ(snapshot[0].loads, 2u);
  EXPECT_EQ(snapshot[0].bytes, kSlotBytes + 1000);
  EXPECT_EQ(snapshot[0].slots[1].model_id, "model");
  EXPECT_EQ(snapshot[0].slots[1].block, 3u);
  EXPECT_EQ(snapshot[0].slots[1].filled_seq, 1u);
  EXPECT_EQ(snapshot[0].slots[1].consumed_seq, 0u);
}

TEST_F(DeviceWorkerTest, ARefusedLoadIsNotCountedAsALoad) {
  TestRing& ring = CreateRing(1);
  worker_->Submit(Task(ring, 0, /*generation=*/2, block_a_));
  ASSERT_EQ(sink_->AwaitEvents(1).size(), 1u);
  EXPECT_EQ(worker_->stats().loads, 0u);
  EXPECT_EQ(worker_->stats().bytes, 0u);
  EXPECT_EQ(worker_->stats().protocol_errors, 1u);
}

TEST_F(DeviceWorkerTest, FailAllRingsPublishesTheErrorInEveryRing) {
  TestRing& first = CreateRing(1);
  TestRing& second = CreateRing(2);
  worker_->FailAllRings(absl::UnavailableError("blockswapd is shutting down"));
  for (const TestRing* ring : {&first, &second}) {
    EXPECT_EQ(ring->error_code(), absl::StatusCode::kUnavailable) << "ring " << ring->id;
    EXPECT_EQ(ring->error_message(), "blockswapd is shutting down");
  }
}

}  // namespace
}  // namespace blockswap::daemon
