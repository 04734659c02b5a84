// Admin.Trace replies as Chrome trace-event JSON (the format Perfetto and
// chrome://tracing open), for `blockswapctl trace`.
//
// One process per client (its pid; named "NAME (pid P)") with two tracks:
//   tid 1 "loads"   an X span per load, from the client's request to the
//                   daemon publishing filled_seq (args: ring, slot,
//                   generation, block, bytes, copy times);
//   tid 2 "stalls"  an X span (cat "stall") per compute-stream stall: the
//                   stream sat idle at a wait (kStall: timing events on
//                   cuda), the time the trainer really lost;
//   tid 3 "host waits"  an X span (cat "host_wait") per wait whose thread
//                   found its slot not filled yet and blocked (kWait with
//                   kTraceStalled): mostly the trainer's own compute
//                   draining, not lost time.
// One process for blockswapd (its pid) with a track per device (tid 1, 2, ...):
//   an X span per copy, from when the copy stream could start it (issued, or
//   the previous copy's completion if later) to its completion; args name
//   the client (pid, ring, slot, generation). A flow arrow (ph s/f) links
//   each load's request to its copy. Rejected requests are instant events.
// Timestamps are CLOCK_MONOTONIC in microseconds.
//
// Pure functions of the reply (no I/O), unit-tested on hand-built replies.
#ifndef BLOCKSWAP_TOOLS_BLOCKSWAPCTL_TRACE_JSON_H_
#define BLOCKSWAP_TOOLS_BLOCKSWAPCTL_TRACE_JSON_H_

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "blockswap/v1/blockswap.pb.h"

namespace blockswap::ctl {

// The trace document. `since_ns` is the window's start (0: none); events
// before it are left out, and so are spans whose other end is missing (the
// window's edges, or copies still in flight).
nlohmann::json TraceToChromeJson(const v1::TraceReply& reply, uint64_t since_ns);

// One line per source that lost events to its bounded ring (device, client)
// or whose entries the daemon refused; empty when nothing was lost.
std::string TraceLossReport(const v1::TraceReply& reply);

}  // namespace blockswap::ctl

#endif  // BLOCKSWAP_TOOLS_BLOCKSWAPCTL_TRACE_JSON_H_
