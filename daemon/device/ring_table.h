// RingTable: the rings a device worker serves, by id, and those it has
// retired until nothing can touch their memory any more.
//
// A ring is either live (served: found by id, polled, issued on) or
// retired (never served again), and a retired ring is freed only when its
// retirement allows it (RetireReason) and its owner says that none of its
// copies is still in flight. Freeing a ring destroys its ServedRing: its
// producer, then its memory, then the charges held for it, in that order.
//
// Thread-compatible: the device worker uses it under its rings mutex.
#ifndef BLOCKSWAP_DAEMON_DEVICE_RING_TABLE_H_
#define BLOCKSWAP_DAEMON_DEVICE_RING_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "daemon/budget/ledger.h"
#include "daemon/device/device_trace.h"
#include "daemon/device/load_resolver.h"
#include "daemon/device/load_task.h"
#include "shared/base/unique_fd.h"
#include "shared/protocol/load_protocol.h"
#include "shared/protocol/request_queue.h"
#include "shared/protocol/ring.h"

namespace blockswap::daemon {

// What a slot holds, as Admin.Status shows it.
struct SlotSnapshot {
  bool loaded = false;  // a load was ever accepted for the slot
  std::string model_id;
  uint32_t block = 0;
  uint32_t filled_seq = 0;
  uint32_t consumed_seq = 0;
};

// Why a ring is retired, which decides when it may be freed. The client's
// view of the ring's memory is its own mapping, which keeps the memory for
// as long as it holds it (backend.h, ImportMemory); the daemon frees its
// own once its copies into the ring are done.
enum class RetireReason {
  // DestroyRing, or a Detach of the session: the client has closed its
  // imports (client::Ring::Close; a connection detaches after its rings).
  // Freed once the copy stream is done with the ring.
  kClosedByClient,
  // The client's process has exited (or never received the ring): its
  // imports ended with it. Freed once the copy stream is done with it.
  kOwnerExited,
  // The daemon ended the session while its process lives (shutdown): the
  // process may still map the ring, so it is held until `owner` (its
  // pidfd) says the process exited, then freed as kOwnerExited; a daemon
  // that stops first leaves it to its own exit (~DeviceWorker).
  kOwnerDetached,
};

// One ring a device worker serves, with what the worker keeps of it.
struct ServedRing {
  // The quotas' and the node budget's charges: first, so that they are
  // returned only after the ring's memory is freed.
  Reservation charged;
  uint64_t ring_id = 0;
  uint64_t session_id = 0;
  RingOwner owner;
  std::unique_ptr<DaemonRing> ring;
  std::unique_ptr<RingProducer> producer;  // after `ring`: destroyed first
  // The load fast path, when the client asked for it.
  std::unique_ptr<RequestQueueReader> requests;
  std::shared_ptr<const LoadResolver> resolver;
  std::vector<SlotSnapshot> residency;
  // Per slot: what the accepted, not yet issued copy reads (then the
  // worker's CopyTracker).
  std::vector<std::shared_ptr<const void>> pending_keep_alive;
  std::shared_ptr<LoadEventSink> last_sink;
  // The fallback poll of a copy that waits for its slot's release.
  absl::Duration poll_period;
  absl::Time next_fallback_poll = absl::InfiniteFuture();
  uint64_t loads = 0;
  uint64_t bytes = 0;
};

class RingTable {
 public:
  using Live = std::map<uint64_t, std::unique_ptr<ServedRing>>;

  RingTable() = default;
  RingTable(const RingTable&) = delete;
  RingTable& operator=(const RingTable&) = delete;

  // Serves `ring` under its ring_id.
  void Add(std::unique_ptr<ServedRing> ring);
  // The live ring `ring_id`; null when none is served under that id.
  ServedRing* Find(uint64_t ring_id);
  const Live& live() const { return live_; }

  // Stops serving ring `ring_id`; false when no live ring has that id.
  // `owner` (the owner's pidfd) is needed for kOwnerDetached only.
  bool Retire(uint64_t ring_id, RetireReason reason, std::shared_ptr<const UniqueFd> owner);
  void ForEachRetired(absl::FunctionRef<void(ServedRing&)> visit);
  void ForEachRetired(absl::FunctionRef<void(const ServedRing&)> visit) const;

  // Frees each retired ring its retirement allows to be freed and
  // `in_flight` (whether a copy into it may still run) says is done with,
  // calling `freed` just before (kOwnerExited for a kOwnerDetached ring
  // whose process has exited). True while a ring waits for `in_flight`
  // only, which the worker polls for quickly, unlike a ring held for a
  // live process.
  bool FreeRetired(absl::FunctionRef<bool(const ServedRing&)> in_flight,
                   absl::FunctionRef<void(const ServedRing&, RetireReason)> freed);
  // True when every retired ring left is held for a process that may still
  // map it (kOwnerDetached, process alive).
  bool idle() const;

  // At the daemon's exit, once no copy runs: frees the retired rings that
  // no live process may map and leaves every other ring, live or held for
  // a live process, to the exit (freeing memory a live client still maps
  // is undefined on CUDA). The table is empty after.
  void ReleaseForExit();

 private:
  struct Retired {
    std::unique_ptr<ServedRing> ring;
    RetireReason reason = RetireReason::kOwnerExited;
    std::shared_ptr<const UniqueFd> owner_process;  // kOwnerDetached: the owner's pidfd
    // Held for a process that may still map the ring. Once it has exited,
    // the ring is freed as any dead client's.
    bool HeldForLiveOwner();
  };

  Live live_;
  // mutable: whether a retired ring is held is learnt by polling its owner.
  mutable std::vector<Retired> retired_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_RING_TABLE_H_
