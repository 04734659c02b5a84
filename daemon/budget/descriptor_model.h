// Every descriptor blockswapd keeps open on a client's behalf, derived from
// the parts of what the client holds, in one place: the quota charges
// (SessionManager charges max_descriptors_per_uid with these), the per-uid
// share "auto" resolves to, and the start check (blockswapd --check-config).
// A part that changes (a ring's memory, a connection's relay) changes here
// and nowhere else.
//
// Counted are the descriptors held while the thing exists. Those held for a
// moment while something is sent (a ring's export, a batch of a model's
// masters, a registration's block files) come out of kDescriptorReserve,
// which CheckDescriptorHeadroom keeps free on the bulk paths.
#ifndef BLOCKSWAP_DAEMON_BUDGET_DESCRIPTOR_MODEL_H_
#define BLOCKSWAP_DAEMON_BUDGET_DESCRIPTOR_MODEL_H_

#include <cstdint>

namespace blockswap::daemon {

// Descriptors blockswapd keeps free beyond what its uids may hold, so that
// another user's attach, model open (one batch of 250 at a time), ring and
// the descriptors in flight while they are sent always find some.
inline constexpr uint64_t kDescriptorReserve = 1024;

// A gRPC connection: the client's socket (read by the ConnectionRelay), the
// relay's and gRPC's ends of the socket pair between them, the listener's
// duplicate of gRPC's end (kept until the hang-up, so that its number is
// not reused under the watch) and the peer's pidfd (kept with the peer in
// the registry). The listener bounds them by max_connections_per_uid.
constexpr uint64_t DescriptorsOfConnection() { return 5; }

// A session: the duplicate of its process's pidfd that the ProcessWatcher watches,
// and its side channel's socket. (The pidfd it was duplicated from is its
// connection's.)
constexpr uint64_t DescriptorsOfSession() { return 2; }

// Who copies into a ring.
enum class RingCopier {
  // The daemon: it allocates the ring and exports every part of it.
  kDaemon,
  // The trainer: the ring is the trainer's own memory, made without asking
  // the daemon, which holds nothing for it (the masters it copies from are
  // the model's, sent when the model is opened).
  kTrainer,
};

// A ring the daemon copies into holds, one descriptor each: its memory (the
// host backend's memfd; on CUDA a shareable allocation, which the stand-in
// driver backs with a memfd and the real one may too: counted, as the
// strictest rule), the daemon's and the client's halves of its control
// block (memfds), and its ready words (a memfd, where the device has stream
// memory operations: counted on every device). Not its slot count: no
// event or other per-slot object crosses processes.
constexpr uint64_t DescriptorsOfRing(RingCopier copier) {
  return copier == RingCopier::kTrainer ? 0 : 1 + 2 + 1;
}
// What a ring's export holds until the client has it: a descriptor of each
// of its four parts and the device doorbell's two. Out of the reserve.
constexpr uint64_t DescriptorsToSendRing() { return 4 + 2; }

// An upload between BeginUpload and CommitUpload: its staging memfd.
constexpr uint64_t DescriptorsOfUpload() { return 1; }
// A file offered on a side channel and parked until RegisterFile.
constexpr uint64_t DescriptorsOfFileOffer() { return 1; }
// A model: none. A sealed master keeps no descriptor; opening a model sends
// its masters in batches, each opened just before it is sent (out of the
// reserve, checked by CheckDescriptorHeadroom).
constexpr uint64_t DescriptorsOfModel() { return 0; }

// The per-uid quotas that bound what one uid holds in descriptors
// (0: unlimited, as in the config).
struct UidDescriptorQuotas {
  uint64_t connections = 0;  // max_connections_per_uid
  uint64_t sessions = 0;     // max_sessions_per_uid
  uint64_t rings = 0;        // max_rings_per_uid
  uint64_t file_offers = 0;  // max_file_offers_per_uid
  uint64_t descriptors = 0;  // max_descriptors_per_uid, resolved
};

// What one uid may hold in the daemon's descriptors, all its processes
// together: its connections, and what max_descriptors_per_uid bounds
// (sessions, rings, uploads, file offers) or, where that is unlimited, what
// the count quotas let those hold (uploads are then bounded by none).
// UINT64_MAX when a quota it needs is unlimited.
uint64_t DescriptorsOneUidMayHold(const UidDescriptorQuotas& quotas);

// The least max_descriptors_per_uid = "auto" resolves to: one session with
// a ring on each of two devices, so that a daemon whose RLIMIT_NOFILE is too
// small for its quotas still serves a trainer (the start check says what to
// raise).
constexpr uint64_t kMinimumDescriptorsPerUid =
    DescriptorsOfSession() + 2 * DescriptorsOfRing(RingCopier::kDaemon);

// What max_descriptors_per_uid = "auto" resolves to: of the descriptors
// RLIMIT_NOFILE (`open_files`, 0: unlimited) leaves beyond the daemon's own
// (`daemon_open`) and kDescriptorReserve, half, less what the uid's
// connections may hold (max_connections_per_uid of them), and at least
// kMinimumDescriptorsPerUid. Half, so that one uid at its limit leaves the
// other half, and the reserve, to everyone else. 0 (unlimited) when
// RLIMIT_NOFILE is.
uint64_t AutoMaxDescriptorsPerUid(uint64_t open_files, uint64_t daemon_open,
                                  uint64_t max_connections_per_uid);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_BUDGET_DESCRIPTOR_MODEL_H_
