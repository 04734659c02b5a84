// Runs independent pieces of slow work (hashing, copying) on a few threads.
#ifndef BLOCKSWAP_DAEMON_STORE_PARALLEL_FOR_H_
#define BLOCKSWAP_DAEMON_STORE_PARALLEL_FOR_H_

#include <cstddef>
#include <functional>

#include "absl/status/status.h"

namespace blockswap::daemon {

// Hashing and copying run on up to this many threads, one piece at a time
// each: a 24 GB model hashes in seconds instead of tens of seconds.
inline constexpr unsigned kMaxWorkerThreads = 8;

// Runs fn(0) .. fn(count - 1) on up to min(cores, kMaxWorkerThreads) threads
// (the caller's included), each taking the next index in order, and returns
// the error of the lowest index that failed (so the message does not depend
// on scheduling).
absl::Status ParallelFor(size_t count, const std::function<absl::Status(size_t)>& fn);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_PARALLEL_FOR_H_
