// `blockswapctl trace`: the daemon's per-load events of the next N seconds
// (or until SIGINT/SIGTERM) as Chrome trace-event JSON, and optionally a PNG
// timeline drawn by share/blockswap/trace_png.py.
#ifndef BLOCKSWAP_TOOLS_BLOCKSWAPCTL_TRACE_COMMAND_H_
#define BLOCKSWAP_TOOLS_BLOCKSWAPCTL_TRACE_COMMAND_H_

#include <string>

#include "tools/blockswapctl/admin_caller.h"

namespace blockswap::ctl {

struct TraceOptions {
  double seconds = 5;
  std::string out;
  std::string png;
};

int Trace(const Options& options, const TraceOptions& trace);

}  // namespace blockswap::ctl

#endif  // BLOCKSWAP_TOOLS_BLOCKSWAPCTL_TRACE_COMMAND_H_
