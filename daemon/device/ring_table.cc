#include "daemon/device/ring_table.h"

#include <poll.h>

#include <algorithm>
#include <utility>

namespace blockswap::daemon {

bool RingTable::Retired::HeldForLiveOwner() {
  if (reason != RetireReason::kOwnerDetached) return false;
  pollfd pfd{owner_process != nullptr ? owner_process->get() : -1, POLLIN, 0};
  if (pfd.fd < 0 || ::poll(&pfd, 1, 0) != 0) reason = RetireReason::kOwnerExited;
  return reason == RetireReason::kOwnerDetached;
}

void RingTable::Add(std::unique_ptr<ServedRing> ring) {
  const uint64_t ring_id = ring->ring_id;
  live_[ring_id] = std::move(ring);
}

ServedRing* RingTable::Find(uint64_t ring_id) {
  auto it = live_.find(ring_id);
  return it == live_.end() ? nullptr : it->second.get();
}

bool RingTable::Retire(uint64_t ring_id, RetireReason reason,
                       std::shared_ptr<const UniqueFd> owner) {
  auto it = live_.find(ring_id);
  if (it == live_.end()) return false;
  retired_.push_back(Retired{std::move(it->second), reason, std::move(owner)});
  live_.erase(it);
  return true;
}

void RingTable::ForEachRetired(absl::FunctionRef<void(ServedRing&)> visit) {
  for (Retired& retired : retired_) visit(*retired.ring);
}

void RingTable::ForEachRetired(absl::FunctionRef<void(const ServedRing&)> visit) const {
  for (const Retired& retired : retired_) visit(*retired.ring);
}

bool RingTable::FreeRetired(absl::FunctionRef<bool(const ServedRing&)> in_flight,
                            absl::FunctionRef<void(const ServedRing&, RetireReason)> freed) {
  bool freeing = false;
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (it->HeldForLiveOwner()) {
      ++it;
    } else if (in_flight(*it->ring)) {
      freeing = true;
      ++it;
    } else {
      freed(*it->ring, it->reason);
      it = retired_.erase(it);
    }
  }
  return freeing;
}

bool RingTable::idle() const {
  return std::all_of(retired_.begin(), retired_.end(),
                     [](Retired& retired) { return retired.HeldForLiveOwner(); });
}

void RingTable::ReleaseForExit() {
  static auto* const left_to_exit = new std::vector<std::unique_ptr<ServedRing>>();
  for (auto& [id, ring] : live_) left_to_exit->push_back(std::move(ring));
  for (Retired& retired : retired_) {
    if (retired.HeldForLiveOwner()) left_to_exit->push_back(std::move(retired.ring));
  }
  live_.clear();
  retired_.clear();
}

}  // namespace blockswap::daemon
