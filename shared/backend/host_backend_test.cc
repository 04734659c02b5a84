// The host backend must keep CUDA's semantics (backend.h); these tests pin
// the ones the load protocol depends on.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "shared/backend/backend.h"
#include "shared/base/monotonic_clock.h"

namespace blockswap {
namespace {

class HostBackendTest : public ::testing::Test {
 protected:
  HostBackendTest() : backend_(OpenHostBackend({.device_count = 2, .jitter_us = 50})) {}
  Device& device() { return *backend_->devices()[0]; }
  std::unique_ptr<Stream> NewStream() { return device().CreateStream().value(); }
  std::unique_ptr<Event> NewEvent() { return device().CreateEvent().value(); }

  std::unique_ptr<Backend> backend_;
};

TEST_F(HostBackendTest, WaitBindsToTheRecordThatExistsWhenIssued) {
  auto producer = NewStream();
  auto early = NewStream();
  auto late = NewStream();
  auto event = NewEvent();
  absl::Notification release;
  std::atomic<bool> producer_done{false};

  ASSERT_TRUE(early->Wait(*event).ok());  // before any record: binds to nothing
  ASSERT_TRUE(producer->LaunchHostFunc([&] { release.WaitForNotification(); }).ok());
  ASSERT_TRUE(producer->LaunchHostFunc([&] { producer_done = true; }).ok());
  ASSERT_TRUE(producer->Record(*event).ok());
  ASSERT_TRUE(late->Wait(*event).ok());  // after the record: must wait for it

  std::atomic<bool> early_ran{false}, late_ran{false}, late_saw_done{false};
  ASSERT_TRUE(early->LaunchHostFunc([&] { early_ran = true; }).ok());
  ASSERT_TRUE(late->LaunchHostFunc([&] {
                    late_saw_done = producer_done.load();
                    late_ran = true;
                  })
                  .ok());
  ASSERT_TRUE(early->Synchronize().ok());
  EXPECT_TRUE(early_ran);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(late_ran) << "a wait issued after the record must not pass before it";
  release.Notify();
  ASSERT_TRUE(late->Synchronize().ok());
  EXPECT_TRUE(late_saw_done);
}

TEST_F(HostBackendTest, QueryFollowsTheMostRecentRecord) {
  auto stream = NewStream();
  auto event = NewEvent();
  EXPECT_TRUE(event->Query().value()) << "an event never recorded is complete";
  absl::Notification release;
  ASSERT_TRUE(stream->LaunchHostFunc([&] { release.WaitForNotification(); }).ok());
  ASSERT_TRUE(stream->Record(*event).ok());
  EXPECT_FALSE(event->Query().value());
  release.Notify();
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_TRUE(event->Query().value());
}

TEST_F(HostBackendTest, StreamRunsWorkInIssueOrder) {
  auto stream = NewStream();
  std::vector<int> order;
  char source[64] = "copied", middle[64] = {}, target[64] = {};
  ASSERT_TRUE(stream->CopyHostToDevice(middle, source, sizeof(source)).ok());
  ASSERT_TRUE(stream->LaunchHostFunc([&] { order.push_back(std::strcmp(middle, "copied")); }).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(target, middle, sizeof(middle)).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(order, std::vector<int>{0});
  EXPECT_STREQ(target, "copied");
}

TEST_F(HostBackendTest, ExportedMemoryIsSharedWithTheImporter) {
  auto memory = device().Allocate(10000);
  ASSERT_TRUE(memory.ok());
  EXPECT_GE((*memory)->size(), 10000u);
  auto imported = device().ImportMemory((*memory)->Export().value(), (*memory)->size());
  ASSERT_TRUE(imported.ok()) << imported.status();
  std::memcpy((*memory)->data() + 9000, "shared", 7);
  EXPECT_STREQ(reinterpret_cast<const char*>((*imported)->data() + 9000), "shared");
}

TEST_F(HostBackendTest, ImportRefusesForeignOrOversizedHandles) {
  auto memory = device().Allocate(4096);
  ASSERT_TRUE(memory.ok());
  ExportedHandle handle = (*memory)->Export().value();
  handle.blob = "something else";
  EXPECT_EQ(device().ImportMemory(std::move(handle), 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device().ImportMemory((*memory)->Export().value(), 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(HostBackendTest, DevicesAreNamedByUuidAndUnknownOnesAreRefused) {
  ASSERT_EQ(backend_->devices().size(), 2u);
  EXPECT_EQ(backend_->devices()[1]->info().uuid, "HOST-1");
  EXPECT_EQ(backend_->FindDevice("HOST-1").value(), backend_->devices()[1].get());
  absl::Status missing = backend_->FindDevice("GPU-1234").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("HOST-0, HOST-1"), absl::string_view::npos) << missing;
}

TEST_F(HostBackendTest, WrappedCallerStreamRecordsAtOnceAndWaitsInline) {
  auto worker = NewStream();
  auto event = NewEvent();
  auto caller = device().WrapStream(nullptr, absl::Milliseconds(100));
  ASSERT_TRUE(caller.ok()) << caller.status();
  ASSERT_TRUE((*caller)->Record(*event).ok());
  EXPECT_TRUE(event->Query().value()) << "the caller's work is done when it records";

  absl::Notification release;
  ASSERT_TRUE(worker->LaunchHostFunc([&] { release.WaitForNotification(); }).ok());
  ASSERT_TRUE(worker->Record(*event).ok());
  EXPECT_EQ((*caller)->Wait(*event).code(), absl::StatusCode::kDeadlineExceeded);
  release.Notify();
  // Once released, the worker records whenever it is scheduled: a caller
  // that waits inline gets it within its deadline (one a loaded machine
  // cannot miss; the 100 ms above is only for the refusal).
  auto patient = device().WrapStream(nullptr, absl::Seconds(30));
  ASSERT_TRUE(patient.ok()) << patient.status();
  EXPECT_TRUE((*patient)->Wait(*event).ok());
  int native = 0;
  EXPECT_EQ(device().WrapStream(&native).status().code(), absl::StatusCode::kInvalidArgument);
}

// A stream's idle time at a wait (WaitTimer): the reference's "GPU stall".
// Bounds are loose on the side a loaded machine can stretch (a late worker
// shortens what it sees idle, never lengthens it past the delay it waits on).
constexpr absl::Duration kRecorderDelay = absl::Milliseconds(20);

TEST_F(HostBackendTest, WaitBehindASlowRecorderMeasuresTheStreamIdleTime) {
  auto recorder = NewStream();
  auto waiter = NewStream();
  auto event = NewEvent();
  auto timer = device().CreateWaitTimer().value();
  EXPECT_FALSE(timer->Poll().value().has_value()) << "no wait timed yet";

  const uint64_t issued_ns = MonotonicNanos();
  ASSERT_TRUE(recorder->LaunchHostFunc([] { absl::SleepFor(kRecorderDelay); }).ok());
  ASSERT_TRUE(recorder->Record(*event).ok());
  ASSERT_TRUE(waiter->WaitTimed(*event, *timer).ok());
  std::optional<WaitIdle> idle = timer->Await().value();
  ASSERT_TRUE(idle.has_value());
  // The event completes no sooner than kRecorderDelay after `issued_ns`, and
  // the waiting stream reached the wait at began_ns: it sat idle for the rest
  // of the delay, however late a loaded machine ran it.
  const absl::Duration late = absl::Nanoseconds(idle->began_ns - issued_ns);
  EXPECT_GE(idle->idle, kRecorderDelay - late - absl::Milliseconds(1))
      << "began " << late << " late";
  EXPECT_GE(idle->began_ns, issued_ns);
  EXPECT_LE(idle->began_ns, MonotonicNanos());
  EXPECT_EQ(timer->Poll().value()->idle, idle->idle) << "a result stays until the next wait";
}

TEST_F(HostBackendTest, TimedWaitIsPendingUntilTheStreamPassesIt) {
  auto recorder = NewStream();
  auto waiter = NewStream();
  auto event = NewEvent();
  auto timer = device().CreateWaitTimer().value();
  absl::Notification release;
  ASSERT_TRUE(recorder->LaunchHostFunc([&] { release.WaitForNotification(); }).ok());
  ASSERT_TRUE(recorder->Record(*event).ok());
  ASSERT_TRUE(waiter->WaitTimed(*event, *timer).ok());
  EXPECT_FALSE(timer->Poll().value().has_value()) << "the stream cannot have passed the wait";
  release.Notify();
  EXPECT_TRUE(timer->Await().value().has_value());
}

TEST_F(HostBackendTest, WaitOnACompletedEventMeasuresNoIdleTime) {
  auto recorder = NewStream();
  auto waiter = NewStream();
  auto event = NewEvent();
  auto timer = device().CreateWaitTimer().value();
  ASSERT_TRUE(recorder->Record(*event).ok());
  ASSERT_TRUE(recorder->Synchronize().ok());
  ASSERT_TRUE(waiter->WaitTimed(*event, *timer).ok());
  EXPECT_LT(timer->Await().value()->idle, absl::Milliseconds(5));
}

TEST_F(HostBackendTest, ComputeQueuedBeforeTheWaitIsNotIdleTime) {
  // The thread that issues the wait returns at once, and the stream is busy
  // for the whole delay: by the time it reaches the wait, the record has
  // long completed. A thread-side measure would count nothing either; the
  // point is that the stream's own work before the wait never counts.
  auto recorder = NewStream();
  auto waiter = NewStream();
  auto event = NewEvent();
  auto timer = device().CreateWaitTimer().value();
  ASSERT_TRUE(waiter->LaunchHostFunc([] { absl::SleepFor(2 * kRecorderDelay); }).ok());
  ASSERT_TRUE(recorder->LaunchHostFunc([] { absl::SleepFor(kRecorderDelay); }).ok());
  ASSERT_TRUE(recorder->Record(*event).ok());
  ASSERT_TRUE(waiter->WaitTimed(*event, *timer).ok());
  EXPECT_LT(timer->Await().value()->idle, kRecorderDelay / 2);
}

TEST_F(HostBackendTest, CallerStreamMeasuresTheTimeItBlocked) {
  auto recorder = NewStream();
  auto event = NewEvent();
  auto timer = device().CreateWaitTimer().value();
  auto caller = device().WrapStream(nullptr).value();
  ASSERT_TRUE(recorder->LaunchHostFunc([] { absl::SleepFor(kRecorderDelay); }).ok());
  ASSERT_TRUE(recorder->Record(*event).ok());
  ASSERT_TRUE(caller->WaitTimed(*event, *timer).ok());
  std::optional<WaitIdle> idle = timer->Poll().value();
  ASSERT_TRUE(idle.has_value()) << "the caller has passed its wait when it returns";
  EXPECT_GE(idle->idle, kRecorderDelay - absl::Milliseconds(5));
}

TEST(BackendChoice, ParsesTheThreeNamesAndRefusesOthers) {
  EXPECT_EQ(ParseBackendChoice("auto").value(), BackendChoice::kAuto);
  EXPECT_EQ(ParseBackendChoice("host").value(), BackendChoice::kHost);
  EXPECT_EQ(ParseBackendChoice("cuda").value(), BackendChoice::kCuda);
  EXPECT_EQ(ParseBackendChoice("gpu").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BackendChoice, ForcedHostIsHost) {
  auto backend = OpenBackend(BackendChoice::kHost);
  ASSERT_TRUE(backend.ok());
  EXPECT_EQ((*backend)->kind(), BackendKind::kHost);
}

#if !BLOCKSWAP_HAVE_CUDA
TEST(BackendChoice, ForcedCudaWithoutCudaSupportSaysWhy) {
  absl::Status status = OpenBackend(BackendChoice::kCuda).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("no CUDA support"), absl::string_view::npos) << status;
}
#endif

// Stream words (backend.h): a wait is released by the stream that writes the
// word behind its work, or by a plain store from any thread (a client's
// watchdog), and compares in serial-number order.
class HostStreamWordsTest : public HostBackendTest {
 protected:
  std::unique_ptr<StreamWords> NewWords() {
    SharedMemory memory = SharedMemory::Create("words-test", 4096).value();
    return device().MapStreamWords(memory.Map(Access::kReadWrite).value()).value();
  }
};

TEST_F(HostStreamWordsTest, AWaitPassesOnlyOnceTheWriterStreamsEarlierWorkIsDone) {
  auto writer = NewStream();
  auto waiter = NewStream();
  auto words = NewWords();
  absl::Notification release;
  std::atomic<bool> written_work_done{false};
  std::atomic<bool> waiter_saw_it{false};
  ASSERT_TRUE(writer->LaunchHostFunc([&] { release.WaitForNotification(); }).ok());
  ASSERT_TRUE(writer->LaunchHostFunc([&] { written_work_done = true; }).ok());
  ASSERT_TRUE(writer->WriteWord(*words, 3, 7).ok());
  ASSERT_TRUE(waiter->WaitWord(*words, 3, 7, nullptr).ok());
  ASSERT_TRUE(waiter->LaunchHostFunc([&] { waiter_saw_it = written_work_done.load(); }).ok());
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(words->word(3).load(), 0u) << "written before the writer's earlier work ran";
  release.Notify();
  ASSERT_TRUE(waiter->Synchronize().ok());
  EXPECT_TRUE(waiter_saw_it);
  EXPECT_EQ(words->word(3).load(), 7u);
}

TEST_F(HostStreamWordsTest, AStoreFromAnyThreadReleasesAWaitNoStreamWillWrite) {
  auto waiter = NewStream();
  auto words = NewWords();
  std::unique_ptr<WaitTimer> timer = device().CreateWaitTimer().value();
  absl::Notification passed;
  ASSERT_TRUE(waiter->WaitWord(*words, 0, 5, timer.get()).ok());
  ASSERT_TRUE(waiter->LaunchHostFunc([&] { passed.Notify(); }).ok());
  EXPECT_FALSE(passed.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  words->word(0).store(5 + (1u << 30));  // the watchdog's move: far ahead
  EXPECT_TRUE(passed.WaitForNotificationWithTimeout(absl::Seconds(5)));
  std::optional<WaitIdle> idle = timer->Await().value();
  ASSERT_TRUE(idle.has_value());
  EXPECT_GE(idle->idle, absl::Milliseconds(40)) << "the timer measures the idle time at the wait";
}

TEST(StreamWordOrder, ComparesInSerialNumberArithmetic) {
  EXPECT_TRUE(WordReached(5, 5));
  EXPECT_TRUE(WordReached(6, 5));
  EXPECT_FALSE(WordReached(4, 5));
  EXPECT_TRUE(WordReached(0x00000002u, 0xFFFFFFFEu));  // across the wrap
  EXPECT_FALSE(WordReached(0xFFFFFFFEu, 0x00000002u));
  EXPECT_TRUE(WordReached(4 + (1u << 30), 5));  // a watchdog's move releases a pending wait
}

TEST(HostStreamWordsSwitch, WithoutStreamWordsTheDeviceSaysSo) {
  auto backend = OpenHostBackend({.without_stream_words = true});
  SharedMemory memory = SharedMemory::Create("words-test", 4096).value();
  absl::StatusOr<std::unique_ptr<StreamWords>> words =
      backend->devices()[0]->MapStreamWords(memory.Map(Access::kReadWrite).value());
  EXPECT_TRUE(absl::IsFailedPrecondition(words.status())) << words.status();
  EXPECT_NE(words.status().message().find("no stream memory operations"), absl::string_view::npos);
}

TEST(HostPinLimitSwitch, RegistrationsBeyondTheLimitFailAndFreedOnesMakeRoom) {
  auto backend = OpenHostBackend({.pin_limit_bytes = 1000});
  Device& device = *backend->devices()[0];
  std::vector<std::byte> memory(2000);
  auto first = device.RegisterHostMemory(memory.data(), 600);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = device.RegisterHostMemory(memory.data() + 600, 600);
  EXPECT_TRUE(absl::IsResourceExhausted(second.status())) << second.status();
  EXPECT_NE(second.status().message().find("600 of 1000 are pinned"), absl::string_view::npos)
      << second.status();
  EXPECT_FALSE(device.RegisterHostMemory(memory.data(), 1001).ok()) << "over the limit alone";
  first->reset();
  EXPECT_TRUE(device.RegisterHostMemory(memory.data() + 600, 600).ok()) << "room once unpinned";
}

TEST(HostPinLimitSwitch, PinnedHostBuffersCountAgainstTheLimitUntilFreed) {
  auto backend = OpenHostBackend({.pin_limit_bytes = 1000});
  Device& device = *backend->devices()[0];
  auto buffer = device.AllocatePinnedHostBuffer(600);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->size(), 600u);
  (*buffer)->data()[599] = std::byte{1};  // writable to its end
  std::vector<std::byte> memory(600);
  auto over = device.RegisterHostMemory(memory.data(), 600);
  EXPECT_TRUE(absl::IsResourceExhausted(over.status())) << over.status();
  EXPECT_FALSE(device.AllocatePinnedHostBuffer(600).ok()) << "over the limit with the first";
  buffer->reset();
  EXPECT_TRUE(device.AllocatePinnedHostBuffer(600).ok()) << "room once freed";
}

}  // namespace
}  // namespace blockswap
