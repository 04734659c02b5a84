#include "shared/build_info/build_info.h"

#include <gtest/gtest.h>

#include "blockswap/blockswap.h"

namespace blockswap {
namespace {

TEST(VersionTextTest, PrintsEveryFieldOnItsOwnLine) {
  BuildInfo info{.version = "1.2.3",
                 .git_revision = "abc123def456-dirty",
                 .abi_version = 7,
                 .cuda_toolkit = "12.4.131",
                 .backends = {"host", "cuda"}};
  EXPECT_EQ(VersionText("blockswapd", info),
            "blockswapd 1.2.3\n"
            "git revision: abc123def456-dirty\n"
            "C ABI version: 7\n"
            "CUDA toolkit (headers): 12.4.131\n"
            "backends: host, cuda");
}

TEST(VersionTextTest, SaysWhenBuiltWithoutCuda) {
  BuildInfo info{.version = "1.2.3",
                 .git_revision = "unknown",
                 .abi_version = 4,
                 .cuda_toolkit = "",
                 .backends = {"host"}};
  EXPECT_EQ(VersionText("blockswapctl", info),
            "blockswapctl 1.2.3\n"
            "git revision: unknown\n"
            "C ABI version: 4\n"
            "CUDA toolkit (headers): built without CUDA\n"
            "backends: host");
}

// CMake reads the ABI version out of the public header; this catches a
// header whose #define the regex no longer matches.
TEST(ThisBuildTest, AbiVersionIsThePublicHeaders) {
  EXPECT_EQ(ThisBuild().abi_version, BS_ABI_VERSION);
}

TEST(ThisBuildTest, HasAVersionARevisionAndTheHostBackend) {
  EXPECT_FALSE(ThisBuild().version.empty());
  EXPECT_FALSE(ThisBuild().git_revision.empty());
  ASSERT_FALSE(ThisBuild().backends.empty());
  EXPECT_EQ(ThisBuild().backends.front(), "host");
  const bool has_cuda_backend = ThisBuild().backends.size() > 1;
  EXPECT_EQ(has_cuda_backend, !ThisBuild().cuda_toolkit.empty());
}

}  // namespace
}  // namespace blockswap
