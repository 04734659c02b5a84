#include "daemon/store/registrants.h"

#include <algorithm>
#include <utility>

namespace blockswap::daemon {

std::vector<Registrant> Registrants::List() const {
  absl::MutexLock lock(&mu_);
  return list_;
}

std::vector<Registrant> Registrants::With(const Registrant& registrant) const {
  absl::MutexLock lock(&mu_);
  if (std::find(list_.begin(), list_.end(), registrant) != list_.end()) return {};
  const auto same_user = std::count_if(list_.begin(), list_.end(), [&](const Registrant& r) {
    return r.uid == registrant.uid && r.gid == registrant.gid;
  });
  if (static_cast<size_t>(same_user) >= kMaxSourcesPerRegistrant) return {};
  std::vector<Registrant> with = list_;
  with.push_back(registrant);
  return with;
}

std::vector<Registrant> Registrants::Without(uid_t uid) const {
  absl::MutexLock lock(&mu_);
  std::vector<Registrant> without;
  for (const Registrant& r : list_) {
    if (r.uid != uid) without.push_back(r);
  }
  return without;
}

void Registrants::Replace(std::vector<Registrant> list) {
  absl::MutexLock lock(&mu_);
  list_ = std::move(list);
}

}  // namespace blockswap::daemon
