// Wire conversions for rings: a RingExport becomes a RingDescriptor message
// plus the descriptors it names (sent over SCM_RIGHTS), and back.
#ifndef BLOCKSWAP_SHARED_PROTOCOL_RING_WIRE_H_
#define BLOCKSWAP_SHARED_PROTOCOL_RING_WIRE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "blockswap/v1/blockswap.pb.h"
#include "shared/protocol/ring.h"

namespace blockswap {

struct RingOnWire {
  v1::RingDescriptor descriptor;
  std::vector<UniqueFd> fds;  // FdRef{batch, i} names fds[i]
};

// Moves the descriptors of `exported` into the result; `batch` identifies the
// SCM_RIGHTS message that will carry them.
RingOnWire RingToWire(RingExport exported, uint64_t batch);

// The inverse. Every FdRef must name a descriptor of `fds` in batch `batch`,
// each at most once; anything else is INVALID_ARGUMENT naming the field.
absl::StatusOr<RingExport> RingFromWire(const v1::RingDescriptor& descriptor,
                                        std::vector<UniqueFd> fds, uint64_t batch);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_PROTOCOL_RING_WIRE_H_
