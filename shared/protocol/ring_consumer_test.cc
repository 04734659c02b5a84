// RingConsumer rules that need no second process: both halves of one ring
// in this process on the host backend.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "shared/base/monotonic_clock.h"
#include "shared/protocol/load_protocol.h"

namespace blockswap {
namespace {

class RingConsumerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = OpenHostBackend({});
    device_ = backend_->devices()[0].get();
    daemon_ring_ = DaemonRing::Create(*device_, 1, RingShape{2, 4096}, 42).value();
    client_ring_ = RingImport::Import(*device_, daemon_ring_->Export().value()).value();
    copy_stream_ = device_->CreateStream().value();
    producer_ = std::make_unique<RingProducer>(*daemon_ring_, *copy_stream_);
    notifier_ = device_->CreateStream().value();
    consumer_ =
        std::make_unique<RingConsumer>(*client_ring_, ConsumerOptions{.notifier = notifier_.get()});
    compute_ = device_->CreateStream().value();
  }

  // Runs the daemon's half until the copy is issued (its slot's `free`
  // completes on the compute stream's worker, then the notifier publishes
  // the release).
  void Serve(uint32_t slot, uint32_t generation) {
    ASSERT_TRUE(producer_->Submit(slot, generation, source_, sizeof(source_)).ok());
    for (absl::Time until = absl::Now() + absl::Seconds(5);
         producer_->has_pending() && absl::Now() < until; absl::SleepFor(absl::Microseconds(50))) {
      ASSERT_TRUE(producer_->Poll().ok());
    }
    ASSERT_FALSE(producer_->has_pending());
  }

  char source_[64] = "block";
  std::unique_ptr<Backend> backend_;
  Device* device_ = nullptr;
  std::unique_ptr<DaemonRing> daemon_ring_;
  std::unique_ptr<RingImport> client_ring_;
  std::unique_ptr<Stream> notifier_;  // drained before client_ring_ goes
  std::unique_ptr<Stream> copy_stream_;
  std::unique_ptr<RingProducer> producer_;
  std::unique_ptr<RingConsumer> consumer_;
  std::unique_ptr<Stream> compute_;
};

TEST_F(RingConsumerTest, ASlotUsedAgainAfterItsReleaseIsFreedOnlyAfterThatUse) {
  uint32_t g1 = consumer_->BeginLoad(0, *compute_).value();
  Serve(0, g1);
  ASSERT_TRUE(consumer_->AwaitLoaded(0, *compute_).ok());
  ASSERT_TRUE(consumer_->Release(0, *compute_).ok());
  // The block is used again after its release (backward re-reading it)...
  ASSERT_TRUE(consumer_->AwaitLoaded(0, *compute_).ok());
  absl::Notification finish_compute;
  ASSERT_TRUE(compute_->LaunchHostFunc([&] { finish_compute.WaitForNotification(); }).ok());
  // ...so the next load must wait for that use, not for the first one.
  uint32_t g2 = consumer_->BeginLoad(0, *compute_).value();
  ASSERT_TRUE(producer_->Submit(0, g2, source_, sizeof(source_)).ok());
  ASSERT_TRUE(producer_->Poll().ok());
  EXPECT_TRUE(producer_->has_pending()) << "the copy would overwrite a slot still in use";
  finish_compute.Notify();
  ASSERT_TRUE(compute_->Synchronize().ok());
  ASSERT_TRUE(notifier_->Synchronize().ok());
  ASSERT_TRUE(producer_->Poll().ok());
  EXPECT_FALSE(producer_->has_pending()) << "the use is over: the copy may go";
  EXPECT_TRUE(consumer_->AwaitLoaded(0, *compute_).ok());
}

// A client waits for its loads in the order it requested them: ready
// copies are issued in that order, not in slot order.
TEST_F(RingConsumerTest, ReadyCopiesAreIssuedInRequestOrderNotSlotOrder) {
  const uint32_t g1 = consumer_->BeginLoad(1, *compute_).value();
  const uint32_t g0 = consumer_->BeginLoad(0, *compute_).value();
  ASSERT_TRUE(compute_->Synchronize().ok());   // both slots' `free` complete
  ASSERT_TRUE(notifier_->Synchronize().ok());  // and their releases published
  ASSERT_TRUE(producer_->Submit(1, g1, source_, sizeof(source_)).ok());
  ASSERT_TRUE(producer_->Submit(0, g0, source_, sizeof(source_)).ok());
  std::vector<RingProducer::Ready> ready;
  ASSERT_EQ(producer_->FindReleased(&ready).value(), 2);
  EXPECT_FALSE(producer_->awaits_release());
  EXPECT_FALSE(producer_->HasAnnouncedRelease()) << "ready copies need no further look";
  ASSERT_TRUE(producer_->OldestReady().has_value());
  EXPECT_EQ(producer_->OldestReady()->slot, 1u) << "slot 1 was requested first";
  std::vector<RingProducer::Issued> issued;
  ASSERT_TRUE(producer_->IssueOldestReady(&issued).ok());
  ASSERT_TRUE(producer_->IssueOldestReady(&issued).ok());
  ASSERT_EQ(issued.size(), 2u);
  EXPECT_EQ(issued[0].slot, 1u);
  EXPECT_EQ(issued[1].slot, 0u);
  EXPECT_FALSE(producer_->has_pending());
  absl::Status none = producer_->IssueOldestReady(&issued);
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition) << none;
  EXPECT_TRUE(producer_->status().ok()) << "asking with nothing ready does not fail the ring";

  // Poll (the whole pass for a ring alone) keeps the same order.
  const uint32_t h1 = consumer_->BeginLoad(1, *compute_).value();
  const uint32_t h0 = consumer_->BeginLoad(0, *compute_).value();
  ASSERT_TRUE(compute_->Synchronize().ok());
  ASSERT_TRUE(notifier_->Synchronize().ok());
  ASSERT_TRUE(producer_->Submit(1, h1, source_, sizeof(source_)).ok());
  ASSERT_TRUE(producer_->Submit(0, h0, source_, sizeof(source_)).ok());
  issued.clear();
  ASSERT_EQ(producer_->Poll(&issued).value(), 2);
  ASSERT_EQ(issued.size(), 2u);
  EXPECT_EQ(issued[0].slot, 1u);
  EXPECT_EQ(issued[1].slot, 0u);
}

// A timed wait measures the compute stream's idle time at ready[s] (the
// reference's stall), and RecordStall traces it as the ring's kStall.
constexpr absl::Duration kSlowCopy = absl::Milliseconds(20);

TEST_F(RingConsumerTest, ATimedWaitBehindASlowCopyMeasuresTheStreamsStallAndTracesIt) {
  auto timer = device_->CreateWaitTimer().value();
  uint32_t generation = consumer_->BeginLoad(0, *compute_).value();
  // The copy engine is busy first: ready[s] completes only after the test
  // releases it, kSlowCopy after the wait was issued (a release timed from
  // the test's side, so that a loaded machine cannot shorten the stall).
  absl::Notification release;
  ASSERT_TRUE(copy_stream_
                  ->LaunchHostFunc(
                      [&release] { release.WaitForNotificationWithTimeout(absl::Seconds(10)); })
                  .ok());
  Serve(0, generation);
  ASSERT_TRUE(consumer_->AwaitLoaded(0, *compute_, absl::Seconds(5), timer.get()).ok());
  absl::SleepFor(kSlowCopy);
  const uint64_t released_ns = MonotonicNanos();
  release.Notify();
  std::optional<WaitIdle> idle = timer->Await().value();
  ASSERT_TRUE(idle.has_value());
  // The stream waited from when it reached the wait until ready[s], which
  // the copy could only complete after its release.
  EXPECT_GE(idle->began_ns + absl::ToInt64Nanoseconds(idle->idle), released_ns);
  EXPECT_GT(idle->idle, absl::ZeroDuration());

  consumer_->RecordStall(0, generation, *idle);
  TraceSnapshot trace = client_ring_->trace().Read();
  ASSERT_FALSE(trace.events.empty());
  const TraceEvent& stall = trace.events.back();
  EXPECT_EQ(stall.kind, TraceKind::kStall);
  EXPECT_EQ(stall.slot, 0u);
  EXPECT_EQ(stall.generation, generation);
  EXPECT_EQ(stall.time_ns, idle->began_ns);
  EXPECT_EQ(stall.value, static_cast<uint64_t>(absl::ToInt64Nanoseconds(idle->idle)));
}

TEST_F(RingConsumerTest, ComputeQueuedBeforeATimedWaitIsNotAStall) {
  auto timer = device_->CreateWaitTimer().value();
  uint32_t generation = consumer_->BeginLoad(0, *compute_).value();
  Serve(0, generation);
  // The stream reaches its wait only after its own long compute, by when
  // the copy has long completed: the thread returns at once, the stream
  // never idles.
  ASSERT_TRUE(compute_->LaunchHostFunc([] { absl::SleepFor(2 * kSlowCopy); }).ok());
  ASSERT_TRUE(consumer_->AwaitLoaded(0, *compute_, absl::Seconds(5), timer.get()).ok());
  EXPECT_LT(timer->Await().value()->idle, kSlowCopy / 2);
}

TEST_F(RingConsumerTest, TheCopyTimeThePublisherAddsIsWhatTheConsumerReads) {
  EXPECT_EQ(consumer_->CopyTimeSoFar(), absl::ZeroDuration());
  producer_->PublishCopied(0, 1, absl::Microseconds(300));
  producer_->PublishCopied(1, 1, absl::Microseconds(450));
  EXPECT_EQ(consumer_->CopyTimeSoFar(), absl::Microseconds(750));
  EXPECT_EQ(client_ring_->control().copies_done.load(), 2u);
}

// landed_seq (the wait of a client without ready words) follows the
// daemon's completions of each slot's copies, and never moves back.
TEST_F(RingConsumerTest, ACompletedCopyIsPublishedAsLandedAndALateReportNeverMovesItBack) {
  const DaemonControlBlock& control = client_ring_->control();
  EXPECT_EQ(control.landed_seq[1].load(), 0u);
  producer_->PublishCopied(1, 2, absl::ZeroDuration());
  EXPECT_EQ(control.landed_seq[1].load(), 2u);
  producer_->PublishCopied(1, 1, absl::ZeroDuration());
  EXPECT_EQ(control.landed_seq[1].load(), 2u) << "a late report moved landed_seq back";
  EXPECT_EQ(control.landed_seq[0].load(), 0u) << "only the copy's own slot";
}

// The client's word is the daemon's one sign of a release: a value ahead of
// the requested generation is the client's protocol error, and fails the
// ring before anything is copied.
TEST_F(RingConsumerTest, AReleaseAheadOfThePendingGenerationFailsTheRing) {
  ASSERT_TRUE(producer_->Submit(0, 1, source_, sizeof(source_)).ok());
  client_ring_->client_control().releasable_seq[0].store(3, std::memory_order_release);
  absl::StatusOr<int> found = producer_->FindReleased();
  EXPECT_EQ(found.status().code(), absl::StatusCode::kFailedPrecondition) << found.status();
  EXPECT_EQ(client_ring_->control().status.error_code.load(),
            static_cast<uint32_t>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(client_ring_->control().filled_seq[0].load(), 0u);
}

TEST_F(RingConsumerTest, WaitOnASlotNeverLoadedIsRefused) {
  EXPECT_EQ(consumer_->AwaitLoaded(1, *compute_).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(consumer_->AwaitLoaded(5, *compute_).code(), absl::StatusCode::kOutOfRange);
}

// The client's watchdog releases its stream's waits on the ready words when
// the daemon is lost (docs/protocol.md, "A dead daemon"). A wait the caller
// was told it may use, whose copy had not written its word, is what the
// watchdog must report: work queued behind it read the slot anyway.
class AbandonedWaitTest : public RingConsumerTest {
 protected:
  void SetUp() override {
    RingConsumerTest::SetUp();
    ASSERT_NE(client_ring_->ready_words(), nullptr) << "the host backend has stream words";
  }
  void TearDown() override {
    if (!copy_held_.HasBeenNotified()) copy_held_.Notify();
    ASSERT_TRUE(copy_stream_->Synchronize().ok());
  }

  // Issues generation `g` of `slot` with its copy (and so its word) held
  // back until TearDown, as by a daemon that dies before its copy runs.
  void ServeHeld(uint32_t slot, uint32_t generation) {
    ASSERT_TRUE(copy_stream_->LaunchHostFunc([this] { copy_held_.WaitForNotification(); }).ok());
    Serve(slot, generation);
  }

  absl::Notification copy_held_;
};

TEST_F(AbandonedWaitTest, ACommittedWaitReleasedBeforeItsCopyIsReportedOnce) {
  const uint32_t generation = consumer_->BeginLoad(0, *compute_).value();
  ServeHeld(0, generation);
  ASSERT_TRUE(consumer_->AwaitLoaded(0, *compute_).ok()) << "filled_seq is published at issue";
  client_ring_->AbandonReadyWords();
  ASSERT_TRUE(compute_->Synchronize().ok()) << "the watchdog released the stream";
  std::vector<RingImport::UnfinishedWait> released = client_ring_->TakeUnfinishedWaits();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].slot, 0u);
  EXPECT_EQ(released[0].generation, generation);
  EXPECT_TRUE(client_ring_->TakeUnfinishedWaits().empty()) << "reported once";
}

TEST_F(AbandonedWaitTest, AWaitWhoseCopyHadWrittenItsWordIsNotReported) {
  const uint32_t done = consumer_->BeginLoad(1, *compute_).value();
  Serve(1, done);
  ASSERT_TRUE(consumer_->AwaitLoaded(1, *compute_).ok());
  ASSERT_TRUE(copy_stream_->Synchronize().ok());  // the copy and its word
  client_ring_->AbandonReadyWords();
  ASSERT_TRUE(compute_->Synchronize().ok());
  EXPECT_TRUE(client_ring_->TakeUnfinishedWaits().empty());
}

// A ring the daemon fails moves its words behind the copies it had issued:
// the client's stream is let go only once the copy it waits for has landed.
TEST_F(AbandonedWaitTest, ARingTheDaemonFailsReleasesAWaitOnlyAfterItsCopy) {
  const uint32_t generation = consumer_->BeginLoad(0, *compute_).value();
  ServeHeld(0, generation);
  ASSERT_TRUE(consumer_->AwaitLoaded(0, *compute_).ok());
  std::atomic<bool> passed{false};
  std::string seen;
  const std::byte* slot = client_ring_->slot(0);
  ASSERT_TRUE(compute_
                  ->LaunchHostFunc([&] {
                    seen.assign(reinterpret_cast<const char*>(slot), sizeof(source_));
                    passed = true;
                  })
                  .ok());
  producer_->Fail(absl::UnavailableError("blockswapd is shutting down"));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(passed) << "the stream was let go while its copy was still held";
  copy_held_.Notify();
  ASSERT_TRUE(compute_->Synchronize().ok());
  EXPECT_TRUE(passed);
  EXPECT_EQ(seen, std::string(source_, sizeof(source_)));
  // The copy's own word let the stream go; the abandon's comes after it.
  ASSERT_TRUE(copy_stream_->Synchronize().ok());
  EXPECT_EQ(client_ring_->ready_words()->word(0).load(),
            AbandonedWordValue(client_ring_->control(), 0));
  EXPECT_TRUE(client_ring_->TakeUnfinishedWaits().empty());
}

TEST_F(AbandonedWaitTest, AWaitAfterTheWatchdogFailsAndIsNotReported) {
  const uint32_t generation = consumer_->BeginLoad(0, *compute_).value();
  ServeHeld(0, generation);
  client_ring_->AbandonReadyWords();
  // The caller hears of it now and queues no work behind the wait.
  absl::Status waited = consumer_->AwaitLoaded(0, *compute_);
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
  EXPECT_TRUE(client_ring_->TakeUnfinishedWaits().empty());
}

}  // namespace
}  // namespace blockswap
