// RingAllocator: a device's ring memory, allocated against the limits the
// daemon keeps on it. Before a ring is allocated it is charged to the
// node's max_memory_bytes where the device's memory is the host's, to its
// owner's share of the device under max_device_bytes_per_uid = "auto"
// (AutoMaxDeviceBytesPerUid), and checked against the device's free memory
// less device_memory_reserve_bytes.
//
// The check of free memory and the allocation happen under one lock, so
// that two rings never both take the last of the device's free memory.
//
// Thread-safe; Allocate runs on the caller's thread (device allocation can
// take milliseconds).
#ifndef BLOCKSWAP_DAEMON_DEVICE_RING_ALLOCATOR_H_
#define BLOCKSWAP_DAEMON_DEVICE_RING_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/budget/ledger.h"
#include "daemon/budget/memory_budget.h"
#include "shared/backend/backend.h"
#include "shared/protocol/ring.h"

namespace blockswap::daemon {

// What a ring's memory and the staging buffers are checked against before
// the worker allocates them.
struct WorkerMemoryOptions {
  // Set when the device's memory is host memory (the host backend): each
  // ring is charged to the node's max_memory_bytes. Must outlive the worker.
  MemoryBudget* host_budget = nullptr;
  // device_memory_reserve_bytes: a ring is refused when it would leave less
  // than this much of the device's memory free (for the trainers' own
  // allocations and every other process on the device).
  uint64_t device_reserve_bytes = 0;
  // The node's budget the staging buffers are charged to (null: none).
  MemoryBudget* staging_budget = nullptr;
};

class RingAllocator {
 public:
  // A ring's memory and the charges taken for it, to be held as long as
  // the memory (ServedRing::charged).
  struct Allocated {
    std::unique_ptr<DaemonRing> ring;
    Reservation charged;
  };

  // `device` and memory.host_budget must outlive the allocator.
  RingAllocator(Device& device, uint64_t boot_id, const WorkerMemoryOptions& memory);

  // One uid's share of this device's ring memory under
  // max_device_bytes_per_uid = "auto".
  uint64_t share_bytes() const { return share_bytes_; }

  // Charges ring `ring_id` of `shape` (to its owner `uid`'s share when
  // `device_share`) and allocates it. RESOURCE_EXHAUSTED when it does not
  // fit max_memory_bytes or that share, or would leave less than the
  // device reserve free; nothing is held then.
  absl::StatusOr<Allocated> Allocate(uint64_t ring_id, const RingShape& shape, uint32_t uid,
                                     bool device_share) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The node budget's charge and the device reserve's check for a ring of
  // `bytes`.
  absl::StatusOr<Reservation> ChargeMemory(uint64_t ring_id, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Device& device_;
  const uint64_t boot_id_;
  MemoryBudget* const host_budget_;
  const uint64_t reserve_bytes_;
  // The share "auto" gives one uid, with the key its refusals name.
  const uint64_t share_bytes_;
  const std::string share_key_;
  // Held from a ring's memory check to its allocation.
  absl::Mutex mu_;
  // What each uid's rings hold of this device.
  std::map<uint32_t, Ledger> bytes_by_uid_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_RING_ALLOCATOR_H_
