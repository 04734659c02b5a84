#include "daemon/device/copy_scheduler.h"

#include <algorithm>

namespace blockswap::daemon {

uint32_t CopyWeightOf(const CopyWeights& weights, uint32_t uid) {
  auto it = weights.find(uid);
  return it == weights.end() ? kDefaultCopyWeight : it->second;
}

void CopyScheduler::AddRing(uint64_t ring_id, uint32_t weight) {
  RingShare& share = rings_[ring_id];
  share.weight = std::clamp<uint32_t>(weight, 1, kMaxCopyWeight);
  // A new ring starts level with the copy issued last: no credit, no debt.
  share.finish = virtual_now_;
}

void CopyScheduler::RemoveRing(uint64_t ring_id) { rings_.erase(ring_id); }

size_t CopyScheduler::Pick(absl::Span<const uint64_t> ready_rings) {
  size_t best = 0;
  const RingShare* best_share = nullptr;
  for (size_t i = 0; i < ready_rings.size(); ++i) {
    RingShare& share = rings_[ready_rings[i]];  // default weight if not added
    // A ring always ready since its last copy is at or past the copy issued
    // last; one back from idle is brought level with it (no banked credit).
    share.finish = std::max(share.finish, virtual_now_);
    if (best_share == nullptr || share.finish < best_share->finish ||
        (share.finish == best_share->finish && share.last_turn < best_share->last_turn)) {
      best = i;
      best_share = &share;
    }
  }
  return best;
}

void CopyScheduler::Issued(uint64_t ring_id) {
  RingShare& share = rings_[ring_id];
  virtual_now_ = share.finish;
  share.finish += kCopyCost / share.weight;
  share.last_turn = ++turn_;
}

}  // namespace blockswap::daemon
