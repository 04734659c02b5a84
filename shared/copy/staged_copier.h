// StagedCopier: how a load from a master that is not pinned reaches its slot
// (the reference's staged copier, as the daemon's policy: pinning = "auto" or
// "never", daemon/store/master_pinning.h). The block is cut into chunks of
// one staging buffer each (staging_pool.h); staging threads memcpy chunk k+1,
// k+2, ... from the pageable master into free buffers while the copy stream
// DMAs chunk k from its buffer to the slot:
//
//   device worker                      staging threads          copy stream
//   take buffer b (its `consumed`
//     complete), hand chunk k to  -->  memcpy chunk k -> b
//   wait for chunk k's memcpy     <--  done
//   copy b -> slot + k*chunk, record consumed[b]  ------------>  DMA, record
//
// Two waits make it right (each a ProtocolStep the mutation tests drop):
// the device copy of a chunk is queued only after its memcpy completed
// (kDaemonAwaitStaging), and a buffer is refilled only after the record of
// consumed[b] that follows its last device copy completed
// (kDaemonAwaitStagingReuse). Copy returns once every chunk's device copy is
// queued, so the ready word or record the producer queues next covers them
// all: same load protocol, same client code.
//
// Staging threads: 4 by default. One thread's memcpy from pageable memory into
// a pinned buffer moves about 8-12 GB/s on current servers (one core's
// load/store bandwidth), below a PCIe 4 x16 host-to-device copy (about 25 GB/s)
// and half of PCIe 5 (about 50 GB/s); four together keep either fed, with the
// buffers the copy stream is not reading (buffers - 1) as their work queue.
// More gain nothing once memory bandwidth is the limit (a staged byte is read
// from the master, written to the buffer and read again by the DMA) and take
// cores from the trainers.
//
// The device worker's thread blocks in Copy until the block's last chunk is
// staged (the DMA of the chunks before runs meanwhile): the copies of every
// ring of the device queue on its one copy stream anyway, so what waits is
// only the worker's look at new requests, for about one block's copy time.
#ifndef BLOCKSWAP_SHARED_COPY_STAGED_COPIER_H_
#define BLOCKSWAP_SHARED_COPY_STAGED_COPIER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "shared/copy/staging_pool.h"
#include "shared/backend/backend.h"
#include "shared/protocol/load_protocol.h"

namespace blockswap {

class StagedCopier final : public SlotCopier {
 public:
  // The pool of `device` and its staging threads. `device` must outlive it.
  static absl::StatusOr<std::unique_ptr<StagedCopier>> Start(Device& device,
                                                             const StagingOptions& options);
  // Joins the staging threads (no Copy may be running). The device copies
  // already queued still read the pool's buffers: the caller synchronizes the
  // copy stream first.
  ~StagedCopier() override;

  // One thread at a time (the device worker's): see above.
  absl::Status Copy(Stream& stream, void* device_dst, const void* source, size_t bytes) override;

  const StagingPool& pool() const { return *pool_; }

 private:
  // One chunk for a staging thread: memcpy `bytes` from `source` into
  // `buffer`, then set `done`.
  struct Job {
    std::byte* buffer = nullptr;
    const std::byte* source = nullptr;
    size_t bytes = 0;
    size_t buffer_index = 0;
    bool done = false;  // guarded by mu_
  };

  StagedCopier(std::unique_ptr<StagingPool> pool, const StagingOptions& options);
  void RunStagingThread(uint64_t seed);
  // Blocks until the copy stream has passed the record of consumed[buffer].
  absl::Status AwaitConsumed(size_t buffer);
  void AwaitStaged(const Job& job) ABSL_LOCKS_EXCLUDED(mu_);
  void Hand(Job* job) ABSL_LOCKS_EXCLUDED(mu_);

  const std::unique_ptr<StagingPool> pool_;
  const int64_t jitter_us_;
  size_t next_buffer_ = 0;  // the device worker's thread only: round robin

  absl::Mutex mu_;
  std::deque<Job*> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started once the rest exists
};

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_COPY_STAGED_COPIER_H_
