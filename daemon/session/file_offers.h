// The daemon's side of file offers (shared/protocol/side_channel_wire.h): descriptors
// of files a client opened and wants registered, sent on its side channel.
#ifndef BLOCKSWAP_DAEMON_SESSION_FILE_OFFERS_H_
#define BLOCKSWAP_DAEMON_SESSION_FILE_OFFERS_H_

#include <cstdint>
#include <functional>
#include <map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/budget/ledger.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

// A session keeps at most this many offers not yet named by a call.
inline constexpr size_t kMaxPendingFileOffers = 4096;

// An offer waiting for the RegisterFile that names it, with its charge in
// the client's max_file_offers quotas.
struct ParkedFileOffer {
  UniqueFd file;
  Reservation charged;
};

// Reads every offer waiting on the (non-blocking) side channel into `offers`,
// never blocking, charging each with `charge` first. INVALID_ARGUMENT for a
// malformed message (wrong magic, not exactly one descriptor, an offer id
// used twice) or too many offers pending; UNAVAILABLE when the client closed
// the channel; after those the channel should be dropped: its message
// boundaries may be lost. `charge`'s error (RESOURCE_EXHAUSTED) as it is:
// the offer it refused is closed, the channel stays in step.
absl::Status DrainFileOffers(const UniqueFd& side_channel,
                             const std::function<absl::StatusOr<Reservation>()>& charge,
                             std::map<uint64_t, ParkedFileOffer>* offers);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_FILE_OFFERS_H_
