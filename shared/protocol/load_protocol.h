// The load protocol (docs/protocol.md, "Slot generations"), both halves,
// written once: the daemon uses RingProducer and the client library uses RingConsumer.
//
// Generation g of slot s:
//  1. client  (RingConsumer::BeginLoad)  record free[s] — the client's own
//             event — on the stream that used the slot, publish
//             consumed_seq[s] = g-1, then send the request. A side stream
//             (the notifier) waits on free[s] and then runs a host function
//             that publishes releasable_seq[s] = g and rings the device's
//             doorbell (the compute stream gets no host function).
//  2. daemon  (RingProducer::Submit/FindReleased) check consumed_seq[s] ==
//             g-1; once releasable_seq[s] == g (a value ahead of g is the
//             client's protocol error) copy master -> slot, have the copy
//             stream write ready word s = g where the device has stream memory
//             operations, and publish filled_seq[s] = g. Once its own query
//             finds the copy complete, it publishes landed_seq[s] = g
//             (RingProducer::PublishCopied).
//  3. client  (RingConsumer::AwaitLoaded) wait until filled_seq[s] == g,
//             checking the status word, then make the stream wait until ready
//             word s reaches g, or, without ready words, wait on the host until
//             landed_seq[s] reaches g.
// No event crosses processes: every signal between them is a memory word, so
// daemon and client may be of different uids (the driver opens an IPC event
// only in its creator's uid). Every wait is for a value, so none can bind to
// an earlier signal; the order that still matters is the client's own: its
// notifier's wait must follow the free[s] record it stands for.
#ifndef BLOCKSWAP_SHARED_PROTOCOL_LOAD_PROTOCOL_H_
#define BLOCKSWAP_SHARED_PROTOCOL_LOAD_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "shared/backend/backend.h"
#include "shared/base/test_hooks.h"
#include "shared/protocol/ring.h"
#include "shared/protocol/trace_log.h"

namespace blockswap {

// Each record, wait and publish of the protocol. The mutation tests switch
// one off at a time (SkipProtocolStepForTesting) to prove that the suite
// notices; production code never calls the switch.
enum class ProtocolStep : uint32_t {
  kClientRecordFree,
  kClientPublishConsumed,
  kClientAwaitFilled,
  // The client's wait for the copy: its stream's on the ready word, or,
  // without ready words, its own on landed_seq.
  kClientStreamWaitReady,
  kDaemonAwaitFree,  // the daemon's check of releasable_seq before a copy
  // The ready word's write behind the copy, or landed_seq's publication.
  kDaemonRecordReady,
  kDaemonPublishFilled,
  // The notifier: the daemon's one sign that a slot is free.
  kClientNotifyRelease,
  // A staged copy (shared/copy/staged_copier.h): the device copy of a
  // chunk is queued only once its memcpy into a staging buffer completed,
  // and a staging buffer is refilled only once the device copy that read it
  // completed.
  kDaemonAwaitStaging,
  kDaemonAwaitStagingReuse,
  // A ring the trainer fills itself (client/core/trainer_copy_ring.h): its
  // copy stream waits for the compute stream's `free` of the slot, and the
  // compute stream for the copy's `filled`.
  kTrainerCopyAwaitFree,
  kTrainerStreamWaitFilled,
};
// The steps whose loss is a correctness bug: skipping any one of them must
// make a test see wrong bytes or an error.
inline constexpr ProtocolStep kSafetyProtocolSteps[] = {
    ProtocolStep::kClientRecordFree,   ProtocolStep::kClientPublishConsumed,
    ProtocolStep::kClientAwaitFilled,  ProtocolStep::kClientStreamWaitReady,
    ProtocolStep::kDaemonAwaitFree,    ProtocolStep::kDaemonRecordReady,
    ProtocolStep::kDaemonPublishFilled, ProtocolStep::kClientNotifyRelease};
// The safety steps of staged copies only: their loss must show in a daemon
// that stages its masters (pinning = "never").
inline constexpr ProtocolStep kStagingProtocolSteps[] = {ProtocolStep::kDaemonAwaitStaging,
                                                         ProtocolStep::kDaemonAwaitStagingReuse};
// The safety steps of trainer copies: their loss must show in a client that
// copies itself (BLOCKSWAP_COPY=trainer).
inline constexpr ProtocolStep kTrainerCopySteps[] = {ProtocolStep::kTrainerCopyAwaitFree,
                                                     ProtocolStep::kTrainerStreamWaitFilled};

absl::string_view ProtocolStepName(ProtocolStep step);
absl::StatusOr<ProtocolStep> ParseProtocolStep(absl::string_view name);
inline void PrintTo(ProtocolStep step, std::ostream* os) { *os << ProtocolStepName(step); }
// The name with '_' for '-': an identifier, as GoogleTest wants for the name
// of a test parameterized by the step.
std::string ProtocolStepIdentifier(ProtocolStep step);
// Switching steps off exists only in a build with test hooks
// (shared/base/test_hooks.h); elsewhere every step is always taken.
#if BLOCKSWAP_TEST_HOOKS
// Process-wide; for tests only. Breaks the protocol on purpose.
void SkipProtocolStepForTesting(ProtocolStep step);
#endif
// Whether `step` is switched off; for the steps taken outside this file (a
// staged copy's). Always false without test hooks.
bool ProtocolStepSkipped(ProtocolStep step);
// With test hooks, SkipProtocolStepForTesting for every step named
// (comma-separated) in the environment variable
// BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS, so that the mutation tests can break the
// real daemon and client library; unknown names are an error. Without, it
// reads nothing and returns OK.
absl::Status SkipProtocolStepsFromEnvironment();

// The daemon's half for one ring. Never blocks: a request whose slot is still
// in use waits in the producer until FindReleased() (or Poll()) finds it
// released (releasable_seq); ready copies are then issued in request order.
// Thread-compatible: the daemon's device worker owns it.
// How the bytes of one copy reach a slot, when not by one CopyHostToDevice
// from a pinned source: a master that is not pinned is staged through pinned
// buffers (shared/copy/staged_copier.h). Used by one thread, the one that
// issues the stream's work.
class SlotCopier {
 public:
  virtual ~SlotCopier() = default;
  // Queues on `stream` every device copy that writes [device_dst, +bytes)
  // from `source`, so that what is queued on `stream` after it returns (the
  // ready word or record) completes only after those bytes are in place.
  virtual absl::Status Copy(Stream& stream, void* device_dst, const void* source, size_t bytes) = 0;
};

class RingProducer {
 public:
  // `ring` and `copy_stream` (on the ring's device) must outlive this object.
  RingProducer(DaemonRing& ring, Stream& copy_stream);

  // Validates a request to load `bytes` from host memory `source` into
  // generation `generation` of `slot` and queues it. A request that breaks
  // the protocol fails the ring (Fail) and returns the error; nothing is
  // copied. `source` must stay valid until the copy completes. `copier`
  // (null: one CopyHostToDevice) must outlive the copy's issue.
  absl::Status Submit(uint32_t slot, uint32_t generation, const void* source, size_t bytes,
                      SlotCopier* copier = nullptr);

  // When the daemon learnt that a copy's slot was released.
  enum class ReleaseSeen : uint8_t {
    kAtRequest,       // releasable_seq said so when the request was first looked at
    kByNotification,  // it said so later: the copy waited for the client
  };

  // What Poll issued, for the daemon's trace (trace_log.h) and statistics.
  struct Issued {
    uint32_t slot = 0;
    uint32_t generation = 0;
    uint64_t bytes = 0;
    uint64_t issued_ns = 0;  // before the copy was queued
    uint64_t filled_ns = 0;  // after filled_seq was published
    ReleaseSeen release = ReleaseSeen::kAtRequest;
    uint64_t notified_ns = 0;  // kByNotification: when the client's notifier ran
  };

  // A queued copy whose slot FindReleased found released: ready to issue.
  struct Ready {
    uint32_t slot = 0;
    uint32_t generation = 0;
    uint64_t bytes = 0;
    uint64_t ready_ns = 0;  // when its release was found
  };

  // Finds the queued copies whose slot the client has released
  // (releasable_seq) and marks them ready; returns how many, and appends
  // each to `ready` when given. A released value ahead of a copy's
  // generation fails the ring (the client broke the protocol).
  absl::StatusOr<int> FindReleased(std::vector<Ready>* ready = nullptr);
  // The ready copy requested first (a client's request order is its wait
  // order), if any: what IssueOldestReady would issue.
  std::optional<Ready> OldestReady() const;
  // Issues OldestReady's copy and appends it to `issued` when given;
  // FAILED_PRECONDITION when none is ready. A device error fails the ring.
  absl::Status IssueOldestReady(std::vector<Issued>* issued = nullptr);
  // FindReleased, then every ready copy in request order; returns how many
  // were issued. For a ring that shares its copy stream with nobody.
  absl::StatusOr<int> Poll(std::vector<Issued>* issued = nullptr);

  // Whether a pending copy's slot was released by the client and not yet
  // found: the device worker's reason not to sleep.
  bool HasAnnouncedRelease() const;

  bool has_pending() const { return pending_count() > 0; }
  int pending_count() const;
  // Whether a queued copy still waits for its slot's release (not ready).
  bool awaits_release() const;
  // Publishes `error` in the status word (the first error sticks) and wakes
  // every waiter of the ring. Where the ring has ready words, queues writes
  // to them on the copy stream (see TakeQueuedWordWrites).
  void Fail(const absl::Status& error, uint32_t slot = UINT32_MAX);
  // Whether Fail queued writes to the ring's ready words on the copy stream
  // since the last call. The caller must track them as it tracks copies: the
  // words' page may be unregistered only once those writes have run (a write
  // to an unregistered page faults the daemon's context on a GPU).
  bool TakeQueuedWordWrites() { return std::exchange(word_writes_queued_, false); }
  // Marks the daemon alive for the client's staleness check.
  void Heartbeat();
  // Publishes that the copy of (`slot`, `generation`) completed, as the
  // daemon's own query of its copy stream found, having taken `stream_time`
  // of the copy stream: landed_seq, and DaemonControlBlock::copy_ns.
  void PublishCopied(uint32_t slot, uint32_t generation, absl::Duration stream_time);
  absl::Status status() const;

 private:
  struct PendingLoad {
    bool active = false;
    uint32_t generation = 0;
    const void* source = nullptr;
    size_t bytes = 0;
    SlotCopier* copier = nullptr;  // null: one CopyHostToDevice
    uint64_t request_seq = 0;      // the order of Submit calls
    bool looked_at = false;        // FindReleased saw it once
    // Found released: waits for IssueOldestReady, seen thus.
    bool ready = false;
    ReleaseSeen seen = ReleaseSeen::kAtRequest;
  };
  // Whether the client released `load`'s slot for its generation.
  bool Released(uint32_t slot, const PendingLoad& load) const;
  absl::Status Issue(uint32_t slot, const PendingLoad& load, ReleaseSeen release,
                     std::vector<Issued>* issued);

  DaemonRing& ring_;
  Stream& copy_stream_;
  // The ready load requested first; pending_.size() when none.
  uint32_t OldestReadySlot() const;

  std::vector<PendingLoad> pending_;
  uint64_t next_request_seq_ = 0;
  absl::Status status_;
  bool word_writes_queued_ = false;  // see TakeQueuedWordWrites
};

struct ConsumerOptions {
  // How long AwaitLoaded waits for a generation before DEADLINE_EXCEEDED.
  absl::Duration wait_timeout = absl::Seconds(30);
  // A daemon heartbeat older than this is UNAVAILABLE; zero disables it.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // Checked with the status word on every wake: a non-OK answer (the
  // client's connection to the daemon broke, say) ends a wait at once.
  std::function<absl::Status()> liveness = {};
  // The side stream (on the ring's device) that tells the daemon when a
  // slot's free[s] has completed: it waits on free[s], then a host function
  // publishes releasable_seq and rings the ring's doorbell, if any. Null: the
  // release is published on the host after synchronising the stream that
  // used the slot (for a stream whose work runs inline, as a host trainer's
  // does). Must outlive the consumer's notifications: the caller destroys
  // (drains) it before the ring.
  Stream* notifier = nullptr;
};

// The client's half for one ring. Thread-compatible: one thread drives it.
class RingConsumer {
 public:
  // `ring` must outlive this object.
  RingConsumer(RingImport& ring, ConsumerOptions options = {});

  // Releases `slot`, saying that the work on `stream` so far is done with
  // it: once its outstanding generation is filled (a slot's next free is
  // recorded only after filled_seq reached the outstanding generation, even
  // one that was never used), records free[s] on `stream` and publishes
  // consumed_seq. Releasing again after a further use records again. Tells
  // the daemon nothing: BeginLoad's release, the last before a request, is
  // the one announced (releasable_seq).
  absl::Status Release(uint32_t slot, Stream& stream);

  // Step 1 for `slot`: releases it, queues the announcement of that release
  // (releasable_seq, once its free[s] has completed) and returns the
  // generation to request.
  absl::StatusOr<uint32_t> BeginLoad(uint32_t slot, Stream& stream);

  // Step 3 for `slot`'s outstanding generation: waits (timeout, status word)
  // until it is filled, then makes `stream` wait on the ready word (or waits
  // on the host until landed_seq). Also allowed on a released slot whose
  // block is used again (a backward pass).
  absl::Status AwaitLoaded(uint32_t slot, Stream& stream);
  absl::Status AwaitLoaded(uint32_t slot, Stream& stream, absl::Duration timeout);
  // The same, with `timer` (of the ring's device) measuring how long
  // `stream` sits idle at its wait on the ready word. Without ready words
  // the stream waits for nothing and `timer` is left untouched.
  absl::Status AwaitLoaded(uint32_t slot, Stream& stream, absl::Duration timeout, WaitTimer* timer);
  // Traces a measured compute-stream stall at the wait for (slot,
  // generation): TraceKind::kStall. The ring's trace has one writer, this
  // consumer, so the results of timers go through it.
  void RecordStall(uint32_t slot, uint32_t generation, const WaitIdle& idle);

  // Waits until every outstanding generation is filled, so no request of
  // this ring is left in the daemon (re-prepare, teardown).
  absl::Status Drain();
  absl::Status Drain(absl::Duration timeout);

  // The ring's status word: OK, or the error that failed the ring in the
  // daemon, a daemon restart, or a silent daemon (heartbeat). Not OK also
  // releases the ring's ready words (RingImport::AbandonReadyWords).
  absl::Status CheckHealth() const;
  // The copy-stream time of the ring's copies the daemon has seen complete
  // so far (DaemonControlBlock::copy_ns).
  absl::Duration CopyTimeSoFar() const;

  // The generation last requested for `slot` (0: never).
  uint32_t requested(uint32_t slot) const { return requested_[slot]; }
  RingImport& ring() const { return ring_; }

 private:
  absl::Status AwaitFilled(uint32_t slot, uint32_t generation, absl::Duration timeout);
  // Waits (timeout, status word) until landed_seq[slot] reaches
  // `generation`: the ring's ready wait where it has no ready words.
  absl::Status AwaitLanded(uint32_t slot, uint32_t generation, absl::Duration timeout);
  // CheckHealth's verdict, without its consequence.
  absl::Status RingHealth() const;
  // Queues the notification that generation `releasable` may be copied into
  // `slot` once the free[s] just recorded on `stream` has completed.
  absl::Status NotifyRelease(uint32_t slot, uint32_t releasable, Stream& stream);
  absl::Status CheckSlot(uint32_t slot) const;
  // Into the ring's trace buffer (trace_log.h): a clock read and a few stores.
  void RecordTrace(TraceKind kind, uint32_t slot, uint32_t generation, uint64_t time_ns,
                   uint64_t value = 0, uint16_t flags = 0);

  RingImport& ring_;
  const ConsumerOptions options_;
  std::vector<uint32_t> requested_;
  std::vector<bool> filled_seen_;  // requested_[s] is known to be filled
};

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_PROTOCOL_LOAD_PROTOCOL_H_
