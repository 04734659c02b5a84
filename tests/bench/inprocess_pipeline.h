// P4's in-process baseline: a pipelined pass with the reference's design
// (custom_offloading_utils.py, _DirectCopier) in this one process, no
// daemon. A copy stream of its own waits (Stream::Wait) for the compute
// stream's `free` event of the slot before copying the next block into it
// and records `ready`; the compute stream waits for `ready`, runs the block's
// kernel (DeviceCompute::Spin: a real kernel on cuda, a sleeping host
// function on the host backend) and records `free`. Every ordering is on the
// device (cudaStreamWaitEvent on cuda), so nothing waits for a host thread
// to notice a release — what blockswap's pass is compared with.
#ifndef BLOCKSWAP_TESTS_BENCH_INPROCESS_PIPELINE_H_
#define BLOCKSWAP_TESTS_BENCH_INPROCESS_PIPELINE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shared/backend/backend.h"
#include "tests/bench/copy_ceiling.h"
#include "tests/gpu/device_compute.h"

namespace blockswap::bench {

// One thread uses an object; destroy it before `device`.
class InProcessPipeline {
 public:
  // Blocks of `bytes` from a CopyWorkingSet into its kSlots slots, on
  // `device` of a backend of `kind` (on cuda the calling thread's current
  // device becomes `device`, as for DeviceCompute), consumed by "kernels" of
  // `compute`'s kind.
  static absl::StatusOr<std::unique_ptr<InProcessPipeline>> Create(
      BackendKind kind, Device& device, uint64_t bytes,
      gpu_testing::ComputeKind compute = gpu_testing::ComputeKind::kKernels);
  ~InProcessPipeline();

  // The step time of `blocks` blocks, each consumed by a kernel of
  // `compute`, seconds: from the first copy's issue until the compute stream
  // has drained. Loads run ahead by the ring size, as gpu-stream's do.
  absl::StatusOr<double> StreamingSeconds(int blocks, absl::Duration compute);
  // The same kernels with no copies and no waits.
  absl::StatusOr<double> ComputeOnlySeconds(int blocks, absl::Duration compute);

 private:
  InProcessPipeline() = default;
  absl::Status IssueCopy(int block);

  std::unique_ptr<CopyWorkingSet> working_set_;
  std::unique_ptr<gpu_testing::DeviceCompute> compute_;
  std::unique_ptr<Stream> copy_stream_;
  // Per slot; declared after the streams that wait on them, so destroyed
  // before them only once the destructor has drained both streams.
  std::vector<std::unique_ptr<Event>> ready_;
  std::vector<std::unique_ptr<Event>> free_;
};

}  // namespace blockswap::bench

#endif  // BLOCKSWAP_TESTS_BENCH_INPROCESS_PIPELINE_H_
