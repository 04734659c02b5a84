#include "daemon/device/device_trace.h"

#include <algorithm>
#include <utility>

namespace blockswap::daemon {

RingTrace ValidClientTrace(uint64_t ring_id, uint64_t session_id, RingOwner owner,
                           uint32_t slot_count, TraceSnapshot read) {
  RingTrace out;
  out.ring_id = ring_id;
  out.session_id = session_id;
  out.owner = std::move(owner);
  out.lost = read.lost;
  for (const TraceEvent& event : read.events) {
    if (!IsClientTraceKind(static_cast<uint16_t>(event.kind)) || event.ring_id != ring_id ||
        event.slot >= slot_count) {
      ++out.invalid;
      continue;
    }
    out.events.push_back(event);
  }
  return out;
}

DeviceTraceLog::DeviceTraceLog(uint32_t capacity, size_t freed_rings)
    : events_(capacity), freed_rings_(freed_rings) {}

void DeviceTraceLog::KeepFreedRing(RingTrace trace) {
  trace.retired = true;
  absl::MutexLock lock(&mu_);
  freed_.push_back(std::move(trace));
  if (freed_.size() > freed_rings_) {
    freed_.pop_front();
    ++freed_dropped_;
  }
}

DeviceTrace DeviceTraceLog::ReadEvents(uint64_t since_ns) const {
  DeviceTrace out;
  TraceSnapshot own = events_.ring().Read(since_ns);
  out.lost = own.lost;
  out.events = std::move(own.events);
  std::stable_sort(out.events.begin(), out.events.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.time_ns < b.time_ns; });
  return out;
}

void DeviceTraceLog::ReadFreedRings(uint64_t since_ns, DeviceTrace& out) const {
  absl::MutexLock lock(&mu_);
  for (const RingTrace& ring : freed_) {
    RingTrace copy = ring;
    // As TraceLog::Read: what a ring lost is older than all it held, so a
    // ring that reaches back to the window lost nothing of it.
    if (since_ns > 0 && !copy.events.empty() && copy.events.front().time_ns <= since_ns) {
      copy.lost = 0;
    }
    std::erase_if(copy.events, [&](const TraceEvent& e) { return e.time_ns < since_ns; });
    out.rings.push_back(std::move(copy));
  }
  out.retired_rings_dropped = freed_dropped_;
}

}  // namespace blockswap::daemon
