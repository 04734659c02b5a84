// The daemon's side of file offers (shared/protocol/side_channel_wire.h): descriptors
// of files a client opened and wants registered, sent on its side channel.
#ifndef BLOCKSWAP_DAEMON_SESSION_FILE_OFFERS_H_
#define BLOCKSWAP_DAEMON_SESSION_FILE_OFFERS_H_

#include <cstdint>
#include <map>

#include "absl/status/status.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

// A session keeps at most this many offers not yet named by a call.
inline constexpr size_t kMaxPendingFileOffers = 4096;

// Reads every offer waiting on the (non-blocking) side channel into `offers`,
// never blocking. INVALID_ARGUMENT for a malformed message (wrong magic, not
// exactly one descriptor, an offer id used twice) or too many offers pending;
// UNAVAILABLE when the client closed the channel. After an error the channel
// should be dropped: its message boundaries may be lost.
absl::Status DrainFileOffers(const UniqueFd& side_channel, std::map<uint64_t, UniqueFd>* offers);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_FILE_OFFERS_H_
