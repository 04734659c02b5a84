// The host backend enforces CUDA's IPC lifetime rules (host_lifetime.h):
// what is undefined on a GPU is a reported breach, or an error, here.
#include "shared/backend/host_lifetime.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "shared/backend/backend.h"
#include "shared/os/fd_passing.h"
#include "tests/support/child_process.h"

namespace blockswap {
namespace {

using host_lifetime::LifetimeViolationCount;

constexpr int kChildSocket = 3;

// Imports the memory whose descriptor arrives on its socket, says so, then
// either exits at once without closing it (`--exit`: a process's imports end
// with it) or holds it until killed.
int RunImporter(const std::vector<std::string>& args) {
  auto backend = OpenHostBackend({.device_count = 1});
  UniqueFd socket(kChildSocket);
  auto message = ReceiveWithFds(socket);
  if (!message.ok() || message->fds.size() != 1) return 2;
  auto memory =
      backend->devices()[0]->ImportMemory({message->payload, std::move(message->fds[0])}, 4096);
  if (!memory.ok()) return 3;
  if (!SendWithFds(socket, "imported", {}).ok()) return 2;
  const bool exit_holding = !args.empty() && args[0] == "--exit";
  if (exit_holding) ::_exit(0);
  while (true) absl::SleepFor(absl::Seconds(1));
}
BLOCKSWAP_CHILD_ROLE("importer", RunImporter);

// These tests break the rules on purpose: the breaches are reported, not
// aborted on (the suite's default, tests/support/test_main.cc).
class HostLifetimeTest : public ::testing::Test {
 protected:
  void SetUp() override { ::setenv("BLOCKSWAP_HOST_LIFETIME_CHECKS", "report", 1); }
  void TearDown() override { ::setenv("BLOCKSWAP_HOST_LIFETIME_CHECKS", "abort", 1); }

  Device& device() { return *backend_->devices()[0]; }

  // An importer process of `memory`, once it has imported it.
  testing::ChildProcess SpawnImporter(const DeviceMemory& memory, std::vector<std::string> args) {
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    UniqueFd mine(pair[0]), theirs(pair[1]);
    auto child = testing::ChildProcess::Spawn(
        "importer", {.args = std::move(args), .inherit = {{theirs.get(), kChildSocket}}});
    EXPECT_TRUE(child.ok()) << child.status();
    theirs.Reset();
    ExportedHandle handle = memory.Export().value();
    EXPECT_TRUE(SendWithFds(mine, handle.blob, {handle.fd.get()}).ok());
    auto reply = ReceiveWithFds(mine);
    EXPECT_TRUE(reply.ok() && reply->payload == "imported") << "the importer could not import";
    return *std::move(child);
  }

  std::unique_ptr<Backend> backend_ = OpenHostBackend({.device_count = 1});
};

TEST_F(HostLifetimeTest, ImportsClosedBeforeTheExporterFreesBreakNoRule) {
  const uint64_t before = LifetimeViolationCount();
  {
    auto memory = device().Allocate(4096).value();
    auto imported_memory = device().ImportMemory(memory->Export().value(), 4096).value();
    // Destroyed in reverse order: the imports first.
  }
  EXPECT_EQ(LifetimeViolationCount(), before);
}

TEST_F(HostLifetimeTest, FreeingMemoryThatIsStillMappedIsReportedAndPoisonsTheMapping) {
  auto memory = device().Allocate(4096).value();
  auto imported = device().ImportMemory(memory->Export().value(), 4096).value();
  std::memset(memory->data(), 0x11, 4096);
  const uint64_t before = LifetimeViolationCount();
  memory.reset();
  EXPECT_EQ(LifetimeViolationCount(), before + 1);
  // The importer reads garbage, as it may on a GPU, not the bytes it had.
  EXPECT_EQ(imported->data()[0], std::byte{0xdb});
  EXPECT_EQ(imported->data()[4095], std::byte{0xdb});
}

TEST_F(HostLifetimeTest, AnotherProcessStillMappingIsReportedOneThatExitedIsNot) {
  auto held = device().Allocate(4096).value();
  auto left = device().Allocate(4096).value();
  testing::ChildProcess holder = SpawnImporter(*held, {});
  testing::ChildProcess leaver = SpawnImporter(*left, {"--exit"});
  ASSERT_TRUE(leaver.Wait(absl::Seconds(10)).ok());

  const uint64_t before = LifetimeViolationCount();
  left.reset();
  EXPECT_EQ(LifetimeViolationCount(), before) << "an exited importer holds nothing";
  held.reset();
  EXPECT_EQ(LifetimeViolationCount(), before + 1) << "a live importer's mapping was freed";
  holder.Kill(SIGKILL);
  ASSERT_TRUE(holder.Wait(absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace blockswap
