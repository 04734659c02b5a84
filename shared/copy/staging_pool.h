// StagingPool: one device's pinned staging buffers, through which the masters
// that are not pinned are copied (staged_copier.h). Each buffer is host memory
// the driver allocates pinned (Device::AllocatePinnedHostBuffer: its device
// copy is a real asynchronous DMA, and it needs no host registration, so the
// pool also works on a device that refuses registration and stages every
// master) and carries `consumed`, the event the copy stream records after the device
// copy that read the buffer: the buffer may be refilled once that record has
// completed. The daemon charges the buffers to max_memory_bytes
// (daemon/device/staging_charge.h); a trainer's pool is its own memory.
#ifndef BLOCKSWAP_SHARED_COPY_STAGING_POOL_H_
#define BLOCKSWAP_SHARED_COPY_STAGING_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shared/backend/backend.h"

namespace blockswap {

// The daemon's staging_* keys (deploy/blockswapd.toml); a trainer's copies
// use the same defaults.
struct StagingOptions {
  // Bytes of one buffer: one chunk of a staged copy. Big enough that a device
  // copy's fixed cost (some microseconds) is small beside its transfer, small
  // enough that the first chunk's memcpy, which nothing overlaps, is short.
  uint64_t buffer_bytes = uint64_t{8} << 20;
  // Buffers of each device: the staging threads fill up to buffers - 1 while
  // the copy stream reads one.
  uint32_t buffers = 6;
  // Threads that fill the buffers (staged_copier.h says why 4).
  uint32_t threads = 4;
  // A test switch, the host backend's jitter: each staging memcpy starts
  // after a random delay (usually up to jitter_us, 1 in 16 times up to 21x
  // that), so that a copy queued before its chunk is staged reads the wrong
  // bytes in CI.
  int64_t jitter_us = 0;
};

// INVALID_ARGUMENT naming the key that is 0 (StagingPool::Create checks it
// too; the daemon checks before it charges the pool).
absl::Status CheckStagingOptions(const Device& device, const StagingOptions& options);

// Thread-compatible: the device worker's thread uses `consumed`; the staging
// threads write a buffer's bytes only while the worker lets them.
class StagingPool {
 public:
  // The device's error when it cannot allocate them pinned (a staged copy needs pinned
  // buffers: a pageable one would make every device copy synchronous).
  static absl::StatusOr<std::unique_ptr<StagingPool>> Create(Device& device,
                                                             const StagingOptions& options);

  size_t count() const { return buffers_.size(); }
  size_t buffer_bytes() const { return buffer_bytes_; }
  std::byte* data(size_t buffer) const;
  // Recorded on the copy stream after the device copy that read `buffer`.
  Event& consumed(size_t buffer) const { return *buffers_[buffer].consumed; }

 private:
  struct Buffer {
    std::unique_ptr<Event> consumed;
  };
  StagingPool() = default;

  std::unique_ptr<PinnedHostBuffer> memory_;
  size_t buffer_bytes_ = 0;
  std::vector<Buffer> buffers_;
};

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_COPY_STAGING_POOL_H_
