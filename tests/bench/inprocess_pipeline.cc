#include "tests/bench/inprocess_pipeline.h"

#include "absl/time/clock.h"
#include "shared/base/status.h"

namespace blockswap::bench {

absl::StatusOr<std::unique_ptr<InProcessPipeline>> InProcessPipeline::Create(
    BackendKind kind, Device& device, uint64_t bytes, gpu_testing::ComputeKind compute) {
  auto pipeline = std::unique_ptr<InProcessPipeline>(new InProcessPipeline());
  BLOCKSWAP_ASSIGN_OR_RETURN(pipeline->working_set_, CopyWorkingSet::Create(device, bytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(pipeline->compute_, gpu_testing::DeviceCompute::Create(
                                                     kind, device, /*checks=*/0, compute));
  BLOCKSWAP_ASSIGN_OR_RETURN(pipeline->copy_stream_, device.CreateStream());
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    // In-process events order the two streams exactly as the reference's do.
    BLOCKSWAP_ASSIGN_OR_RETURN(auto ready, device.CreateEvent());
    BLOCKSWAP_ASSIGN_OR_RETURN(auto free, device.CreateEvent());
    pipeline->ready_.push_back(std::move(ready));
    pipeline->free_.push_back(std::move(free));
  }
  // One copy into each slot first, as the ceiling's warm-up does: the
  // measured passes start from memory that has been touched.
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    BLOCKSWAP_RETURN_IF_ERROR(pipeline->IssueCopy(static_cast<int>(slot)));
  }
  BLOCKSWAP_RETURN_IF_ERROR(pipeline->copy_stream_->Synchronize());
  return pipeline;
}

InProcessPipeline::~InProcessPipeline() {
  // Neither stream may outlive the other's events it waits on.
  if (copy_stream_ != nullptr) (void)copy_stream_->Synchronize();
  if (compute_ != nullptr) (void)compute_->Synchronize();
}

absl::Status InProcessPipeline::IssueCopy(int block) {
  const uint32_t slot = static_cast<uint32_t>(block) % kSlots;
  // The reference's gate: never overwrite a slot the compute stream still
  // reads. An event never recorded counts as complete (the first pass).
  BLOCKSWAP_RETURN_IF_ERROR(copy_stream_->Wait(*free_[slot]));
  BLOCKSWAP_RETURN_IF_ERROR(copy_stream_->CopyHostToDevice(
      working_set_->slot(block), working_set_->block(block), working_set_->block_bytes()));
  return copy_stream_->Record(*ready_[slot]);
}

absl::StatusOr<double> InProcessPipeline::StreamingSeconds(int blocks, absl::Duration compute) {
  Stream& compute_stream = compute_->stream();
  const absl::Time start = absl::Now();
  for (int k = 0; k < static_cast<int>(kSlots) && k < blocks; ++k) {
    BLOCKSWAP_RETURN_IF_ERROR(IssueCopy(k));
  }
  for (int k = 0; k < blocks; ++k) {
    const uint32_t slot = static_cast<uint32_t>(k) % kSlots;
    // Each wait binds to the record issued for block k (backend.h): the
    // host issues records before the waits that depend on them.
    BLOCKSWAP_RETURN_IF_ERROR(compute_stream.Wait(*ready_[slot]));
    BLOCKSWAP_RETURN_IF_ERROR(compute_->Spin(compute));
    BLOCKSWAP_RETURN_IF_ERROR(compute_stream.Record(*free_[slot]));
    if (k + static_cast<int>(kSlots) < blocks) {
      BLOCKSWAP_RETURN_IF_ERROR(IssueCopy(k + static_cast<int>(kSlots)));
    }
  }
  BLOCKSWAP_RETURN_IF_ERROR(compute_->Synchronize());
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  BLOCKSWAP_RETURN_IF_ERROR(copy_stream_->Synchronize());
  return seconds;
}

absl::StatusOr<double> InProcessPipeline::ComputeOnlySeconds(int blocks, absl::Duration compute) {
  const absl::Time start = absl::Now();
  for (int k = 0; k < blocks; ++k) BLOCKSWAP_RETURN_IF_ERROR(compute_->Spin(compute));
  BLOCKSWAP_RETURN_IF_ERROR(compute_->Synchronize());
  return absl::ToDoubleSeconds(absl::Now() - start);
}

}  // namespace blockswap::bench
