// DeviceWorker: one per device the daemon drives. It owns the device's copy
// stream and the daemon half (RingProducer) of every ring on the device, and
// runs them on its own thread, so that a copy held back because one client's
// compute still uses its slot never delays another client's copies, and no
// gRPC reactor ever blocks on a device.
//
// The worker sleeps on one thing, the device's doorbell (shared/os/doorbell.h),
// with the timeout of its next fallback poll, copy-completion check or
// heartbeat: the daemon's own threads ring it after queueing work (Submit,
// Reject, RetireRing), and clients ring it after writing their rings' request
// rings (shared/protocol/request_queue.h) and when they release a slot
// (releasable_seq, shared/protocol/load_protocol.h). A client that publishes
// a release without ringing waits for the fallback poll, which slows that
// client only.
//
// Clients share the copy stream fairly: ready copies are issued in each
// ring's request order, and between rings in the order of a CopyScheduler
// (copy_scheduler.h: one copy per ring per turn, weighted by the owner's
// copy_weights entry), with a short copy stream while more than one ring
// is served.
#ifndef BLOCKSWAP_DAEMON_DEVICE_DEVICE_WORKER_H_
#define BLOCKSWAP_DAEMON_DEVICE_DEVICE_WORKER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.pb.h"
#include "daemon/budget/ledger.h"
#include "daemon/budget/memory_budget.h"
#include "daemon/device/copy_scheduler.h"
#include "daemon/device/copy_tracker.h"
#include "daemon/device/device_trace.h"
#include "daemon/device/latency_histogram.h"
#include "daemon/device/load_resolver.h"
#include "daemon/device/load_task.h"
#include "daemon/device/ring_allocator.h"
#include "daemon/device/ring_table.h"
#include "shared/backend/backend.h"
#include "shared/copy/staged_copier.h"
#include "shared/os/doorbell.h"
#include "shared/protocol/load_protocol.h"
#include "shared/protocol/request_queue.h"
#include "shared/protocol/ring.h"
#include "shared/protocol/trace_log.h"

namespace blockswap::daemon {

struct RingSnapshot {
  uint64_t ring_id = 0;
  uint64_t session_id = 0;
  RingShape shape;
  std::vector<SlotSnapshot> slots;
  uint64_t loads = 0;
  uint64_t bytes = 0;
  absl::Status status;  // the error that failed the ring, if any
};

struct DeviceStats {
  uint64_t loads = 0;
  uint64_t bytes = 0;
  double copy_seconds = 0;   // time the copy stream was busy
  uint64_t queue_depth = 0;  // loads accepted but not yet issued
  uint64_t protocol_errors = 0;
  uint64_t rings = 0;
  // How the worker learnt that each issued copy's slot was released
  // (RingProducer::ReleaseSeen).
  uint64_t releases_at_request = 0;
  uint64_t releases_notified = 0;
  // Of loads and bytes: those copied through the staging buffers.
  uint64_t staged_loads = 0;
  uint64_t staged_bytes = 0;
  // From each copy's issue (its slot free) to its completion seen: the copy
  // and its queueing behind others on the copy stream.
  LatencyHistogram load_latency;
};

class DeviceWorker {
 public:
  // `device` must outlive the worker. With `staging`, the worker copies the
  // loads of staged masters through a pool of staging buffers
  // (staged_copier.h), made at start when `staging_at_start` (pinning =
  // "never": every load needs it), else at the first staged load (a node
  // that pins everything holds no pinned staging buffers). Either way the
  // options are checked and the buffers' bytes charged to memory.staging_budget
  // at start, so that masters filling max_memory_bytes cannot leave the
  // first staged load without its buffers; a pool the driver then refuses
  // to pin fails that load's ring with the reason. Without `staging`, a
  // staged load fails its ring. `copy_weights`: each ring's share of the
  // copy stream, by its owner's uid (RingOwner::uid).
  static absl::StatusOr<std::unique_ptr<DeviceWorker>> Start(
      Device& device, uint64_t boot_id, WorkerMemoryOptions memory = {},
      std::optional<StagingOptions> staging = std::nullopt, bool staging_at_start = false,
      CopyWeights copy_weights = {});
  // Stops the thread, waits for issued copies and frees every ring.
  ~DeviceWorker();

  Device& device() const { return device_; }
  // One uid's share of this device's ring memory under
  // max_device_bytes_per_uid = "auto" (AutoMaxDeviceBytesPerUid).
  uint64_t ring_bytes_share() const { return allocator_.share_bytes(); }

  // Creates a ring on this device for `session_id` and returns its export.
  // `owner` labels the ring's trace. With a `resolver` the ring also gets a
  // request ring (the load fast path): the export carries the device's
  // doorbell, and the worker takes the entries its client writes, resolved by
  // `resolver` and validated like Submit's tasks; a bad entry fails the ring.
  // `charged` (the client's quotas) is held with the ring until it is
  // freed, retired or not; the worker adds the node budget's charge for a
  // ring in host memory and, with `device_share` (max_device_bytes_per_uid
  // = "auto"), the charge to its owner's share of this device
  // (AutoMaxDeviceBytesPerUid). RESOURCE_EXHAUSTED when the ring does not
  // fit max_memory_bytes or that share, or would leave less than the device
  // reserve free.
  // Runs on the caller's thread (device allocation can take milliseconds);
  // thread-safe.
  absl::StatusOr<RingExport> CreateRing(uint64_t ring_id, uint64_t session_id,
                                        const RingShape& shape, RingOwner owner = {},
                                        std::shared_ptr<const LoadResolver> resolver = nullptr,
                                        Reservation charged = {}, bool device_share = false);

  // Queues a load for the worker thread. Never blocks. A request that breaks
  // the protocol fails its ring and is reported to task.sink.
  void Submit(LoadTask task);
  // Queues a request that failed validation: the worker fails its ring with
  // `error` (so a client waiting on the ring hears of it) and reports it.
  void Reject(LoadTask task, absl::Status error);

  // Why a ring is retired, which decides when it may be freed (ring_table.h).
  using RetireReason = ::blockswap::daemon::RetireReason;

  // Stops serving the ring and frees it once nothing can still touch it
  // (RetireReason). `owner` is needed for kOwnerDetached only.
  void RetireRing(uint64_t ring_id, RetireReason reason,
                  std::shared_ptr<const UniqueFd> owner = nullptr);

  // Fails every ring with `error` (shutdown): clients waiting on a slot see
  // it in the status word at once.
  void FailAllRings(const absl::Status& error);

  // True once every retired ring has been freed, but for those held for a
  // process that may still map them (kOwnerDetached, process alive).
  bool idle() const;

  std::vector<RingSnapshot> Snapshot() const;
  DeviceStats stats() const;
  // The events with time_ns >= since_ns held now, and the client traces of
  // the rings (live, retired or freed); thread-safe, never waits for the
  // worker thread beyond rings_mu_.
  DeviceTrace ReadTrace(uint64_t since_ns) const;

 private:
  DeviceWorker(Device& device, uint64_t boot_id, WorkerMemoryOptions memory,
               std::optional<StagingOptions> staging, std::unique_ptr<StagedCopier> staged_copier,
               Reservation staging_charge, CopyWeights copy_weights,
               std::unique_ptr<Stream> copy_stream, std::unique_ptr<Doorbell> doorbell);
  // The copier for a staged load, made on first use; the error that keeps
  // it from being made.
  absl::StatusOr<StagedCopier*> StagedCopierForLoad() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  void Run();
  // Whether work waits: a queued task or an entry in a request ring.
  bool HasWork();
  void ProcessTasks(std::deque<LoadTask>& tasks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Takes the entries of every ring's request ring.
  void ReadRequestRings() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // A task for `ring`, from either transport: fails the ring with its
  // rejection, or hands it to the ring's producer. False: the ring failed.
  bool Accept(ServedRing& ring, LoadTask& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Finds released slots and issues what can be issued; returns when copies
  // still waiting for a `free` should next be polled (InfiniteFuture: none
  // waits).
  absl::Time PollRings() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Issues ready copies in scheduler_'s order while the copy stream has room
  // (CopyScheduler::stream_limit), appending them to `batch`, or tracking
  // each on its own while the stream is limited (so that its completion, not
  // a whole batch's, makes room for the next).
  void IssueReadyCopies(std::vector<CopyTracker::Copy>& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Hands `batch` to copies_; a device failure fails every ring.
  void TrackCopies(std::vector<CopyTracker::Copy>& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Traces and counts what Poll issued on `ring`, and hands it to copies_.
  void IssuedOn(ServedRing& ring, const std::vector<RingProducer::Issued>& issued,
                std::vector<CopyTracker::Copy>& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Retires completed copies; returns when to look again.
  absl::Time RetireCopies() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // One error line for the device's first failure (sticky, as CUDA's are).
  void LogDeviceFailure(const absl::Status& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  void Heartbeat() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Frees the retired rings that nothing can touch any more; true while
  // one still waits for the device (copies, `free` records), which the worker
  // polls for quickly, unlike a ring held for a live process.
  bool FreeRetiredRings() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Tracks the writes to `ring`'s ready words that its producer's Fail
  // queued on the copy stream, if any (CopyTracker::TrackWordWrites).
  void TrackWordWrites(ServedRing& ring) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  void Report(ServedRing& ring, const absl::Status& error, uint32_t slot, uint32_t generation,
              const std::shared_ptr<LoadEventSink>& sink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Into trace_ (the worker thread's own events).
  void RecordTrace(TraceKind kind, const ServedRing& ring, uint32_t slot, uint32_t generation,
                   uint64_t bytes, uint64_t time_ns = MonotonicNanos());
  static RingTrace ReadRingTrace(const ServedRing& ring, uint64_t since_ns);

  Device& device_;
  const CopyWeights copy_weights_;
  RingAllocator allocator_;
  // The options of a pool made at the first staged load (at start under
  // staging_at_start), and the charge to the node's budget taken for the
  // pool at start either way (so the pool charges none).
  const std::optional<StagingOptions> staging_;
  const Reservation staging_charge_;
  // Used by the worker thread only, after construction. The staging
  // buffers go after the copy stream that reads them (declared before it).
  std::unique_ptr<StagedCopier> staged_copier_ ABSL_GUARDED_BY(rings_mu_);  // null: none yet
  std::unique_ptr<Stream> copy_stream_;
  const std::unique_ptr<Doorbell> doorbell_;                       // thread-safe
  std::vector<RequestValues> entries_ ABSL_GUARDED_BY(rings_mu_);  // ReadRequestRings scratch

  mutable absl::Mutex queue_mu_;
  std::deque<LoadTask> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stop_ ABSL_GUARDED_BY(queue_mu_) = false;

  // Held by the worker thread while it works on rings (microseconds at a
  // time), and by the callers of CreateRing, RetireRing and Snapshot.
  mutable absl::Mutex rings_mu_;
  RingTable rings_ ABSL_GUARDED_BY(rings_mu_);
  uint64_t protocol_errors_ ABSL_GUARDED_BY(rings_mu_) = 0;
  LatencyHistogram load_latency_ ABSL_GUARDED_BY(rings_mu_);
  bool device_failure_logged_ ABSL_GUARDED_BY(rings_mu_) = false;
  // The device's lack of stream words is logged once, at its first ring.
  std::atomic<bool> stream_words_logged_{false};
  absl::Time last_heartbeat_ ABSL_GUARDED_BY(rings_mu_) = absl::InfinitePast();

  // The copies issued and not yet seen complete, with their keep-alives.
  CopyTracker copies_ ABSL_GUARDED_BY(rings_mu_);
  // The order of ready copies between rings, and how many copies are on the
  // copy stream now (issued, not yet seen complete by copies_).
  CopyScheduler scheduler_ ABSL_GUARDED_BY(rings_mu_);
  size_t copies_on_stream_ ABSL_GUARDED_BY(rings_mu_) = 0;
  std::vector<uint64_t> ready_rings_ ABSL_GUARDED_BY(rings_mu_);       // scratch
  std::vector<RingProducer::Ready> ready_ ABSL_GUARDED_BY(rings_mu_);  // scratch
  std::atomic<uint64_t> loads_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> releases_at_request_{0};
  std::atomic<uint64_t> releases_notified_{0};
  std::atomic<uint64_t> staged_loads_{0};
  std::atomic<uint64_t> staged_bytes_{0};

  // Written by the worker thread only; read by Admin.Trace threads.
  DeviceTraceLog trace_;

  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_DEVICE_WORKER_H_
