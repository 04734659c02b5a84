// The working set of a host-to-device copy benchmark and its ceiling: the
// copies a trainer pinning its own model would make, on one stream of this
// process (tests/bench/h2d.cc compares the daemon's delivery with it; the
// P4 in-process baseline copies from the same working set).
#ifndef BLOCKSWAP_TESTS_BENCH_COPY_CEILING_H_
#define BLOCKSWAP_TESTS_BENCH_COPY_CEILING_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "shared/backend/backend.h"
#include "shared/os/shared_memory.h"

namespace blockswap::bench {

// What the daemon's copies touch for one client: kModelBlocks blocks of a
// pinned host buffer (the model) and kSlots device buffers (the ring), so
// that small blocks are not measured from a cache the daemon's copies cannot
// use.
inline constexpr uint32_t kModelBlocks = 4;
inline constexpr uint32_t kSlots = 2;

// The host blocks and device slots of `bytes` each. Destroy before the
// device.
class CopyWorkingSet {
 public:
  static absl::StatusOr<std::unique_ptr<CopyWorkingSet>> Create(Device& device, uint64_t bytes);
  uint64_t block_bytes() const { return bytes_; }
  // Block i % kModelBlocks of the model; slot i % kSlots of the ring.
  const std::byte* block(uint64_t i) const;
  std::byte* slot(uint64_t i) const;

 private:
  CopyWorkingSet(uint64_t bytes, SharedMemory host, Mapping mapping)
      : bytes_(bytes), host_(std::move(host)), mapping_(std::move(mapping)) {}
  uint64_t bytes_;
  SharedMemory host_;
  Mapping mapping_;
  // Declared after the mapping they refer to, so destroyed before it.
  std::unique_ptr<HostRegistration> pinned_;
  std::unique_ptr<DeviceMemory> slots_;
};

struct Rate {
  double gbps = 0;      // per wall-clock second
  double cpu_gbps = 0;  // per CPU second of the copying process
};

// The ceiling: `copies` copies of `bytes` from the working set's blocks in
// turn into its slots in turn, on one stream of this process. On the host
// backend each copy is one std::memcpy on the stream's thread.
absl::StatusOr<Rate> Ceiling(Device& device, uint64_t bytes, int copies);

}  // namespace blockswap::bench

#endif  // BLOCKSWAP_TESTS_BENCH_COPY_CEILING_H_
