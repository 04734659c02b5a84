#include "tests/bench/copy_ceiling.h"

#include <unistd.h>

#include <algorithm>

#include "absl/time/clock.h"
#include "shared/base/status.h"
#include "tests/bench/stream_clients.h"

namespace blockswap::bench {

absl::StatusOr<std::unique_ptr<CopyWorkingSet>> CopyWorkingSet::Create(Device& device,
                                                                       uint64_t bytes) {
  const uint64_t host_bytes = kModelBlocks * bytes;
  BLOCKSWAP_ASSIGN_OR_RETURN(SharedMemory host, SharedMemory::Create("bench-h2d", host_bytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, host.Map(Access::kReadWrite));
  std::fill_n(static_cast<char*>(mapping.data()), host_bytes, 7);
  auto set = std::unique_ptr<CopyWorkingSet>(
      new CopyWorkingSet(bytes, std::move(host), std::move(mapping)));
  BLOCKSWAP_ASSIGN_OR_RETURN(set->pinned_,
                             device.RegisterHostMemory(set->mapping_.data(), host_bytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(set->slots_, device.Allocate(kSlots * bytes));
  return set;
}

const std::byte* CopyWorkingSet::block(uint64_t i) const {
  return static_cast<const std::byte*>(mapping_.data()) + (i % kModelBlocks) * bytes_;
}

std::byte* CopyWorkingSet::slot(uint64_t i) const { return slots_->data() + (i % kSlots) * bytes_; }

absl::StatusOr<Rate> Ceiling(Device& device, uint64_t bytes, int copies) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<CopyWorkingSet> set,
                             CopyWorkingSet::Create(device, bytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(auto stream, device.CreateStream());
  auto copy = [&](int i) { return stream->CopyHostToDevice(set->slot(i), set->block(i), bytes); };
  for (int i = 0; i < static_cast<int>(kModelBlocks); ++i) {  // warm-up
    BLOCKSWAP_RETURN_IF_ERROR(copy(i));
  }
  BLOCKSWAP_RETURN_IF_ERROR(stream->Synchronize());
  const double cpu_start = ProcessCpuSeconds(::getpid());
  const absl::Time start = absl::Now();
  for (int i = 0; i < copies; ++i) BLOCKSWAP_RETURN_IF_ERROR(copy(i));
  BLOCKSWAP_RETURN_IF_ERROR(stream->Synchronize());
  const double gigabytes = static_cast<double>(bytes) * copies / 1e9;
  return Rate{gigabytes / absl::ToDoubleSeconds(absl::Now() - start),
              gigabytes / (ProcessCpuSeconds(::getpid()) - cpu_start)};
}

}  // namespace blockswap::bench
