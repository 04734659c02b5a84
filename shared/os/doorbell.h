// Doorbell: how a device worker of the daemon sleeps on ONE thing while
// requests arrive from its own threads (the gRPC transport, rejections,
// retirements) and from clients' request rings (request_queue.h).
//
// Two 32-bit words, each in its own shared-memory object, one pair per device:
//   bell      rung (fetch_add) by whoever published work; the worker futex-
//             waits on it. Clients map it read-write.
//   sleeping  1 while the worker is about to sleep or sleeps on the bell.
//             Written only by the daemon; clients get a read-only
//             descriptor of an object that is mode 0400 and sealed against
//             new writable mappings (SharedMemory::SealAgainstNewWriters), so
//             no client — not even one reopening /proc/self/fd/N — can make
//             the others skip the wake-up their work needs.
//
// Ordering (a Dekker pair, all four accesses seq_cst):
//   ringer: publish work (release); bell.fetch_add; if sleeping: FUTEX_WAKE
//   worker: sleeping = 1; seen = bell; look for work; none: FUTEX_WAIT(bell,
//           seen, timeout); sleeping = 0
// In the single total order of seq_cst operations either the ringer's
// fetch_add comes before the worker's read of the bell — then the worker
// reads it (acquire), and finds the work published before it — or after it:
// then the worker's `sleeping = 1` came before the ringer's read of
// `sleeping`, which sees 1 and wakes the worker (and a FUTEX_WAIT issued
// after the fetch_add finds the bell changed and returns at once). So no
// published work waits for the timeout. A ringer that finds the worker awake
// makes no system call.
//
// What a client can do with its read-write bell: wake the worker (as often
// as it likes — no worse than spamming gRPC requests, and the worker's loop
// is bounded by the work it finds) or leave it unrung (then its own requests
// wait for the worker's next poll). It cannot delay other clients' requests:
// their wakes do not depend on the bell's value.
#ifndef BLOCKSWAP_SHARED_OS_DOORBELL_H_
#define BLOCKSWAP_SHARED_OS_DOORBELL_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "shared/os/shared_memory.h"
#include "shared/base/unique_fd.h"

namespace blockswap {

// Descriptors of a doorbell as they travel to a client (over SCM_RIGHTS).
struct DoorbellExport {
  UniqueFd bell;      // read-write
  UniqueFd sleeping;  // read-only
};

// Thread-safe: Ring from any thread or process; the Sleep methods from the
// one thread that sleeps on it.
class Doorbell {
 public:
  // The daemon's doorbell for one device.
  static absl::StatusOr<std::unique_ptr<Doorbell>> Create(absl::string_view name);
  // A client's view of the daemon's doorbell.
  static absl::StatusOr<std::unique_ptr<Doorbell>> Import(DoorbellExport exported);

  absl::StatusOr<DoorbellExport> Export() const;

  // Says that work was published (after publishing it).
  void Ring();

  // The sleeper's half: PrepareToSleep, then look for work, then either
  // Sleep(seen) or Awake(). Daemon side only.
  uint32_t PrepareToSleep();
  void Sleep(uint32_t seen, absl::Duration timeout);
  void Awake();

 private:
  Doorbell() = default;
  std::atomic<uint32_t>& bell() const;
  std::atomic<uint32_t>& sleeping() const;

  SharedMemory bell_memory_;
  SharedMemory sleeping_memory_;
  Mapping bell_map_;      // read-write
  Mapping sleeping_map_;  // read-write in the daemon, read-only in a client
};

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_OS_DOORBELL_H_
