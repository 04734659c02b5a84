// OpenDescriptors leaves out what a process shares with a sanitizer's
// symbolizer, and nothing else: a pipe held by a child running a program
// named llvm-symbolizer is left out, the same pipe held by a child running
// any other program is counted.
#include "tests/support/open_descriptors.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shared/base/unique_fd.h"
#include "tests/support/child_process.h"

namespace blockswap::testing {
namespace {

// Whether this process's descriptors, as OpenDescriptors lists them, include
// a pipe it shares with a child running /bin/sleep under the name `program`.
bool PipeSharedWithChildIsListed(const std::string& program) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/open-descriptors-", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + program;
  std::filesystem::copy_file("/bin/sleep", path, std::filesystem::copy_options::overwrite_existing);
  int ends[2];
  EXPECT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  UniqueFd read_end(ends[0]), write_end(ends[1]);
  absl::StatusOr<ChildProcess> child =
      ChildProcess::SpawnProgram(path, {.args = {"60"}, .inherit = {{read_end.get(), 3}}});
  EXPECT_TRUE(child.ok()) << child.status();
  const std::string pipe = AllOpenDescriptors(::getpid()).at(read_end.get());
  bool listed = false;
  for (const auto& [fd, target] : OpenDescriptors(::getpid())) listed |= target == pipe;
  if (child.ok()) child->Kill(SIGKILL);
  std::filesystem::remove_all(dir);
  return listed;
}

TEST(OpenDescriptorsTest, APipeSharedWithASymbolizerIsTheSanitizersNotTheProcesss) {
  EXPECT_FALSE(PipeSharedWithChildIsListed("llvm-symbolizer"));
}

TEST(OpenDescriptorsTest, APipeSharedWithAnyOtherChildIsCounted) {
  EXPECT_TRUE(PipeSharedWithChildIsListed("sleep-holding-a-pipe"));
}

}  // namespace
}  // namespace blockswap::testing
