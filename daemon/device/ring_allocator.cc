#include "daemon/device/ring_allocator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/budget/memory_limit.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

RingAllocator::RingAllocator(Device& device, uint64_t boot_id, const WorkerMemoryOptions& memory)
    : device_(device),
      boot_id_(boot_id),
      host_budget_(memory.host_budget),
      reserve_bytes_(memory.device_reserve_bytes),
      share_bytes_(AutoMaxDeviceBytesPerUid(
          device.info().total_memory_bytes, memory.device_reserve_bytes,
          memory.host_budget == nullptr ? 0 : memory.host_budget->limit())),
      share_key_(absl::StrCat("max_device_bytes_per_uid (\"auto\": half of what ",
                              device.info().uuid, " holds for rings)")) {}

absl::StatusOr<RingAllocator::Allocated> RingAllocator::Allocate(uint64_t ring_id,
                                                                 const RingShape& shape,
                                                                 uint32_t uid, bool device_share) {
  Allocated out;
  absl::MutexLock lock(&mu_);
  const uint64_t bytes = uint64_t{shape.slot_count} * shape.slot_bytes;
  if (device_share) {
    Ledger& held = bytes_by_uid_
                       .try_emplace(uid, absl::StrCat("uid ", uid),
                                    absl::StrCat("bytes of ring memory on ", device_.info().uuid))
                       .first->second;
    BLOCKSWAP_ASSIGN_OR_RETURN(Charge share, held.Reserve(bytes, {share_key_, share_bytes_}));
    out.charged.Add(std::move(share));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(Reservation memory, ChargeMemory(ring_id, bytes));
  out.charged.Add(std::move(memory));
  BLOCKSWAP_ASSIGN_OR_RETURN(out.ring, DaemonRing::Create(device_, ring_id, shape, boot_id_));
  return out;
}

absl::StatusOr<Reservation> RingAllocator::ChargeMemory(uint64_t ring_id, uint64_t bytes) {
  const std::string what =
      absl::StrCat("ring ", ring_id, " of ", bytes, " bytes on ", device_.info().uuid);
  Reservation charged;
  if (host_budget_ != nullptr) {
    BLOCKSWAP_ASSIGN_OR_RETURN(charged, host_budget_->Reserve(MemoryUse::kRings, bytes, what));
  }
  absl::StatusOr<uint64_t> free_bytes = device_.FreeMemoryBytes();
  if (!free_bytes.ok()) {
    return Annotate(free_bytes.status(), absl::StrCat("reading the free memory for ", what));
  }
  if (*free_bytes < reserve_bytes_ || *free_bytes - reserve_bytes_ < bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": the device has ", *free_bytes, " bytes free, and the ring would leave less than ",
        "device_memory_reserve_bytes = ", reserve_bytes_));
  }
  return charged;
}

}  // namespace blockswap::daemon
