// For a test that needs one of the product's test switches
// (shared/base/test_hooks.h): in a build without them the product reads no
// such switch, so the test could only fail or prove nothing; it skips, naming
// the switch and the option that compiles it in.
#ifndef BLOCKSWAP_TESTS_SUPPORT_SKIP_WITHOUT_TEST_HOOKS_H_
#define BLOCKSWAP_TESTS_SUPPORT_SKIP_WITHOUT_TEST_HOOKS_H_

#include <gtest/gtest.h>

#include "shared/base/test_hooks.h"

// BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS("BLOCKSWAP_HOST_COPY_DELAY_US"); as the
// test's first statement.
#define BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS(switch_name)                                  \
  if (::blockswap::kTestHooks) {                                                        \
  } else                                                                                \
    GTEST_SKIP() << "needs " << (switch_name)                                           \
                 << ", which only a build with test hooks has (-DBLOCKSWAP_TEST_HOOKS=ON, as " \
                    "tests/run.sh configures)"

#endif  // BLOCKSWAP_TESTS_SUPPORT_SKIP_WITHOUT_TEST_HOOKS_H_
