#include "shared/base/regular_file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "absl/time/clock.h"

namespace blockswap {
namespace {

using ::testing::HasSubstr;

class RegularFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/blockswap-regular-file-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The message of OpenRegularFile's INVALID_ARGUMENT for `path`.
  std::string Refusal(const std::string& path) {
    auto opened = OpenRegularFile(path);
    EXPECT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument) << opened.status();
    return std::string(opened.status().message());
  }

  std::string dir_;
};

TEST_F(RegularFileTest, OpensARegularFileBlocking) {
  const std::string path = dir_ + "/model.safetensors";
  ASSERT_EQ(::close(::open(path.c_str(), O_CREAT | O_WRONLY, 0600)), 0);
  auto opened = OpenRegularFile(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const int flags = ::fcntl(opened->get(), F_GETFL);
  EXPECT_EQ(flags & O_NONBLOCK, 0);
  EXPECT_EQ(flags & O_ACCMODE, O_RDONLY);
  EXPECT_NE(::fcntl(opened->get(), F_GETFD) & FD_CLOEXEC, 0);
}

// A FIFO without a writer: a plain open() would wait for one.
TEST_F(RegularFileTest, RefusesAFifoAtOnce) {
  const std::string path = dir_ + "/fifo.safetensors";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const absl::Time start = absl::Now();
  EXPECT_EQ(Refusal(path), path + " is a FIFO, not a regular file");
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST_F(RegularFileTest, RefusesASocketADeviceAndADirectoryNamingWhatEachIs) {
  const std::string socket_path = dir_ + "/socket.safetensors";
  UniqueFd listening(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(listening.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)),
            0);
  EXPECT_THAT(Refusal(socket_path), HasSubstr("is a socket, not a regular file"));
  EXPECT_THAT(Refusal("/dev/null"), HasSubstr("/dev/null is a character device"));
  EXPECT_THAT(Refusal(dir_), HasSubstr("is a directory"));
}

TEST_F(RegularFileTest, AMissingFileIsNotFoundNamingIt) {
  auto opened = OpenRegularFile(dir_ + "/none.safetensors");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kNotFound) << opened.status();
  EXPECT_THAT(std::string(opened.status().message()), HasSubstr("none.safetensors"));
}

}  // namespace
}  // namespace blockswap
