// SayOnce: one line on stderr, "blockswap: <message>", the first time in this
// process that its flag is raised: what a trainer's log needs once (which
// daemon, which copy path, why it stages), not once per connection, ring or
// load.
#ifndef BLOCKSWAP_CLIENT_CORE_SAY_ONCE_H_
#define BLOCKSWAP_CLIENT_CORE_SAY_ONCE_H_

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/strings/string_view.h"

namespace blockswap::client {

// `said`: a function-local static of the caller's, one per kind of line.
inline void SayOnce(std::atomic<bool>& said, absl::string_view message) {
  if (said.exchange(true)) return;
  std::fprintf(stderr, "blockswap: %s\n", std::string(message).c_str());
}

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_SAY_ONCE_H_
