#include "daemon/runtime/process_stats.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <ctime>
#include <vector>

namespace blockswap::daemon {
namespace {

TEST(ProcessStats, CountsTheDescriptorsThisProcessOpens) {
  absl::StatusOr<ProcessStats> before = ReadProcessStats();
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<int> opened;
  for (int i = 0; i < 5; ++i) opened.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  absl::StatusOr<ProcessStats> after = ReadProcessStats();
  for (int fd : opened) ::close(fd);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->open_fds, before->open_fds + 5);
  EXPECT_GE(after->max_fds, after->open_fds);
}

TEST(ProcessStats, MemoryGrowsWithWhatTheProcessTouches) {
  absl::StatusOr<ProcessStats> before = ReadProcessStats();
  ASSERT_TRUE(before.ok()) << before.status();
  // 64 MiB, each page written through a volatile pointer: a buffer that is
  // only filled and never read may be elided with its allocation (built with
  // ThreadSanitizer, a filled std::vector left the resident size as it
  // was), a volatile store may not.
  std::vector<char> touched(64 << 20);
  volatile char* bytes = touched.data();
  for (size_t at = 0; at < touched.size(); at += 4096) bytes[at] = 1;
  absl::StatusOr<ProcessStats> after = ReadProcessStats();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(after->resident_memory_bytes, before->resident_memory_bytes + (48u << 20));
  EXPECT_GE(after->virtual_memory_bytes, after->resident_memory_bytes);
}

TEST(ProcessStats, CpuTimeAndStartTimeAreThisProcesss) {
  absl::StatusOr<ProcessStats> before = ReadProcessStats();
  ASSERT_TRUE(before.ok()) << before.status();
  // 0.2 s of this process's CPU time, by its own clock (a loaded machine
  // gives a wall-clock spin much less).
  auto cpu_now = [] {
    timespec t{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
  };
  const double until = cpu_now() + 0.2;
  volatile uint64_t spin = 0;
  while (cpu_now() < until) spin = spin + 1;
  absl::StatusOr<ProcessStats> after = ReadProcessStats();
  ASSERT_TRUE(after.ok()) << after.status();
  // /proc counts in clock ticks (10 ms).
  EXPECT_GE(after->cpu_seconds - before->cpu_seconds, 0.15);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(after->start_time_seconds, now + 1);
  EXPECT_GE(after->start_time_seconds, now - 600) << "this test started less than 10 min ago";
  EXPECT_GE(after->threads, 1u);
}

}  // namespace
}  // namespace blockswap::daemon
