// DeviceTraceLog: what a device worker keeps for Admin.Trace, its own
// events (accepted, release notified, copy ready/issued/done, filled,
// rejected) and the client traces of the rings it has freed.
//
// The events go to a TraceBuffer in the daemon's memory, written by the
// worker thread alone and read without a lock (trace_log.h). A ring's
// client trace lives in the ring's memory, so it is read when the ring is
// freed and kept here, the newest `freed_rings` of them; the traces of the
// rings still held are read from their rings (ValidClientTrace).
//
// Thread-safe: Record from one thread at a time (the worker's), the rest
// from any thread.
#ifndef BLOCKSWAP_DAEMON_DEVICE_DEVICE_TRACE_H_
#define BLOCKSWAP_DAEMON_DEVICE_DEVICE_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "shared/protocol/trace_log.h"

namespace blockswap::daemon {

// Who a ring's client trace belongs to, kept after the session ends.
struct RingOwner {
  uint32_t pid = 0;
  std::string client_name;
  uint32_t uid = 0;  // whose trace it is (Admin.Trace shows it to that uid)
};

// One ring's client trace as the daemon read it (validated).
struct RingTrace {
  uint64_t ring_id = 0;
  uint64_t session_id = 0;
  RingOwner owner;
  bool retired = false;  // read when the ring was freed
  std::vector<TraceEvent> events;
  uint64_t lost = 0;
  uint64_t invalid = 0;  // entries that are not the client's kinds, ring or slots
};

// What a worker holds for Admin.Trace: its own events, oldest first, and
// every ring's client trace.
struct DeviceTrace {
  std::vector<TraceEvent> events;
  uint64_t lost = 0;
  uint64_t retired_rings_dropped = 0;
  std::vector<RingTrace> rings;
};

// Events each device worker keeps (about 10k loads) and client traces of
// freed rings it keeps (the newest).
inline constexpr uint32_t kDeviceTraceCapacity = 49152;
inline constexpr size_t kRetiredRingTraces = 128;

// `read`, what the client of ring `ring_id` (of `slot_count` slots) wrote
// to its trace, less what could not be its own events: the client writes
// that memory, so an entry of another kind, ring or slot is counted as
// invalid and left out.
RingTrace ValidClientTrace(uint64_t ring_id, uint64_t session_id, RingOwner owner,
                           uint32_t slot_count, TraceSnapshot read);

class DeviceTraceLog {
 public:
  explicit DeviceTraceLog(uint32_t capacity = kDeviceTraceCapacity,
                          size_t freed_rings = kRetiredRingTraces);

  // One writer at a time: the worker thread.
  void Record(const TraceEvent& event) { events_.ring().Record(event); }

  // Keeps the client trace of a ring just freed (marked retired), dropping
  // the oldest kept beyond `freed_rings`.
  void KeepFreedRing(RingTrace trace) ABSL_LOCKS_EXCLUDED(mu_);

  // The events with time_ns >= since_ns held now, in time order (the worker
  // takes issue, fill and notification times before it records them), and
  // how many were lost. Never waits for the writer.
  DeviceTrace ReadEvents(uint64_t since_ns) const;
  // Appends the kept traces of freed rings to out.rings, cut to
  // time_ns >= since_ns, and sets how many were dropped.
  void ReadFreedRings(uint64_t since_ns, DeviceTrace& out) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  TraceBuffer events_;
  const size_t freed_rings_;
  mutable absl::Mutex mu_;
  std::deque<RingTrace> freed_ ABSL_GUARDED_BY(mu_);  // oldest first
  uint64_t freed_dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_DEVICE_TRACE_H_
