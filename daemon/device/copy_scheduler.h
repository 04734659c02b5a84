// CopyScheduler: the order in which a device worker issues the ready copies
// of the rings that share its copy stream.
//
// Within a ring the worker issues in request order (RingProducer::
// OldestReady: a client's request order is its wait order). Between rings
// this class picks, by start-time fair queueing over copies: each ring has a
// virtual finish tag that each issued copy advances by 1 / weight, and the
// ring with a ready copy and the smallest tag goes next, the ring served
// longest ago first on a tie. So, at equal weights, the rings with ready
// copies take one copy each per turn, and a ring's share of the copy stream
// is its weight over the weights of the rings with ready copies.
//
// Copies, not bytes: the order asked for is "one copy per ring per turn",
// and a client's block sizes differ from block to block (and from another
// client's), so fairness by bytes would let the ring with the smaller copy
// go twice in a row, and a streamer would wait behind several of a
// flooder's smaller copies. Per copy, a streamer waits for at most one copy
// of each other ring. (Within one model blocks are about the same size, so
// copies are about bytes; a client with much larger blocks gets more bytes
// per turn, which a weight can correct.) Fair queueing rather than deficit
// round robin: DRR issues a ring's whole quantum back to back, where this
// interleaves copies one by one, weighted or not.
//
// A ring that had no ready copy does not bank credit for the time it was
// idle: when it has one again, its tag is brought up to the tag of the copy
// issued last, so it gets the next turn, but not a burst of turns, and a
// ring that is always ready (a prefetcher) is never starved by one that
// was idle.
//
// The copy stream runs in order, so fairness also needs the stream not to
// hold a long queue that a ring with a new ready copy would wait behind:
// while more than one ring is served, the worker keeps at most
// kStreamDepth copies on it (the one running and two queued) and tops it up
// when the copy tracker sees one complete. One ring alone has the stream to
// itself: its copies are issued as soon as they are ready, as before.
//
// Thread-compatible: the device worker uses it under its rings mutex.
#ifndef BLOCKSWAP_DAEMON_DEVICE_COPY_SCHEDULER_H_
#define BLOCKSWAP_DAEMON_DEVICE_COPY_SCHEDULER_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>

#include "absl/types/span.h"

namespace blockswap::daemon {

// A client's weight on the copy streams, by uid (the daemon's config key
// copy_weights); a uid not listed weighs kDefaultCopyWeight.
using CopyWeights = std::map<uint32_t, uint32_t>;
inline constexpr uint32_t kDefaultCopyWeight = 1;
inline constexpr uint32_t kMaxCopyWeight = 1000;
uint32_t CopyWeightOf(const CopyWeights& weights, uint32_t uid);

class CopyScheduler {
 public:
  // Copies on the copy stream (running and queued) while it serves more
  // than one ring: the one running and two queued, so that the stream never
  // runs dry while the worker notices a completion, and a ring whose copy
  // becomes ready waits behind at most two others.
  static constexpr size_t kStreamDepth = 3;

  // `weight` >= 1 (0 counts as 1).
  void AddRing(uint64_t ring_id, uint32_t weight);
  void RemoveRing(uint64_t ring_id);
  size_t ring_count() const { return rings_.size(); }

  // The most copies the worker may keep on the copy stream now.
  size_t stream_limit() const {
    return rings_.size() > 1 ? kStreamDepth : std::numeric_limits<size_t>::max();
  }

  // Which of `ready_rings` (not empty; every ring that has a ready copy,
  // each added) issues next: an index into `ready_rings`. The worker then
  // issues that ring's oldest ready copy and calls Issued.
  size_t Pick(absl::Span<const uint64_t> ready_rings);
  // Charges `ring_id` for a copy it issued.
  void Issued(uint64_t ring_id);

 private:
  // A copy's cost at weight 1, in virtual time: exact for every weight that
  // divides it (1 to 16, and more), so that equal shares tie exactly. The
  // 64-bit tags last 2^64 / kCopyCost = 2.5e13 copies (decades).
  static constexpr uint64_t kCopyCost = 720720;  // lcm(1, ..., 16)

  struct RingShare {
    uint64_t weight = kDefaultCopyWeight;
    uint64_t finish = 0;     // virtual time after its last issued copy
    uint64_t last_turn = 0;  // turn_ when it last issued (0: never)
  };

  std::map<uint64_t, RingShare> rings_;
  uint64_t virtual_now_ = 0;  // the start tag of the copy issued last
  uint64_t turn_ = 0;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_COPY_SCHEDULER_H_
