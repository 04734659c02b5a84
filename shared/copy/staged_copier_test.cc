// The staging pool and the staged copier on the host backend, whose streams
// run their copies on their own threads (with jitter): the chunks of a staged
// copy must land byte-exact, a buffer must not be refilled before the device
// copy that read it ran, and a pool the device cannot pin is refused with
// the reason.
#include "shared/copy/staged_copier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "shared/copy/staging_pool.h"
#include "shared/backend/backend.h"
#include "tests/support/held_copy_device.h"

namespace blockswap {
namespace {

std::vector<std::byte> RandomBytes(size_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(bytes);
  for (std::byte& b : out) b = static_cast<std::byte>(rng());
  return out;
}

StagingOptions SmallPool(uint32_t buffers = 3, uint32_t threads = 2, int64_t jitter_us = 100) {
  return StagingOptions{
      .buffer_bytes = 64 << 10, .buffers = buffers, .threads = threads, .jitter_us = jitter_us};
}

TEST(StagingPool, ADeviceThatRefusesToPinThemSaysWhatToChange) {
  auto backend = OpenHostBackend({.pin_limit_bytes = 64 << 10});
  auto pool = StagingPool::Create(*backend->devices()[0], SmallPool());
  EXPECT_TRUE(absl::IsResourceExhausted(pool.status())) << pool.status();
  EXPECT_NE(pool.status().message().find("lower staging_buffer_bytes"), absl::string_view::npos)
      << pool.status();
}

TEST(StagingPool, EmptyShapesAreRefused) {
  auto backend = OpenHostBackend({});
  StagingOptions options = SmallPool();
  options.threads = 0;
  EXPECT_TRUE(
      absl::IsInvalidArgument(StagingPool::Create(*backend->devices()[0], options).status()));
}

// Many blocks of sizes around the chunk size, copied back to back with no
// synchronisation between them, so that buffers are reused across copies
// while the stream (jittered) still reads them.
TEST(StagedCopier, BlocksOfAnySizeLandByteExactThroughFewBuffers) {
  auto backend = OpenHostBackend({.jitter_us = 100});
  Device& device = *backend->devices()[0];
  auto copier = StagedCopier::Start(device, SmallPool());
  ASSERT_TRUE(copier.ok()) << copier.status();
  auto stream = device.CreateStream();
  ASSERT_TRUE(stream.ok());
  const std::vector<size_t> sizes = {
      1, 64 << 10, (64 << 10) + 1, 300000, (1 << 20), 3 * (64 << 10) - 7, 0, 777777};
  std::vector<std::vector<std::byte>> sources;
  std::vector<std::unique_ptr<DeviceMemory>> slots;
  for (size_t i = 0; i < sizes.size(); ++i) {
    sources.push_back(RandomBytes(sizes[i], i + 1));
    auto slot = device.Allocate(std::max<size_t>(sizes[i], 1));
    ASSERT_TRUE(slot.ok());
    slots.push_back(*std::move(slot));
  }
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::memset(slots[i]->data(), 0, slots[i]->size());
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_TRUE((*copier)->Copy(**stream, slots[i]->data(), sources[i].data(), sizes[i]).ok());
    }
    ASSERT_TRUE((*stream)->Synchronize().ok());
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == 0) continue;  // nothing to compare (and no pointer to compare with)
      EXPECT_EQ(std::memcmp(slots[i]->data(), sources[i].data(), sizes[i]), 0)
          << "block " << i << " of " << sizes[i] << " bytes, round " << round;
    }
  }
}

// The copy stream holds every copy: a copier that refilled a buffer before
// the device copy that reads it ran would return with all chunks queued; this
// one must wait on the first buffer's `consumed` for the third chunk.
TEST(StagedCopier, ABufferIsNotRefilledBeforeTheDeviceCopyThatReadItRan) {
  auto backend = OpenHostBackend({});
  testing::HeldCopyDevice device(*backend->devices()[0]);
  auto copier = StagedCopier::Start(device, SmallPool(/*buffers=*/2, /*threads=*/2, 0));
  ASSERT_TRUE(copier.ok()) << copier.status();
  auto stream = device.CreateStream();
  ASSERT_TRUE(stream.ok());
  const size_t bytes = 4 * (64 << 10);
  std::vector<std::byte> source = RandomBytes(bytes, 7);
  auto slot = device.Allocate(bytes);
  ASSERT_TRUE(slot.ok());
  std::atomic<bool> returned{false};
  absl::Status copied;
  std::thread worker([&] {
    copied = (*copier)->Copy(**stream, (*slot)->data(), source.data(), bytes);
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(returned) << "the third chunk was staged into a buffer its copy had not read";
  device.ReleaseCopies();
  worker.join();
  ASSERT_TRUE(copied.ok()) << copied;
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(std::memcmp((*slot)->data(), source.data(), bytes), 0);
}

}  // namespace
}  // namespace blockswap
