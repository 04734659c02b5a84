// CLOCK_MONOTONIC in nanoseconds: one clock for every process of the host, so
// that the client's and the daemon's trace events and a stream's measured
// idle times line up on one time axis.
#ifndef BLOCKSWAP_SHARED_BASE_MONOTONIC_CLOCK_H_
#define BLOCKSWAP_SHARED_BASE_MONOTONIC_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace blockswap {

inline uint64_t MonotonicNanos() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_MONOTONIC_CLOCK_H_
