// Unguessable identifiers: session tokens and the daemon's boot id.
#ifndef BLOCKSWAP_DAEMON_SESSION_RANDOM_TOKEN_H_
#define BLOCKSWAP_DAEMON_SESSION_RANDOM_TOKEN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace blockswap::daemon {

// 128 bits from the kernel's CSPRNG (getrandom), as 32 lowercase hex digits.
absl::StatusOr<std::string> RandomToken();

// 64 random bits, never 0 (0 means "no boot id" in a status word).
absl::StatusOr<uint64_t> RandomNonZero64();

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_RANDOM_TOKEN_H_
