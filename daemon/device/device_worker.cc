#include "daemon/device/device_worker.h"

#include <poll.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/budget/memory_limit.h"
#include "daemon/device/staging_charge.h"
#include "daemon/runtime/logging.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

// The fallback poll of a copy that waits for its slot's release: the
// client's doorbell normally wakes the worker when it publishes the release,
// so this only serves a client that publishes without ringing (slowly: it
// costs that client, not the daemon's core nor other clients). Each ring's period
// doubles up to kFallbackPollMax while its polls make no progress; a new
// request for the ring or an issued copy resets it.
constexpr absl::Duration kFallbackPoll = absl::Milliseconds(1);
constexpr absl::Duration kFallbackPollMax = absl::Milliseconds(8);
constexpr absl::Duration kRetirePoll = absl::Milliseconds(1);
constexpr absl::Duration kHeartbeatPeriod = absl::Milliseconds(100);

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceWorker>> DeviceWorker::Start(
    Device& device, uint64_t boot_id, WorkerMemoryOptions memory,
    std::optional<StagingOptions> staging, bool staging_at_start, CopyWeights copy_weights) {
  std::unique_ptr<StagedCopier> staged_copier;
  Reservation staging_charge;
  if (staging.has_value()) {
    // The pool's bytes are charged here, whenever it is made: so the pool
    // itself charges nothing.
    BLOCKSWAP_ASSIGN_OR_RETURN(staging_charge,
                               ChargeStagingPool(device, *staging, memory.staging_budget));
    if (staging_at_start) {
      BLOCKSWAP_ASSIGN_OR_RETURN(staged_copier, StagedCopier::Start(device, *staging));
    }
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, device.CreateStream());
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<Doorbell> doorbell,
                             Doorbell::Create(absl::StrCat(device.info().uuid, "-doorbell")));
  return std::unique_ptr<DeviceWorker>(new DeviceWorker(
      device, boot_id, memory, std::move(staging), std::move(staged_copier),
      std::move(staging_charge), std::move(copy_weights), std::move(stream), std::move(doorbell)));
}

DeviceWorker::DeviceWorker(Device& device, uint64_t boot_id, WorkerMemoryOptions memory,
                           std::optional<StagingOptions> staging,
                           std::unique_ptr<StagedCopier> staged_copier, Reservation staging_charge,
                           CopyWeights copy_weights, std::unique_ptr<Stream> copy_stream,
                           std::unique_ptr<Doorbell> doorbell)
    : device_(device),
      copy_weights_(std::move(copy_weights)),
      allocator_(device, boot_id, memory),
      staging_(std::move(staging)),
      staging_charge_(std::move(staging_charge)),
      staged_copier_(std::move(staged_copier)),
      copy_stream_(std::move(copy_stream)),
      doorbell_(std::move(doorbell)),
      copies_(device, *copy_stream_),
      thread_([this] { Run(); }) {}

DeviceWorker::~DeviceWorker() {
  {
    absl::MutexLock lock(&queue_mu_);
    stop_ = true;
  }
  doorbell_->Ring();
  thread_.join();
  // Rings go only after the copies that write into them.
  (void)copy_stream_->Synchronize();
  absl::MutexLock lock(&rings_mu_);
  rings_.ReleaseForExit();
}

absl::StatusOr<RingExport> DeviceWorker::CreateRing(uint64_t ring_id, uint64_t session_id,
                                                    const RingShape& shape, RingOwner owner,
                                                    std::shared_ptr<const LoadResolver> resolver,
                                                    Reservation charged, bool device_share) {
  BLOCKSWAP_RETURN_IF_ERROR(device_.health());
  BLOCKSWAP_ASSIGN_OR_RETURN(RingAllocator::Allocated allocated,
                             allocator_.Allocate(ring_id, shape, owner.uid, device_share));
  charged.Add(std::move(allocated.charged));
  std::unique_ptr<DaemonRing> ring = std::move(allocated.ring);
  if (ring->ready_words() == nullptr && !stream_words_logged_.exchange(true)) {
    const absl::Status why = device_.stream_words_status();
    Log(LogLevel::kWarning,
        absl::StrCat("device ", device_.info().uuid, " has no usable stream words (",
                     why.ok() ? "no reason given" : why.message(),
                     "): each client waits on the host for its slot's copy before its stream "
                     "may use the slot, so its CPU no longer runs ahead of the copies"));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(RingExport exported, ring->Export());
  auto state = std::make_unique<ServedRing>();
  state->charged = std::move(charged);
  state->ring_id = ring_id;
  state->session_id = session_id;
  state->owner = std::move(owner);
  state->producer = std::make_unique<RingProducer>(*ring, *copy_stream_);
  // Every ring's client rings the doorbell when a slot's free[s] completes.
  BLOCKSWAP_ASSIGN_OR_RETURN(exported.doorbell, doorbell_->Export());
  if (resolver != nullptr) {
    exported.request_ring_capacity = kRequestRingCapacity;
    state->requests = std::make_unique<RequestQueueReader>(ring->client_control(), ring->control());
    state->resolver = std::move(resolver);
  }
  state->ring = std::move(ring);
  state->residency.resize(shape.slot_count);
  state->pending_keep_alive.resize(shape.slot_count);
  state->poll_period = kFallbackPoll;
  const uint32_t weight = CopyWeightOf(copy_weights_, state->owner.uid);
  absl::MutexLock lock(&rings_mu_);
  rings_.Add(std::move(state));
  scheduler_.AddRing(ring_id, weight);
  return exported;
}

void DeviceWorker::Submit(LoadTask task) {
  {
    absl::MutexLock lock(&queue_mu_);
    queue_.push_back(std::move(task));
  }
  doorbell_->Ring();
}

void DeviceWorker::Reject(LoadTask task, absl::Status error) {
  task.rejection = std::move(error);
  Submit(std::move(task));
}

void DeviceWorker::RetireRing(uint64_t ring_id, RetireReason reason,
                              std::shared_ptr<const UniqueFd> owner) {
  absl::MutexLock lock(&rings_mu_);
  if (!rings_.Retire(ring_id, reason, std::move(owner))) return;
  scheduler_.RemoveRing(ring_id);
  doorbell_->Ring();  // frees it now, not at the next heartbeat
}

void DeviceWorker::FailAllRings(const absl::Status& error) {
  absl::MutexLock lock(&rings_mu_);
  for (auto& [id, state] : rings_.live()) state->producer->Fail(error);
}

bool DeviceWorker::idle() const {
  absl::MutexLock lock(&rings_mu_);
  return rings_.idle();
}

void DeviceWorker::Run() {
  // Once for the thread's life: the backend's device guards then switch
  // nothing on each copy, record and query. Failing, each guard switches.
  if (absl::Status bound = device_.UseOnThisThread(); !bound.ok()) {
    Log(LogLevel::kWarning, absl::StrCat("device worker of ", device_.info().uuid,
                                         " could not make its device current: ", bound.message()));
  }
  absl::Duration wait = kHeartbeatPeriod;
  while (true) {
    // The doorbell's protocol (shared/os/doorbell.h): say we may sleep, read
    // the bell, look for work, and sleep only if none was found.
    const uint32_t seen = doorbell_->PrepareToSleep();
    if (HasWork()) {
      doorbell_->Awake();
    } else {
      doorbell_->Sleep(seen, wait);
    }
    std::deque<LoadTask> tasks;
    {
      absl::MutexLock lock(&queue_mu_);
      if (stop_) return;
      tasks.swap(queue_);
    }
    absl::MutexLock lock(&rings_mu_);
    ProcessTasks(tasks);
    ReadRequestRings();
    // A full copy stream first makes room: a copy may have completed.
    if (copies_on_stream_ >= scheduler_.stream_limit()) (void)RetireCopies();
    const absl::Time next_poll = std::min(PollRings(), RetireCopies());
    Heartbeat();
    const bool freeing = FreeRetiredRings();
    wait = std::min(kHeartbeatPeriod, std::max(absl::ZeroDuration(), next_poll - absl::Now()));
    if (freeing) wait = std::min(wait, kRetirePoll);
  }
}

bool DeviceWorker::HasWork() {
  {
    absl::MutexLock lock(&queue_mu_);
    if (!queue_.empty() || stop_) return true;
  }
  absl::MutexLock lock(&rings_mu_);
  for (const auto& [id, state] : rings_.live()) {
    // A release the client announced must be looked at before sleeping: its
    // ring of the doorbell may have come before this pass read the bell.
    if (state->producer->HasAnnouncedRelease()) return true;
    if (state->requests != nullptr && state->producer->status().ok() &&
        state->requests->HasRequests()) {
      return true;
    }
  }
  return false;
}

void DeviceWorker::ProcessTasks(std::deque<LoadTask>& tasks) {
  for (LoadTask& task : tasks) {
    ServedRing* ring = rings_.Find(task.ring_id);
    if (ring == nullptr) {
      if (task.sink != nullptr) {
        task.sink->Send(LoadErrorEvent(
            task.ring_id, task.slot, task.generation,
            absl::NotFoundError(absl::StrCat("ring ", task.ring_id, " no longer exists on ",
                                             device_.info().uuid))));
      }
      continue;
    }
    if (task.sink != nullptr) ring->last_sink = task.sink;
    (void)Accept(*ring, task);
  }
}

void DeviceWorker::ReadRequestRings() {
  for (auto& [id, state] : rings_.live()) {
    ServedRing& ring = *state;
    if (ring.requests == nullptr || !ring.producer->status().ok() ||
        !ring.requests->HasRequests()) {
      continue;
    }
    entries_.clear();
    if (absl::Status taken = ring.requests->Take(entries_); !taken.ok()) {
      ++protocol_errors_;
      ring.producer->Fail(taken);
      Report(ring, taken, UINT32_MAX, 0, ring.last_sink);
      continue;
    }
    for (const RequestValues& entry : entries_) {
      // `entry` is the worker's own copy: the client may rewrite the shared
      // one at any time, but not what is validated here.
      LoadTask task;
      task.ring_id = ring.ring_id;
      task.slot = entry.slot;
      task.generation = entry.generation;
      task.block = entry.block;
      task.sink = ring.last_sink;
      absl::StatusOr<ResolvedLoad> resolved =
          ring.resolver->Resolve(ring.ring_id, ring.ring->shape(), entry);
      if (resolved.ok()) {
        task.SetSource(*std::move(resolved));
      } else {
        task.rejection = resolved.status();
        Report(ring, task.rejection, task.slot, task.generation, task.sink);
      }
      if (!Accept(ring, task)) break;  // the ring failed: the rest is moot
    }
  }
}

bool DeviceWorker::Accept(ServedRing& ring, LoadTask& task) {
  if (!task.rejection.ok()) {
    // Already answered to the client; the status word must say it too.
    ++protocol_errors_;
    RecordTrace(TraceKind::kRejected, ring, task.slot, task.generation, task.bytes);
    ring.producer->Fail(task.rejection, task.slot);
    return false;
  }
  absl::StatusOr<StagedCopier*> copier = nullptr;
  if (task.staged) copier = StagedCopierForLoad();
  absl::Status submitted = copier.ok() ? ring.producer->Submit(task.slot, task.generation,
                                                               task.source, task.bytes, *copier)
                                       : copier.status();
  if (!copier.ok()) ring.producer->Fail(submitted, task.slot);
  if (!submitted.ok()) {
    ++protocol_errors_;
    RecordTrace(TraceKind::kRejected, ring, task.slot, task.generation, task.bytes);
    Report(ring, submitted, task.slot, task.generation, task.sink);
    return false;
  }
  SlotSnapshot& slot = ring.residency[task.slot];
  slot.loaded = true;
  slot.model_id = std::move(task.model_id);
  slot.block = task.block;
  RecordTrace(TraceKind::kAccepted, ring, task.slot, task.generation, task.bytes);
  ring.pending_keep_alive[task.slot] = std::move(task.keep_alive);
  ++ring.loads;
  ring.bytes += task.bytes;
  ring.poll_period = kFallbackPoll;
  ring.next_fallback_poll = absl::Now() + ring.poll_period;
  loads_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(task.bytes, std::memory_order_relaxed);
  if (task.staged) {
    staged_loads_.fetch_add(1, std::memory_order_relaxed);
    staged_bytes_.fetch_add(task.bytes, std::memory_order_relaxed);
  }
  return true;
}

absl::StatusOr<StagedCopier*> DeviceWorker::StagedCopierForLoad() {
  if (staged_copier_ != nullptr) return staged_copier_.get();
  if (!staging_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the master is staged (not pinned), but ", device_.info().uuid,
                     " has no staging buffers (pinning = \"always\")"));
  }
  absl::StatusOr<std::unique_ptr<StagedCopier>> started = StagedCopier::Start(device_, *staging_);
  if (!started.ok()) {
    return Annotate(started.status(), "a load of a staged master needs the staging buffers");
  }
  staged_copier_ = *std::move(started);
  Log(LogLevel::kInfo,
      absl::StrCat(device_.info().uuid, ": staging buffers for masters that are not pinned, ",
                   staging_->buffers, " x ", staging_->buffer_bytes, " bytes, ", staging_->threads,
                   " staging threads"));
  return staged_copier_.get();
}

absl::Time DeviceWorker::PollRings() {
  const absl::Time now = absl::Now();
  absl::Time earliest = absl::InfiniteFuture();
  for (auto& [id, state] : rings_.live()) {
    ServedRing& ring = *state;
    if (!ring.producer->status().ok()) {
      // A failed ring issues nothing more: let its masters go, and its turn.
      for (auto& keep_alive : ring.pending_keep_alive) keep_alive.reset();
      scheduler_.RemoveRing(id);
      continue;
    }
    if (!ring.producer->awaits_release()) continue;
    const bool fallback_poll = now >= ring.next_fallback_poll;
    ready_.clear();
    absl::StatusOr<int> found = ring.producer->FindReleased(&ready_);
    for (const RingProducer::Ready& copy : ready_) {
      RecordTrace(TraceKind::kCopyReady, ring, copy.slot, copy.generation, copy.bytes,
                  copy.ready_ns);
    }
    if (!found.ok()) {
      Report(ring, found.status(), UINT32_MAX, 0, ring.last_sink);
      continue;
    }
    if (!ring.producer->awaits_release()) continue;
    if (*found > 0) {
      ring.poll_period = kFallbackPoll;
      ring.next_fallback_poll = now + ring.poll_period;
    } else if (fallback_poll) {
      ring.poll_period = std::min(ring.poll_period * 2, kFallbackPollMax);
      ring.next_fallback_poll = now + ring.poll_period;
    }
    earliest = std::min(earliest, ring.next_fallback_poll);
  }
  std::vector<CopyTracker::Copy> batch;  // every copy of this pass, one completion event
  IssueReadyCopies(batch);
  TrackCopies(batch);
  return earliest;
}

void DeviceWorker::IssueReadyCopies(std::vector<CopyTracker::Copy>& batch) {
  const size_t limit = scheduler_.stream_limit();
  std::vector<RingProducer::Issued> issued;
  while (copies_on_stream_ < limit) {
    ready_rings_.clear();
    for (const auto& [id, state] : rings_.live()) {
      if (state->producer->OldestReady().has_value()) ready_rings_.push_back(id);
    }
    if (ready_rings_.empty()) return;
    const uint64_t next = ready_rings_[scheduler_.Pick(ready_rings_)];
    ServedRing& ring = *rings_.Find(next);
    issued.clear();
    absl::Status status = ring.producer->IssueOldestReady(&issued);
    IssuedOn(ring, issued, batch);
    copies_on_stream_ += issued.size();
    scheduler_.Issued(next);
    // A failed ring has nothing ready any more: the loop goes on without it.
    if (!status.ok()) Report(ring, status, UINT32_MAX, 0, ring.last_sink);
    if (limit != std::numeric_limits<size_t>::max()) TrackCopies(batch);
  }
}

void DeviceWorker::TrackCopies(std::vector<CopyTracker::Copy>& batch) {
  if (batch.empty()) return;
  const size_t count = batch.size();
  absl::Status tracked = copies_.Track(std::move(batch));
  batch.clear();
  if (!tracked.ok()) {
    // The device failed under the copies just issued: their rings cannot be
    // trusted any more, and the copies will never be seen complete.
    copies_on_stream_ -= std::min(copies_on_stream_, count);
    LogDeviceFailure(tracked);
    for (auto& [id, state] : rings_.live()) state->producer->Fail(tracked);
  }
}

void DeviceWorker::IssuedOn(ServedRing& ring, const std::vector<RingProducer::Issued>& issued,
                            std::vector<CopyTracker::Copy>& batch) {
  for (const RingProducer::Issued& load : issued) {
    const uint32_t block = ring.residency[load.slot].block;
    switch (load.release) {
      case RingProducer::ReleaseSeen::kAtRequest:
        releases_at_request_.fetch_add(1, std::memory_order_relaxed);
        break;
      case RingProducer::ReleaseSeen::kByNotification:
        releases_notified_.fetch_add(1, std::memory_order_relaxed);
        // The client wrote the time: trace it only if it is plausible.
        if (load.notified_ns != 0 && load.notified_ns <= load.issued_ns) {
          RecordTrace(TraceKind::kReleaseNotified, ring, load.slot, load.generation, 0,
                      load.notified_ns);
        }
        break;
    }
    RecordTrace(TraceKind::kCopyIssued, ring, load.slot, load.generation, load.bytes,
                load.issued_ns);
    RecordTrace(TraceKind::kFilled, ring, load.slot, load.generation, load.bytes, load.filled_ns);
    batch.push_back(CopyTracker::Copy{ring.ring_id, load.slot, load.generation, block, load.bytes,
                                      std::move(ring.pending_keep_alive[load.slot]),
                                      load.issued_ns});
  }
}

absl::Time DeviceWorker::RetireCopies() {
  LatencyHistogram& latency = load_latency_;  // guarded by rings_mu_, held here
  RingTable& rings = rings_;                  // the same
  size_t& on_stream = copies_on_stream_;      // the same
  absl::StatusOr<absl::Time> next = copies_.Retire(
      [this, &latency, &rings, &on_stream](const CopyTracker::Copy& copy, uint64_t completed_ns,
                                           absl::Duration stream_time) {
        if (on_stream > 0) --on_stream;  // room on the copy stream for the next
        trace_.Record(TraceEvent{completed_ns, copy.ring_id, copy.bytes, copy.slot, copy.generation,
                                 copy.block, TraceKind::kCopyDone, 0});
        // The ring's client reads its copy times from the control block.
        if (ServedRing* ring = rings.Find(copy.ring_id); ring != nullptr) {
          ring->producer->PublishCopied(copy.slot, copy.generation, stream_time);
        }
        if (copy.issued_ns != 0 && completed_ns >= copy.issued_ns) {
          latency.Observe(static_cast<double>(completed_ns - copy.issued_ns) / 1e9);
        }
      });
  if (next.ok()) return *next;
  LogDeviceFailure(next.status());
  for (auto& [id, state] : rings_.live()) state->producer->Fail(next.status());
  return absl::Now() + kRetirePoll;
}

void DeviceWorker::LogDeviceFailure(const absl::Status& error) {
  // Sticky: the first failure is the one worth a line; the rings fail with it.
  if (device_failure_logged_) return;
  device_failure_logged_ = true;
  Log(LogLevel::kError,
      absl::StrCat("device ", device_.info().uuid, " failed: ", error.message(), "; its ",
                   rings_.live().size(), " rings fail with this error"));
}

void DeviceWorker::Heartbeat() {
  absl::Time now = absl::Now();
  if (now - last_heartbeat_ < kHeartbeatPeriod) return;
  last_heartbeat_ = now;
  for (auto& [id, state] : rings_.live()) state->producer->Heartbeat();
}

void DeviceWorker::TrackWordWrites(ServedRing& ring) {
  if (!ring.producer->TakeQueuedWordWrites()) return;
  if (absl::Status tracked = copies_.TrackWordWrites(ring.ring_id); !tracked.ok()) {
    // The device failed: nothing more runs on its copy stream.
    LogDeviceFailure(tracked);
  }
}

bool DeviceWorker::FreeRetiredRings() {
  // A failed ring's abandon writes (RingProducer::Fail) are tracked first, so
  // that no ring's word page is unregistered while a write to it is queued.
  for (auto& [id, state] : rings_.live()) TrackWordWrites(*state);
  rings_.ForEachRetired([this](ServedRing& ring)
                            ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_) { TrackWordWrites(ring); });
  // Only the daemon's own copies matter: the client's view of the memory is
  // its own mapping, which keeps the memory for as long as the client holds
  // it (backend.h, ImportMemory).
  return rings_.FreeRetired(
      [this](const ServedRing& ring)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(rings_mu_) { return copies_.InFlight(ring.ring_id); },
      [this](const ServedRing& ring, RetireReason reason) {
        if (LogEnabled(LogLevel::kDebug)) {
          Log(LogLevel::kDebug,
              absl::StrCat(
                  "ring ", ring.ring_id, " of session ", ring.session_id, " freed on ",
                  device_.info().uuid, " after ", ring.loads, " loads (", ring.bytes, " bytes)",
                  reason == RetireReason::kClosedByClient ? "" : ", its client having exited"));
        }
        trace_.KeepFreedRing(ReadRingTrace(ring, 0));
      });
}

void DeviceWorker::Report(ServedRing& ring, const absl::Status& error, uint32_t slot,
                          uint32_t generation, const std::shared_ptr<LoadEventSink>& sink) {
  if (sink == nullptr) return;
  sink->Send(LoadErrorEvent(ring.ring_id, slot, generation, error));
}

std::vector<RingSnapshot> DeviceWorker::Snapshot() const {
  absl::MutexLock lock(&rings_mu_);
  std::vector<RingSnapshot> out;
  for (const auto& [id, state] : rings_.live()) {
    RingSnapshot snapshot;
    snapshot.ring_id = id;
    snapshot.session_id = state->session_id;
    snapshot.shape = state->ring->shape();
    snapshot.slots = state->residency;
    for (uint32_t s = 0; s < snapshot.shape.slot_count; ++s) {
      snapshot.slots[s].filled_seq =
          state->ring->control().filled_seq[s].load(std::memory_order_relaxed);
      snapshot.slots[s].consumed_seq =
          state->ring->client_control().consumed_seq[s].load(std::memory_order_relaxed);
    }
    snapshot.loads = state->loads;
    snapshot.bytes = state->bytes;
    snapshot.status = state->producer->status();
    out.push_back(std::move(snapshot));
  }
  return out;
}

void DeviceWorker::RecordTrace(TraceKind kind, const ServedRing& ring, uint32_t slot,
                               uint32_t generation, uint64_t bytes, uint64_t time_ns) {
  uint32_t block = slot < ring.residency.size() ? ring.residency[slot].block : 0;
  trace_.Record(TraceEvent{time_ns, ring.ring_id, bytes, slot, generation, block, kind, 0});
}

RingTrace DeviceWorker::ReadRingTrace(const ServedRing& ring, uint64_t since_ns) {
  return ValidClientTrace(ring.ring_id, ring.session_id, ring.owner, ring.ring->shape().slot_count,
                          ring.ring->ReadClientTrace(since_ns));
}

DeviceTrace DeviceWorker::ReadTrace(uint64_t since_ns) const {
  DeviceTrace out = trace_.ReadEvents(since_ns);
  absl::MutexLock lock(&rings_mu_);
  trace_.ReadFreedRings(since_ns, out);
  rings_.ForEachRetired(
      [&](const ServedRing& ring) { out.rings.push_back(ReadRingTrace(ring, since_ns)); });
  for (const auto& [id, state] : rings_.live()) {
    out.rings.push_back(ReadRingTrace(*state, since_ns));
  }
  return out;
}

DeviceStats DeviceWorker::stats() const {
  DeviceStats stats;
  stats.loads = loads_.load(std::memory_order_relaxed);
  stats.bytes = bytes_.load(std::memory_order_relaxed);
  stats.releases_at_request = releases_at_request_.load(std::memory_order_relaxed);
  stats.releases_notified = releases_notified_.load(std::memory_order_relaxed);
  stats.staged_loads = staged_loads_.load(std::memory_order_relaxed);
  stats.staged_bytes = staged_bytes_.load(std::memory_order_relaxed);
  absl::MutexLock lock(&rings_mu_);
  stats.copy_seconds = absl::ToDoubleSeconds(copies_.busy());
  for (const auto& [id, state] : rings_.live()) {
    stats.queue_depth += state->producer->pending_count();
  }
  stats.protocol_errors = protocol_errors_;
  stats.rings = rings_.live().size();
  stats.load_latency = load_latency_;
  return stats;
}

}  // namespace blockswap::daemon
