// Peers for the session tests: an allowed connection of process `pid` of
// `uid` (its primary group the same number), with no pidfd. Header-only.
#ifndef BLOCKSWAP_TESTS_SUPPORT_TEST_PEER_H_
#define BLOCKSWAP_TESTS_SUPPORT_TEST_PEER_H_

#include <sys/types.h>

#include "daemon/session/peer.h"

namespace blockswap::testing {

inline daemon::Peer TestPeer(pid_t pid, uid_t uid) {
  daemon::Peer peer;
  peer.pid = pid;
  peer.uid = uid;
  peer.gid = uid;
  peer.allowed = true;
  return peer;
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_TEST_PEER_H_
