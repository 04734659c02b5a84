// DaemonCopyRing: a ring the daemon's copy stream fills (copy path
// "daemon"): the imported ring and the client half of the load protocol
// (RingConsumer), behind one mutex — consumed_seq has one writer.
#ifndef BLOCKSWAP_CLIENT_CORE_DAEMON_COPY_RING_H_
#define BLOCKSWAP_CLIENT_CORE_DAEMON_COPY_RING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "client/core/ring.h"
#include "client/core/stall_meter.h"
#include "shared/protocol/load_protocol.h"
#include "shared/protocol/ring.h"

namespace blockswap::client {

// How Ring::Load sends its requests: the ring's shared-memory request ring
// and the device's doorbell (the fast path), or LoadRequests on the
// session's gRPC Load stream (the reference transport).
// BLOCKSWAP_LOAD_TRANSPORT=grpc|shm chooses, and only it; shm by default.
enum class LoadTransport { kGrpc, kShm };
// The transport the environment asks for; INVALID_ARGUMENT for a value
// other than grpc or shm.
absl::StatusOr<LoadTransport> LoadTransportFromEnvironment();

// Thread-safe.
class DaemonCopyRing final : public Ring {
 public:
  // Asks the daemon for a ring on `device` and imports it.
  static absl::StatusOr<std::unique_ptr<DaemonCopyRing>> Create(Connection& connection,
                                                                Device& device,
                                                                uint32_t slot_count,
                                                                uint64_t slot_bytes);
  // Close(default stream) unless the ring was closed.
  ~DaemonCopyRing() override;

  // Ends the ring in the order CUDA's IPC rules need (docs/protocol.md, "Teardown"):
  // waits for the loads still outstanding, records `free` of every slot on
  // `stream`, then synchronises it and the release notifier, closes the
  // imported memory (of this ring and of those Recreate replaced), and only
  // then asks the daemon to free the ring (DestroyRing): freeing exported
  // memory before its importer closed it is undefined. With the daemon gone
  // it records nothing and sends nothing.
  absl::Status Close(Stream& stream, absl::Duration timeout) override;
  using Ring::Close;

  // Replaces the ring by a new one of the same shape on the same device, in
  // the connection's current session (after Connection::Reconnect): every
  // slot starts empty, slot() addresses change. The old ring's memory stays
  // mapped until this Ring is destroyed (work already queued on a stream
  // may still read it). Not thread-safe: no other call on this ring may run
  // meanwhile.
  absl::Status Recreate() override;

  CopyPath copy_path() const override { return CopyPath::kDaemon; }
  uint64_t id() const override { return id_; }
  void* slot(uint32_t s) const override { return ring_ != nullptr ? ring_->slot(s) : nullptr; }

  using Ring::Load;
  using Ring::Release;
  using Ring::Wait;
  absl::Status Load(uint32_t slot, const Model& model, uint32_t block, Stream& stream) override;
  absl::Status Wait(uint32_t slot, Stream& stream, absl::Duration timeout) override;
  absl::Status Release(uint32_t slot, Stream& stream) override;
  // Each measured wait is also traced (kStall) when it idled at least
  // kSmallestTracedStall. nullopt on a ring without ready words.
  absl::StatusOr<std::optional<uint64_t>> WaitTimed(uint32_t slot, Stream& stream,
                                                    absl::Duration timeout) override;
  absl::StatusOr<std::vector<MeasuredStall>> TakeMeasuredStalls(bool wait_for_all) override;
  absl::Status Drain(absl::Duration timeout) override;
  // Whether the daemon has already filled the slot's most recent load.
  bool Filled(uint32_t slot) override;
  // As the daemon measured it (RingConsumer::CopyTimeSoFar).
  std::optional<absl::Duration> CopyTime() override;
  // The ring's status word, explained.
  absl::Status Health() override;
  // DATA_LOSS when the daemon was lost while the caller's stream waited for
  // a copy it had not finished: the watchdog had to release that wait
  // (nobody else could), so the work queued behind it read a slot the copy
  // may never have reached (RingImport::TakeUnfinishedWaits). Over this ring
  // and those Recreate() replaced.
  absl::Status TakeUnfinishedWaits() override;
  // Whether loads travel through the ring's request ring (the daemon
  // granted one, and the fast path was asked for).
  bool has_request_ring() const { return ring_ != nullptr && ring_->has_request_ring(); }
  // The imported ring itself, for tests that misbehave on purpose.
  RingImport& shared_ring_for_testing() const { return *ring_; }

 private:
  DaemonCopyRing(Connection& connection, Device& device, LoadTransport transport,
                 std::unique_ptr<RingImport> ring, std::unique_ptr<Stream> notifier)
      : Ring(device, ring->shape()),
        connection_(connection),
        transport_(transport),
        id_(ring->ring_id()),
        ring_(std::move(ring)),
        ring_session_(connection.token()),
        notifier_(std::move(notifier)),
        consumer_(NewConsumer(*ring_)),
        healing_(ring_.get()),
        requested_(shape().slot_count) {
    WatchLoss(*ring_);
  }
  // Releases `ring`'s ready words when the connection loses the daemon,
  // first copying itself what the daemon left unfinished (Heal).
  void WatchLoss(RingImport& ring) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    loss_watches_.push_back(connection_.WatchLoss([this, &ring] { AbandonHealing(ring); }));
  }
  void AbandonHealing(RingImport& ring) ABSL_LOCKS_EXCLUDED(heal_mu_) {
    ring.AbandonReadyWords([this, &ring](uint32_t slot, uint32_t generation, uint32_t value) {
      return Heal(ring, slot, generation, value);
    });
  }
  // A dead daemon's unfinished copy, done by this process: queues on
  // healer_ the copy of the load of `generation` into `slot` from the
  // master this process maps, then the ready word's write of `value`. False
  // where it cannot: a ring Recreate() replaced, a load other than the one
  // recorded, or a call that failed (the word is then released at once and
  // the wait is unfinished: DATA_LOSS).
  bool Heal(RingImport& ring, uint32_t slot, uint32_t generation, uint32_t value)
      ABSL_LOCKS_EXCLUDED(heal_mu_);
  // Waits for Heal's work; forgets the recorded loads.
  void SynchronizeHealer() ABSL_LOCKS_EXCLUDED(heal_mu_);
  // The CreateRing call and the import, in the connection's current session;
  // a ring created but not imported is destroyed on the daemon.
  static absl::StatusOr<std::unique_ptr<RingImport>> Import(Connection& connection, Device& device,
                                                            uint32_t slot_count,
                                                            uint64_t slot_bytes,
                                                            LoadTransport transport);
  static absl::StatusOr<std::unique_ptr<RingImport>> ImportCreated(
      Connection& connection, Device& device, const v1::RingDescriptor& descriptor,
      LoadTransport transport);
  static absl::Status DestroyOnDaemon(Connection& connection, const std::string& session_token,
                                      uint64_t ring_id, absl::Duration timeout);
  std::unique_ptr<RingConsumer> NewConsumer(RingImport& ring) {
    return std::make_unique<RingConsumer>(
        ring,
        ConsumerOptions{.liveness = [&connection = connection_] { return connection.Liveness(); },
                        .notifier = notifier_.get()});
  }
  absl::Status TakeUnfinishedWaitsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A ring that failed says why: the daemon's own message where it sent one.
  absl::Status Explain(const absl::Status& status) const;
  // FAILED_PRECONDITION once Close has run.
  absl::Status CheckOpen() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Connection& connection_;
  const LoadTransport transport_;
  uint64_t id_;                                       // of ring_ (kept once it is closed)
  std::unique_ptr<RingImport> ring_;                  // replaced by Recreate(), reset by Close()
  std::string ring_session_;                          // the token of the session ring_ belongs to
  std::vector<std::unique_ptr<RingImport>> retired_;  // rings replaced by Recreate()
  // The side stream of the release notifications (RingConsumer): its host
  // functions write into ring_ and retired_, so it is destroyed (drained)
  // before them.
  std::unique_ptr<Stream> notifier_;
  // The watchdog: per imported ring (ring_ and retired_), released when the
  // daemon is lost (RingImport::AbandonReadyWords). Destroyed before them,
  // by Close (the reader thread may run one meanwhile).
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection::LossWatch>> loss_watches_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<RingConsumer> consumer_ ABSL_GUARDED_BY(mu_);
  // A shorter idle time is the wait's own cost, not a stall: tracing it
  // would draw a red hair at every wait (the statistics still count it).
  static constexpr absl::Duration kSmallestTracedStall = absl::Microseconds(10);
  // Waits timed before this ticket belong to a ring replaced by Recreate():
  // their slots and generations mean nothing in consumer_'s trace.
  uint64_t first_traced_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  // The copy time the rings replaced by Recreate() had published.
  absl::Duration retired_copy_time_ ABSL_GUARDED_BY(mu_);
  // What each slot of `healing_` (ring_, recorded apart from mu_: the
  // watchdog runs while a caller may hold mu_) was last asked to load, for
  // Heal; and the stream of Heal's copies and word writes (made at the
  // first loss), synchronised before the memory they write goes (Close,
  // Recreate).
  struct RequestedLoad {
    uint32_t generation = 0;
    std::shared_ptr<MasterView> master;
    uint64_t bytes = 0;
  };
  absl::Mutex heal_mu_ ABSL_ACQUIRED_AFTER(mu_);
  const RingImport* healing_ ABSL_GUARDED_BY(heal_mu_);
  std::vector<RequestedLoad> requested_ ABSL_GUARDED_BY(heal_mu_);
  std::unique_ptr<Stream> healer_ ABSL_GUARDED_BY(heal_mu_);
  StallMeter meter_ ABSL_GUARDED_BY(mu_){
      device(), [this](const MeasuredStall& stall) {
        mu_.AssertHeld();  // the meter runs inside this ring's calls
        if (stall.ticket >= first_traced_ticket_ && stall.idle.idle >= kSmallestTracedStall) {
          consumer_->RecordStall(stall.slot, stall.generation, stall.idle);
        }
      }};
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_DAEMON_COPY_RING_H_
