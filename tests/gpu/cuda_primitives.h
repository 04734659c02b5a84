// The primitives probe's CUDA part: small processes exercise, each on its
// own line, exactly the CUDA primitives the product relies on between a
// daemon and a trainer (docs/protocol.md, docs/backends.md): device memory
// exported as a file descriptor (VMM) and imported by a process of the same
// and of another uid, the import outliving its exporter, a memfd page
// registered in both processes (read-write, and read-only), stream memory
// operations both ways, and a stream wait released by a host store. No event
// crosses processes in the product, so none does here. Only the driver table
// (shared/backend/cuda_driver.h) and shared/os: nothing that could fail to
// load before the probe has spoken.
#ifndef BLOCKSWAP_TESTS_GPU_CUDA_PRIMITIVES_H_
#define BLOCKSWAP_TESTS_GPU_CUDA_PRIMITIVES_H_

#include <sys/types.h>

#include <optional>

#include "tests/gpu/probe_report.h"

namespace blockswap::probe {

// The user process B (a trainer) becomes, as a trainer beside the system
// service is another user than the daemon.
struct PeerUser {
  uid_t uid = 0;
  gid_t gid = 0;
};

// Forks the peers (B, which becomes `peer_user` when set, and A2, a second
// process of this one's user), runs every CUDA check with them and prints
// their lines. Call before anything in this process calls cuInit: CUDA does
// not survive a fork. Each wait is bounded (a few seconds), so a primitive
// that never completes is a FAIL line, not a hang.
void RunCudaPrimitives(Report& report, std::optional<PeerUser> peer_user);

}  // namespace blockswap::probe

#endif  // BLOCKSWAP_TESTS_GPU_CUDA_PRIMITIVES_H_
