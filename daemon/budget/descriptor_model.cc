#include "daemon/budget/descriptor_model.h"

#include <algorithm>

namespace blockswap::daemon {
namespace {

// a * b, or UINT64_MAX where either is unlimited (0) or it overflows.
uint64_t Times(uint64_t count, uint64_t each) {
  if (count == 0) return UINT64_MAX;
  if (each != 0 && count > UINT64_MAX / each) return UINT64_MAX;
  return count * each;
}

uint64_t Plus(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

uint64_t DescriptorsOneUidMayHold(const UidDescriptorQuotas& quotas) {
  const uint64_t connections = Times(quotas.connections, DescriptorsOfConnection());
  if (quotas.descriptors != 0) return Plus(connections, quotas.descriptors);
  uint64_t held = Times(quotas.sessions, DescriptorsOfSession());
  held = Plus(held, Times(quotas.rings, DescriptorsOfRing(RingCopier::kDaemon)));
  held = Plus(held, Times(quotas.file_offers, DescriptorsOfFileOffer()));
  return Plus(connections, held);
}

uint64_t AutoMaxDescriptorsPerUid(uint64_t open_files, uint64_t daemon_open,
                                  uint64_t max_connections_per_uid) {
  if (open_files == 0) return 0;
  const uint64_t kept = Plus(daemon_open, kDescriptorReserve);
  const uint64_t half = open_files > kept ? (open_files - kept) / 2 : 0;
  const uint64_t connections = max_connections_per_uid * DescriptorsOfConnection();
  if (half < Plus(connections, kMinimumDescriptorsPerUid)) return kMinimumDescriptorsPerUid;
  return half - connections;
}

}  // namespace blockswap::daemon
