// The order in which idle models go when the masters are short of room: the
// models of the uid holding the most of what is short first, so that a
// flood's unused models go before anyone else's, and among equals the least
// recently used.
#ifndef BLOCKSWAP_DAEMON_STORE_EVICTION_ORDER_H_
#define BLOCKSWAP_DAEMON_STORE_EVICTION_ORDER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace blockswap::daemon {

// Not thread-safe: the store's mutex guards it.
class EvictionOrder {
 public:
  // A use of model `id` (found, registered): it goes after every model used
  // before it.
  void Touch(absl::string_view id);
  // `id` is gone.
  void Forget(absl::string_view id);

  // An idle model that could go, and what its owners hold of what is short
  // (blocks or bytes; the most any of its owners holds).
  struct Candidate {
    std::string id;
    uint64_t weight = 0;
  };
  // The id of the candidate to evict first; empty when there is none. A
  // model never used counts as used before all others.
  std::string First(const std::vector<Candidate>& candidates) const;

 private:
  uint64_t clock_ = 0;
  std::map<std::string, uint64_t, std::less<>> last_use_;  // the tick of each model's last use
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_EVICTION_ORDER_H_
