// The two halves of the load protocol as child processes, talking over a
// SOCK_SEQPACKET socket at descriptor 3 (kPeerSocketFd):
//   ring-producer  the daemon's side: creates a ring on the first device of
//                  its backend, sends it (RingDescriptor + SCM_RIGHTS), then
//                  serves load requests through RingProducer.
//   ring-consumer  the client's side: imports the ring and streams
//                  generations of pseudo-random blocks through RingConsumer,
//                  verifying every byte on its stream after each load.
// Both run the real protocol code (shared/protocol/load_protocol.h); a test may pass
// --skip=<protocol step> to either to break one step on purpose.
#ifndef BLOCKSWAP_TESTS_SUPPORT_RING_PEERS_H_
#define BLOCKSWAP_TESTS_SUPPORT_RING_PEERS_H_

namespace blockswap::testing {

inline constexpr int kPeerSocketFd = 3;

// Exit codes of both roles.
enum PeerExit : int {
  kPeerOk = 0,
  kPeerSetupFailed = 2,
  kPeerWrongBytes = 10,     // consumer: a load delivered stale or torn bytes
  kPeerRingFailed = 11,     // a protocol error (producer rejected / status word)
  kPeerTimedOut = 12,       // consumer: a generation was never filled
  kPeerBlocked = 13,        // producer: a Submit/Poll call took too long
};

const char* PeerExitName(int code);

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_RING_PEERS_H_
