#include "shared/copy/staging_pool.h"

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {

std::string PoolName(const std::string& uuid, const StagingOptions& options) {
  return absl::StrCat("the staging buffers of ", uuid, " (", options.buffers, " x ",
                      options.buffer_bytes, " bytes)");
}

}  // namespace

absl::Status CheckStagingOptions(const Device& device, const StagingOptions& options) {
  const std::string& uuid = device.info().uuid;
  if (options.buffer_bytes == 0 || options.buffers == 0 || options.threads == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the staging pool of ", uuid,
                     " needs staging_buffer_bytes, staging_buffers and "
                     "staging_threads of at least 1 (got ",
                     options.buffer_bytes, ", ", options.buffers, ", ", options.threads, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StagingPool>> StagingPool::Create(Device& device,
                                                                 const StagingOptions& options) {
  const std::string& uuid = device.info().uuid;
  const uint64_t total = options.buffer_bytes * options.buffers;
  const std::string what = PoolName(uuid, options);
  auto pool = std::unique_ptr<StagingPool>(new StagingPool());
  BLOCKSWAP_RETURN_IF_ERROR(CheckStagingOptions(device, options));
  // One allocation the driver pins itself: no host registration, which some
  // devices refuse (CUDA_ERROR_NOT_SUPPORTED) while they stage every master.
  absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> memory = device.AllocatePinnedHostBuffer(total);
  if (!memory.ok()) {
    return Annotate(memory.status(),
                    absl::StrCat("allocating ", what,
                                 " pinned (lower staging_buffer_bytes or staging_buffers)"));
  }
  pool->memory_ = *std::move(memory);
  pool->buffer_bytes_ = options.buffer_bytes;
  pool->buffers_.resize(options.buffers);
  for (Buffer& buffer : pool->buffers_) {
    BLOCKSWAP_ASSIGN_OR_RETURN(buffer.consumed, device.CreateEvent());
  }
  return pool;
}

std::byte* StagingPool::data(size_t buffer) const {
  return memory_->data() + buffer * buffer_bytes_;
}

}  // namespace blockswap
