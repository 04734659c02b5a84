#include "shared/base/unique_fd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace blockswap {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(UniqueFd, ClosesOnDestruction) {
  int raw = ::memfd_create("t", MFD_CLOEXEC);
  ASSERT_GE(raw, 0);
  { UniqueFd fd(raw); EXPECT_TRUE(IsOpen(raw)); }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFd, MoveTransfersOwnership) {
  UniqueFd a(::memfd_create("t", MFD_CLOEXEC));
  int raw = a.get();
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(b.get(), raw);
  UniqueFd c;
  c = std::move(b);
  EXPECT_EQ(c.get(), raw);
  EXPECT_TRUE(IsOpen(raw));
}

TEST(UniqueFd, DuplicateIsAnIndependentDescriptor) {
  UniqueFd a(::memfd_create("t", MFD_CLOEXEC));
  auto b = a.Duplicate();
  ASSERT_TRUE(b.ok());
  EXPECT_NE(b->get(), a.get());
  int raw = a.get();
  a.Reset();
  EXPECT_FALSE(IsOpen(raw));
  EXPECT_TRUE(IsOpen(b->get()));
}

TEST(UniqueFd, ReopenReadOnlyCannotBeMappedWritable) {
  UniqueFd fd(::memfd_create("t", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(fd.get(), 4096), 0);
  auto ro = fd.ReopenReadOnly();
  ASSERT_TRUE(ro.ok()) << ro.status();
  void* writable = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ro->get(), 0);
  EXPECT_EQ(writable, MAP_FAILED);
  void* readable = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, ro->get(), 0);
  ASSERT_NE(readable, MAP_FAILED);
  ::munmap(readable, 4096);
}

TEST(UniqueFd, DuplicateOfAnInvalidDescriptorIsAnError) {
  UniqueFd none;
  EXPECT_FALSE(none.Duplicate().ok());
}

}  // namespace
}  // namespace blockswap
