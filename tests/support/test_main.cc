// The main of every test binary: runs a child role when spawned as one
// (child_process.h), the GoogleTest suite otherwise.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/support/child_process.h"

int main(int argc, char** argv) {
  // The host backend's lifetime checks abort at a breach in every test
  // process, and in every daemon and role it spawns (they inherit it), so
  // that no test passes over one (shared/backend/host_lifetime.h). A test
  // that breaks a rule on purpose sets "report" for itself.
  ::setenv("BLOCKSWAP_HOST_LIFETIME_CHECKS", "abort", /*overwrite=*/0);
  if (int code = blockswap::testing::MaybeRunChildRole(argc, argv); code >= 0) return code;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
