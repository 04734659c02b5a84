#include "client/core/owner_process.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace blockswap::client {
namespace {

// Runs `body` in a forked child; its exit code (0: every check held).
template <typename Body>
int InForkedChild(Body body) {
  const pid_t child = fork();
  if (child == 0) _exit(body());
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(OwnerProcessTest, TheOwnerPassesAndAForkedChildIsToldWhoAttached) {
  const OwnerProcess owner;
  EXPECT_FALSE(owner.forked());
  EXPECT_TRUE(owner.Check("bs_ring_load").ok());
  const pid_t parent = getpid();
  EXPECT_EQ(InForkedChild([&] {
              if (!owner.forked()) return 1;
              absl::Status refused = owner.Check("bs_ring_load");
              if (refused.code() != absl::StatusCode::kFailedPrecondition) return 2;
              const std::string message(refused.message());
              if (!absl::StartsWith(message, "bs_ring_load: ")) return 3;
              if (!absl::StrContains(message, absl::StrCat("this process (pid ", getpid(),
                                                           ") was forked from pid ", parent))) {
                return 4;
              }
              // A grandchild is as forked as a child.
              return InForkedChild([&] { return owner.forked() ? 0 : 5; });
            }),
            0);
}

TEST(OwnerProcessTest, OnlyAProcessForkedFromOneThatAttachedIsRefusedANewAttach) {
  // Before any attach, a child may attach (its parent never used gRPC).
  EXPECT_EQ(InForkedChild([] { return OwnerProcess::CheckAttachAllowed().ok() ? 0 : 1; }), 0);
  OwnerProcess::NoteAttached();
  EXPECT_TRUE(OwnerProcess::CheckAttachAllowed().ok()) << "the attached process itself may";
  EXPECT_EQ(InForkedChild([] {
              absl::Status refused = OwnerProcess::CheckAttachAllowed();
              return refused.code() == absl::StatusCode::kFailedPrecondition &&
                             absl::StartsWith(refused.message(), "bs_connect: ")
                         ? 0
                         : 1;
            }),
            0);
}

}  // namespace
}  // namespace blockswap::client
