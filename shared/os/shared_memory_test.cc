#include "shared/os/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace blockswap {
namespace {

TEST(SharedMemory, CreateReservesTheSizeAndMappingsShareBytes) {
  auto shm = SharedMemory::Create("test", 3 * 4096);
  ASSERT_TRUE(shm.ok()) << shm.status();
  auto writer = shm->Map(Access::kReadWrite);
  auto reader = shm->Map(Access::kReadOnly);
  ASSERT_TRUE(writer.ok() && reader.ok());
  std::memcpy(static_cast<char*>(writer->data()) + 8192, "blockswap", 9);
  EXPECT_EQ(std::memcmp(static_cast<char*>(reader->data()) + 8192, "blockswap", 9), 0);
}

TEST(SharedMemory, SizeIsSealed) {
  auto shm = SharedMemory::Create("test", 4096);
  ASSERT_TRUE(shm.ok());
  EXPECT_NE(::ftruncate(shm->fd().get(), 1024), 0) << "a shrink would SIGBUS other mappers";
}

TEST(SharedMemory, SealedObjectKeepsItsWriterAndRefusesEveryNewOne) {
  auto shm = SharedMemory::Create("test", 4096);
  ASSERT_TRUE(shm.ok());
  auto writer = shm->Map(Access::kReadWrite);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(shm->SealAgainstNewWriters().ok());

  struct stat st {};
  ASSERT_EQ(::fstat(shm->fd().get(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  static_cast<char*>(writer->data())[0] = 'x';  // the existing mapping still writes
  // Even through a read-write descriptor (this test runs as root, for whom
  // the 0400 mode is no obstacle): no new writable mapping, no write().
  std::string path = "/proc/self/fd/" + std::to_string(shm->fd().get());
  UniqueFd reopened(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  const int fd = reopened.valid() ? reopened.get() : shm->fd().get();
  EXPECT_EQ(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::pwrite(fd, "y", 1, 0), -1);
  void* reader = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(reader, MAP_FAILED);
  EXPECT_EQ(static_cast<char*>(reader)[0], 'x');
  // Nor can a read-only mapping be upgraded.
  EXPECT_NE(::mprotect(reader, 4096, PROT_READ | PROT_WRITE), 0);
  ::munmap(reader, 4096);
}

TEST(SharedMemory, AdoptRefusesAFileShorterThanAnnounced) {
  UniqueFd fd(::memfd_create("short", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(fd.get(), 4096), 0);
  auto adopted = SharedMemory::Adopt(std::move(fd), 8192);
  ASSERT_FALSE(adopted.ok());
  EXPECT_EQ(adopted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(adopted.status().message().find("4096"), absl::string_view::npos);
}

TEST(SharedMemory, ZeroBytesIsAnError) {
  EXPECT_EQ(SharedMemory::Create("zero", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Mapping, MoveLeavesTheSourceEmpty) {
  auto shm = SharedMemory::Create("test", 4096);
  ASSERT_TRUE(shm.ok());
  auto mapping = shm->Map(Access::kReadWrite);
  ASSERT_TRUE(mapping.ok());
  void* data = mapping->data();
  Mapping moved = std::move(*mapping);
  EXPECT_EQ(mapping->data(), nullptr);
  EXPECT_EQ(moved.data(), data);
}

TEST(RoundUp, RoundsToMultiples) {
  EXPECT_EQ(RoundUp(0, 256), 0u);
  EXPECT_EQ(RoundUp(1, 256), 256u);
  EXPECT_EQ(RoundUp(256, 256), 256u);
  EXPECT_EQ(RoundUp(257, 256), 512u);
}

}  // namespace
}  // namespace blockswap
