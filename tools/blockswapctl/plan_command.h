// `blockswapctl plan`: the client's StreamScheduler on a recording driver,
// printing what it would do for a script of passes. Never talks to a daemon.
#ifndef BLOCKSWAP_TOOLS_BLOCKSWAPCTL_PLAN_COMMAND_H_
#define BLOCKSWAP_TOOLS_BLOCKSWAPCTL_PLAN_COMMAND_H_

#include <cstdint>
#include <string>

#include "tools/blockswapctl/admin_caller.h"

namespace blockswap::ctl {

struct PlanOptions {
  uint32_t blocks = 0;
  uint32_t swap = 0;
  uint32_t ring = 2;  // the reference's default ring
  std::string script;
  bool trace = false;
  uint64_t block_bytes = 0;   // 0: not given
  double bandwidth_gbps = 0;  // 0: not given
};

// Runs the script through the very StreamScheduler trainers use, on a
// driver that only records. --trace prints every load and rebind (the
// format of the reference's ground-truth traces); otherwise a summary: each
// pass, then each training step — a forward pass with the prepare before it
// and the backward after it.
int Plan(const Options& options, const PlanOptions& plan);

}  // namespace blockswap::ctl

#endif  // BLOCKSWAP_TOOLS_BLOCKSWAPCTL_PLAN_COMMAND_H_
