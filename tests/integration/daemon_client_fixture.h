// The fixture of the daemon/client integration tests (daemon_client_test.cc,
// reliability_test.cc): a real blockswapd on the host backend and client
// roles (client_roles.cc, rogue_roles.cc), both with jitter in the host
// backend's streams unless a test sets BLOCKSWAP_HOST_JITTER_US itself.
#ifndef BLOCKSWAP_TESTS_INTEGRATION_DAEMON_CLIENT_FIXTURE_H_
#define BLOCKSWAP_TESTS_INTEGRATION_DAEMON_CLIENT_FIXTURE_H_

#include "tests/support/daemon_roles_test.h"

namespace blockswap::testing {

inline constexpr char kJitterUs[] = "100";

class DaemonClientTest : public DaemonRolesTest {
 protected:
  DaemonClientTest()
      : DaemonRolesTest({{"BLOCKSWAP_HOST_JITTER_US", kJitterUs}},
                        {{"BLOCKSWAP_HOST_JITTER_US", kJitterUs}}) {}
};

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_INTEGRATION_DAEMON_CLIENT_FIXTURE_H_
