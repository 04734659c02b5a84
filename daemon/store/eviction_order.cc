#include "daemon/store/eviction_order.h"

namespace blockswap::daemon {

void EvictionOrder::Touch(absl::string_view id) {
  auto it = last_use_.find(id);
  if (it == last_use_.end()) it = last_use_.emplace(std::string(id), 0).first;
  it->second = ++clock_;
}

void EvictionOrder::Forget(absl::string_view id) {
  if (auto it = last_use_.find(id); it != last_use_.end()) last_use_.erase(it);
}

std::string EvictionOrder::First(const std::vector<Candidate>& candidates) const {
  const Candidate* first = nullptr;
  uint64_t oldest = 0;
  for (const Candidate& candidate : candidates) {
    auto use = last_use_.find(candidate.id);
    const uint64_t tick = use == last_use_.end() ? 0 : use->second;
    if (first == nullptr || candidate.weight > first->weight ||
        (candidate.weight == first->weight && tick < oldest)) {
      first = &candidate;
      oldest = tick;
    }
  }
  return first == nullptr ? std::string() : first->id;
}

}  // namespace blockswap::daemon
