#include "tests/bench/release_to_issue.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "shared/protocol/trace_log.h"

namespace blockswap::bench {
namespace {

// One copy: a generation of a slot of a ring (ring ids are unique per
// daemon, so this names one copy across all devices).
using CopyKey = std::tuple<uint64_t, uint32_t, uint32_t>;

CopyKey KeyOf(const v1::TraceEvent& event) {
  return {event.ring_id(), event.slot(), event.generation()};
}

}  // namespace

std::vector<double> ReleaseToIssueMicros(const v1::TraceReply& reply) {
  std::vector<double> micros;
  for (const v1::TraceDevice& device : reply.devices()) {
    // The daemon merges its trace rings by time, and the notification's time
    // is the client's (when free[s] completed), which may precede events the
    // daemon recorded earlier: pair by key, not by position.
    absl::flat_hash_map<CopyKey, uint64_t> issued_ns;
    for (const v1::TraceEvent& event : device.events()) {
      if (event.kind() == static_cast<uint32_t>(TraceKind::kCopyIssued)) {
        issued_ns.emplace(KeyOf(event), event.time_ns());
      }
    }
    for (const v1::TraceEvent& event : device.events()) {
      if (event.kind() != static_cast<uint32_t>(TraceKind::kReleaseNotified)) continue;
      auto issued = issued_ns.find(KeyOf(event));
      if (issued == issued_ns.end()) continue;  // issued after the trace was read
      micros.push_back(
          (static_cast<double>(issued->second) - static_cast<double>(event.time_ns())) / 1e3);
    }
  }
  return micros;
}

double Percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(fraction * static_cast<double>(values.size() - 1))];
}

}  // namespace blockswap::bench
