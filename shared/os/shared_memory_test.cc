#include "shared/os/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include <gtest/gtest.h>

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
