#include "shared/base/file_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "shared/base/unique_fd.h"

namespace blockswap {
namespace {

UniqueFd NewFile() { return UniqueFd(::memfd_create("file_io_test", MFD_CLOEXEC)); }

TEST(FileIo, WritesAndReadsBackAtAnOffset) {
  UniqueFd fd = NewFile();
  ASSERT_TRUE(fd.valid());
  const std::string text = "blocks of weights";
  ASSERT_TRUE(WriteFully(fd.get(), 100, text.data(), text.size(), "the file").ok());
  std::string back(text.size(), '\0');
  ASSERT_TRUE(ReadFully(fd.get(), 100, back.data(), back.size(), "the file").ok());
  EXPECT_EQ(back, text);
}

TEST(FileIo, AShortFileIsDataLossSayingWhereItEnds) {
  UniqueFd fd = NewFile();
  ASSERT_TRUE(WriteFully(fd.get(), 0, "abcd", 4, "the file").ok());
  char buffer[8];
  absl::Status status = ReadFully(fd.get(), 2, buffer, sizeof(buffer), "manifest 7");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "reading manifest 7: it ends after 4 bytes, 6 short of 10");
}

TEST(FileIo, ErrorsNameTheFile) {
  UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  absl::Status status = WriteFully(fd.get(), 0, "x", 1, "block 3 into /m");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("writing block 3 into /m"), absl::string_view::npos) << status;
}

}  // namespace
}  // namespace blockswap
