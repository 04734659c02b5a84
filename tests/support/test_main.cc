// The main of every test binary: runs a child role when spawned as one
// (child_process.h), the GoogleTest suite otherwise.
#include <gtest/gtest.h>

#include "tests/support/child_process.h"

int main(int argc, char** argv) {
  if (int code = blockswap::testing::MaybeRunChildRole(argc, argv); code >= 0) return code;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
