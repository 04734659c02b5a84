#include "shared/base/status.h"

#include <sys/resource.h>

#include <cerrno>

#include <gtest/gtest.h>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace blockswap {
namespace {

absl::StatusOr<int> Half(int value) {
  if (value % 2 != 0) return absl::InvalidArgumentError("odd");
  return value / 2;
}

absl::StatusOr<int> Quarter(int value) {
  BLOCKSWAP_ASSIGN_OR_RETURN(int half, Half(value));
  BLOCKSWAP_ASSIGN_OR_RETURN(half, Half(half));
  return half;
}

absl::Status CheckEven(int value) {
  BLOCKSWAP_RETURN_IF_ERROR(Half(value).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPassesValuesAndStopsAtTheFirstError) {
  EXPECT_EQ(Quarter(8).value(), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quarter(3).status().message(), "odd");
}

TEST(StatusMacros, ReturnIfErrorReturnsTheError) {
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ErrnoStatus, MapsErrnoToCodeAndNamesTheContext) {
  absl::Status status = ErrnoStatus(ENOENT, "opening /x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "opening /x: No such file or directory");
  EXPECT_EQ(ErrnoStatus(ENOSPC, "x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus(EACCES, "x").code(), absl::StatusCode::kPermissionDenied);
}

// Out of descriptors names the limit reached and its value, so the message
// says what to raise.
TEST(ErrnoStatus, OutOfDescriptorsNamesTheLimitAndItsValue) {
  struct rlimit limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  absl::Status process = ErrnoStatus(EMFILE, "opening x");
  EXPECT_EQ(process.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(process.message(),
                                absl::StrCat("opening x: Too many open files (this process's "
                                             "descriptor limit, RLIMIT_NOFILE, is ",
                                             limit.rlim_cur)))
      << process;
  EXPECT_TRUE(absl::StrContains(process.message(), "LimitNOFILE=")) << process;
  absl::Status system = ErrnoStatus(ENFILE, "opening x");
  EXPECT_EQ(system.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(system.message(), "sysctl fs.file-max is ")) << system;
}

TEST(Annotate, PrefixesTheMessageAndKeepsTheCode) {
  absl::Status status = Annotate(absl::NotFoundError("no model"), "while opening ring 3");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "while opening ring 3: no model");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

TEST(Annotate, KeepsThePayloadsThatClassifyTheError) {
  absl::Status marked = absl::InternalError("driver refused");
  marked.SetPayload("type.blockswap/kind", absl::Cord("mark"));
  absl::Status status = Annotate(marked, "importing");
  ASSERT_TRUE(status.GetPayload("type.blockswap/kind").has_value());
  EXPECT_EQ(*status.GetPayload("type.blockswap/kind"), "mark");
}

}  // namespace
}  // namespace blockswap
