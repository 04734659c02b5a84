// The primitives probe's CUDA part: two small processes (the second of
// another user where one is given) exercise, each on its own line, exactly
// the CUDA primitives the product relies on between a daemon and a trainer
// (docs/protocol.md, docs/backends.md): IPC memory, IPC events both ways, a memfd page registered
// in both, stream memory operations both ways, and a stream wait released by
// a host store. Only the driver table (shared/backend/cuda_driver.h) and
// shared/os: nothing that could fail to load before the probe has spoken.
#ifndef BLOCKSWAP_TESTS_GPU_CUDA_PRIMITIVES_H_
#define BLOCKSWAP_TESTS_GPU_CUDA_PRIMITIVES_H_

#include <sys/types.h>

#include <optional>

#include "tests/gpu/probe_report.h"

namespace blockswap::probe {

struct PeerUser {
  uid_t uid = 0;
  gid_t gid = 0;
  // A (root) joins the user's group with umask 0007, as the system unit's
  // Group= and UMask= run the daemon; false keeps A's own group and umask,
  // to show what a daemon without them meets (B cannot open A's events).
  bool a_in_user_group = true;
};

// Forks the peer (which becomes `peer_user` when set), runs every CUDA check
// with it and prints their lines. Call before anything in this process calls
// cuInit: CUDA does not survive a fork. Each wait is bounded (a few seconds),
// so a primitive that never completes is a FAIL line, not a hang.
void RunCudaPrimitives(Report& report, std::optional<PeerUser> peer_user);

}  // namespace blockswap::probe

#endif  // BLOCKSWAP_TESTS_GPU_CUDA_PRIMITIVES_H_
