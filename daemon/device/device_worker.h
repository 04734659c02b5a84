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
#include "daemon/device/latency_histogram.h"
#include "daemon/device/load_resolver.h"
#include "shared/copy/staged_copier.h"
#include "shared/backend/backend.h"
#include "shared/os/doorbell.h"
#include "shared/protocol/load_protocol.h"
#include "shared/protocol/request_queue.h"
#include "shared/protocol/ring.h"
#include "shared/protocol/trace_log.h"

namespace blockswap::daemon {

// Where the errors of a load go: the Load stream that sent the request.
// Send never blocks; a sink whose stream has ended drops events.
class LoadEventSink {
 public:
  virtual ~LoadEventSink() = default;
  virtual void Send(v1::LoadEvent event) = 0;
};

// The event that reports `error` for a load request to its client.
v1::LoadEvent LoadErrorEvent(uint64_t ring_id, uint32_t slot, uint32_t generation,
                             const absl::Status& error);

// One validated load request.
struct LoadTask {
  uint64_t ring_id = 0;
  uint32_t slot = 0;
  uint32_t generation = 0;
  const std::byte* source = nullptr;  // the block's master bytes
  size_t bytes = 0;
  // Keeps `source` mapped until the copy reading it has completed.
  std::shared_ptr<const void> keep_alive;
  std::string model_id;
  // The master is not pinned: copied through the staging buffers.
  bool staged = false;
  uint32_t block = 0;
  std::shared_ptr<LoadEventSink> sink;
  absl::Status rejection;  // set: fail the ring with it instead of loading

  // Where the bytes come from, as either transport resolved them.
  void SetSource(ResolvedLoad resolved) {
    source = resolved.source;
    bytes = resolved.bytes;
    keep_alive = std::move(resolved.keep_alive);
    model_id = std::move(resolved.model_id);
    staged = resolved.staged;
  }
};

struct SlotSnapshot {
  bool loaded = false;  // a load was ever accepted for the slot
  std::string model_id;
  uint32_t block = 0;
  uint32_t filled_seq = 0;
  uint32_t consumed_seq = 0;
};

struct RingSnapshot {
  uint64_t ring_id = 0;
  uint64_t session_id = 0;
  RingShape shape;
  std::vector<SlotSnapshot> slots;
  uint64_t loads = 0;
  uint64_t bytes = 0;
  absl::Status status;  // the error that failed the ring, if any
};

// Who a ring's client trace belongs to, kept after the session ends.
struct RingOwner {
  uint32_t pid = 0;
  std::string client_name;
  uint32_t uid = 0;  // whose trace it is (Admin.Trace shows it to that uid)
};

// One ring's client trace as the daemon read it (validated).
struct RingTrace {
  uint64_t ring_id = 0;
  uint64_t session_id = 0;
  RingOwner owner;
  bool retired = false;  // read when the ring was freed
  std::vector<TraceEvent> events;
  uint64_t lost = 0;
  uint64_t invalid = 0;  // entries that are not the client's kinds, ring or slots
};

// What a worker holds for Admin.Trace: its own events (accepted, release
// notified, copy issued/done, filled, rejected), oldest first, and every
// ring's client trace.
struct DeviceTrace {
  std::vector<TraceEvent> events;
  uint64_t lost = 0;
  uint64_t retired_rings_dropped = 0;
  std::vector<RingTrace> rings;
};

// Events each device worker keeps (about 10k loads) and client traces of
// freed rings it keeps (the newest).
inline constexpr uint32_t kDeviceTraceCapacity = 49152;
inline constexpr size_t kRetiredRingTraces = 128;

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
  uint64_t ring_bytes_share() const { return ring_bytes_share_; }

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
  // The events with time_ns >= since_ns held now; thread-safe, never waits
  // for the worker thread beyond rings_mu_.
  DeviceTrace ReadTrace(uint64_t since_ns) const;

 private:
  struct RingState;

  DeviceWorker(Device& device, uint64_t boot_id, WorkerMemoryOptions memory,
               std::optional<StagingOptions> staging, std::unique_ptr<StagedCopier> staged_copier,
               Reservation staging_charge, CopyWeights copy_weights,
               std::unique_ptr<Stream> copy_stream, std::unique_ptr<Doorbell> doorbell);
  // The copier for a staged load, made on first use; the error that keeps
  // it from being made.
  absl::StatusOr<StagedCopier*> StagedCopierForLoad() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // The node budget's charge and the device reserve's check for a ring of
  // `bytes`; alloc_mu_ held, so that two rings never both take the last of
  // the device's free memory.
  absl::StatusOr<Reservation> ChargeRingMemory(uint64_t ring_id, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(alloc_mu_);
  void Run();
  // Whether work waits: a queued task or an entry in a request ring.
  bool HasWork();
  void ProcessTasks(std::deque<LoadTask>& tasks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Takes the entries of every ring's request ring.
  void ReadRequestRings() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // A task for `ring`, from either transport: fails the ring with its
  // rejection, or hands it to the ring's producer. False: the ring failed.
  bool Accept(RingState& ring, LoadTask& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
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
  void IssuedOn(RingState& ring, const std::vector<RingProducer::Issued>& issued,
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
  void TrackWordWrites(RingState& ring) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  void Report(RingState& ring, const absl::Status& error, uint32_t slot, uint32_t generation,
              const std::shared_ptr<LoadEventSink>& sink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_);
  // Into trace_ (the worker thread's own ring).
  void RecordTrace(TraceKind kind, const RingState& ring, uint32_t slot, uint32_t generation,
                   uint64_t bytes, uint64_t time_ns = MonotonicNanos());
  static RingTrace ReadRingTrace(const RingState& ring, uint64_t since_ns);

  Device& device_;
  const uint64_t boot_id_;
  const WorkerMemoryOptions memory_;
  const CopyWeights copy_weights_;
  // Held by CreateRing from its memory check to its allocation.
  absl::Mutex alloc_mu_;
  // What each uid's rings hold of this device, and the share "auto" gives
  // one uid (AutoMaxDeviceBytesPerUid) with the key its refusals name.
  std::map<uint32_t, Ledger> ring_bytes_by_uid_ ABSL_GUARDED_BY(alloc_mu_);
  const uint64_t ring_bytes_share_;
  const std::string ring_bytes_share_key_;
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
  std::map<uint64_t, std::unique_ptr<RingState>> rings_ ABSL_GUARDED_BY(rings_mu_);
  std::vector<std::unique_ptr<RingState>> retired_ ABSL_GUARDED_BY(rings_mu_);
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

  // Tracing: trace_ is written by the worker thread only; readers are
  // Admin.Trace threads. Client traces of freed rings are kept, bounded.
  TraceBuffer trace_{kDeviceTraceCapacity};
  std::deque<RingTrace> retired_traces_ ABSL_GUARDED_BY(rings_mu_);
  uint64_t retired_traces_dropped_ ABSL_GUARDED_BY(rings_mu_) = 0;

  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_DEVICE_WORKER_H_
