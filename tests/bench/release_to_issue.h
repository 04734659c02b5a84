// P4's release-to-issue latency, from the daemon's trace (Admin.Trace): how
// long a copy that waited for its slot's `free` still took to be queued once
// the client said `free` had completed (TraceKind::kReleaseNotified, then
// kCopyIssued for the same ring, slot and generation). This is the daemon's
// share of a pipelined pass's stall that an in-process copier does not pay.
#ifndef BLOCKSWAP_TESTS_BENCH_RELEASE_TO_ISSUE_H_
#define BLOCKSWAP_TESTS_BENCH_RELEASE_TO_ISSUE_H_

#include <vector>

#include "blockswap/v1/blockswap.pb.h"

namespace blockswap::bench {

// issued.time_ns - notified.time_ns in µs, one per copy of `reply`'s device
// traces that has both events, in the order of the notifications. Negative
// values are kept as measured (a clock or trace bug must show, not vanish).
std::vector<double> ReleaseToIssueMicros(const v1::TraceReply& reply);

// The `fraction` (0..1) percentile of `values` by nearest rank below;
// `values` must not be empty.
double Percentile(std::vector<double> values, double fraction);

}  // namespace blockswap::bench

#endif  // BLOCKSWAP_TESTS_BENCH_RELEASE_TO_ISSUE_H_
