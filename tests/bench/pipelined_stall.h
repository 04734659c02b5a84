// P4 where a GPU's copies are: the stall of a pipelined pass —
// kernel time a multiple of the copy time, 2 slots — through blockswap beside
// the same pass in one process with the reference's design
// (tests/bench/inprocess_pipeline.h), measured side by side in one run, at
// block sizes chosen so that one copy takes a given time on this backend
// (a GPU moves 64 MiB in ~1.3 ms, where a host memcpy of 64 MiB hides the
// daemon's per-load latency behind ~10 ms).
//
// Per copy time and kernel factor: stall = (step streaming - step with the
// same kernels and no loads) / step streaming, for blockswap (the daemon
// streaming into a gpu-stream client against that client with
// --compute-only=1) and for the in-process baseline (against its own
// kernels-only pass); the row is blockswap's stall minus the baseline's, in
// percentage points. Then the release-to-issue latency from the daemon's
// trace over every streaming pass (tests/bench/release_to_issue.h).
#ifndef BLOCKSWAP_TESTS_BENCH_PIPELINED_STALL_H_
#define BLOCKSWAP_TESTS_BENCH_PIPELINED_STALL_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "shared/backend/backend.h"
#include "tests/bench/stream_clients.h"
#include "tests/gpu/device_compute.h"
#include "tests/support/daemon_process.h"

namespace blockswap::bench {

struct PipelinedStallOptions {
  std::vector<double> copy_ms = {0.3, 0.7, 1.5};  // one copy's time on this backend
  std::vector<double> compute_factors = {1.25, 1.0};
  int blocks = 300;  // per pass
  int rounds = 1;    // alternations of blockswap and the baseline; the best of each kept
  // The "kernels": kHostCopies makes them host functions of the same
  // length on the compute stream, which occupy it as a kernel would and need
  // no CUDA runtime (the GPU check's first call).
  gpu_testing::ComputeKind compute = gpu_testing::ComputeKind::kKernels;
};

// Measures every (copy time, factor) case with `daemon` (started on the
// backend of `device`, whose kind is `kind`) and clients spawned through
// `clients` on `devices` devices; prints one line per case and adds the
// summary rows (`P4-host-<copy>-<factor> stall-vs-inprocess`, `P4-GPU-...`
// on cuda, and the release-to-issue percentiles) to `summary`.
absl::Status MeasurePipelinedStall(const PipelinedStallOptions& options, BackendKind kind,
                                   Device& device, size_t devices,
                                   const testing::DaemonProcess& daemon, StreamClients& clients,
                                   Summary& summary);

}  // namespace blockswap::bench

#endif  // BLOCKSWAP_TESTS_BENCH_PIPELINED_STALL_H_
