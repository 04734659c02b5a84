#include "shared/protocol/load_protocol.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "shared/base/env_settings.h"
#include "shared/base/status.h"
#include "shared/os/futex.h"

namespace blockswap {
namespace {

#if BLOCKSWAP_TEST_HOOKS
std::atomic<uint32_t> skipped_steps{0};

bool Skipped(ProtocolStep step) {
  return (skipped_steps.load(std::memory_order_relaxed) >> static_cast<uint32_t>(step)) & 1u;
}
#else
constexpr bool Skipped(ProtocolStep) { return false; }
#endif

}  // namespace

absl::string_view ProtocolStepName(ProtocolStep step) {
  switch (step) {
    case ProtocolStep::kClientRecordFree:
      return "client-record-free";
    case ProtocolStep::kClientPublishConsumed:
      return "client-publish-consumed";
    case ProtocolStep::kClientAwaitFilled:
      return "client-await-filled";
    case ProtocolStep::kClientStreamWaitReady:
      return "client-stream-wait-ready";
    case ProtocolStep::kDaemonAwaitFree:
      return "daemon-await-free";
    case ProtocolStep::kDaemonRecordReady:
      return "daemon-record-ready";
    case ProtocolStep::kDaemonPublishFilled:
      return "daemon-publish-filled";
    case ProtocolStep::kClientNotifyRelease:
      return "client-notify-release";
    case ProtocolStep::kDaemonAwaitStaging:
      return "daemon-await-staging";
    case ProtocolStep::kDaemonAwaitStagingReuse:
      return "daemon-await-staging-reuse";
    case ProtocolStep::kTrainerCopyAwaitFree:
      return "trainer-copy-await-free";
    case ProtocolStep::kTrainerStreamWaitFilled:
      return "trainer-stream-wait-filled";
  }
  return "unknown";
}

std::string ProtocolStepIdentifier(ProtocolStep step) {
  std::string name(ProtocolStepName(step));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

absl::StatusOr<ProtocolStep> ParseProtocolStep(absl::string_view name) {
  for (ProtocolStep step : kSafetyProtocolSteps) {
    if (ProtocolStepName(step) == name) return step;
  }
  for (ProtocolStep step : kStagingProtocolSteps) {
    if (ProtocolStepName(step) == name) return step;
  }
  for (ProtocolStep step : kTrainerCopySteps) {
    if (ProtocolStepName(step) == name) return step;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown protocol step '", name, "'"));
}

bool ProtocolStepSkipped(ProtocolStep step) { return Skipped(step); }

#if BLOCKSWAP_TEST_HOOKS
void SkipProtocolStepForTesting(ProtocolStep step) {
  skipped_steps.fetch_or(1u << static_cast<uint32_t>(step));
}

absl::Status SkipProtocolStepsFromEnvironment() {
  const std::optional<std::string> steps = EnvValue(EnvSetting::kTestSkipProtocolSteps);
  if (!steps.has_value()) return absl::OkStatus();
  for (absl::string_view name : absl::StrSplit(*steps, ',', absl::SkipEmpty())) {
    BLOCKSWAP_ASSIGN_OR_RETURN(ProtocolStep step, ParseProtocolStep(name));
    SkipProtocolStepForTesting(step);
  }
  return absl::OkStatus();
}
#else
absl::Status SkipProtocolStepsFromEnvironment() { return absl::OkStatus(); }
#endif

// ---------------------------------------------------------------------------
// RingProducer

RingProducer::RingProducer(DaemonRing& ring, Stream& copy_stream)
    : ring_(ring), copy_stream_(copy_stream), pending_(ring.shape().slot_count) {}

absl::Status RingProducer::Submit(uint32_t slot, uint32_t generation, const void* source,
                                  size_t bytes, SlotCopier* copier) {
  BLOCKSWAP_RETURN_IF_ERROR(status_);
  const RingShape& shape = ring_.shape();
  absl::Status error;
  if (slot >= shape.slot_count) {
    error = absl::InvalidArgumentError(
        absl::StrCat("slot ", slot, " out of range (ring has ", shape.slot_count, " slots)"));
  } else if (bytes > shape.slot_bytes) {
    error = absl::InvalidArgumentError(absl::StrCat("block of ", bytes, " bytes does not fit slot ",
                                                    slot, " of ", shape.slot_bytes, " bytes"));
  } else if (pending_[slot].active) {
    error = absl::FailedPreconditionError(
        absl::StrCat("slot ", slot, " generation ", generation, " requested while generation ",
                     pending_[slot].generation, " is still pending"));
  } else {
    uint32_t filled = ring_.control().filled_seq[slot].load(std::memory_order_relaxed);
    uint32_t consumed = ring_.client_control().consumed_seq[slot].load(std::memory_order_acquire);
    if (generation != filled + 1) {
      error = absl::FailedPreconditionError(absl::StrCat("slot ", slot, " generation ", generation,
                                                         " requested, but the next generation is ",
                                                         filled + 1));
    } else if (consumed != generation - 1) {
      // Loading now could overwrite bytes the client is still reading.
      error = absl::FailedPreconditionError(absl::StrCat("slot ", slot, " generation ", generation,
                                                         " requested, but the client published "
                                                         "consumed_seq=",
                                                         consumed, " (must be ", generation - 1,
                                                         " before the request)"));
    }
  }
  if (!error.ok()) {
    Fail(error, slot);
    return error;
  }
  pending_[slot] = PendingLoad{true, generation, source, bytes, copier, next_request_seq_++};
  return absl::OkStatus();
}

bool RingProducer::Released(uint32_t slot, const PendingLoad& load) const {
  return ring_.client_control().releasable_seq[slot].load(std::memory_order_acquire) ==
         load.generation;
}

bool RingProducer::HasAnnouncedRelease() const {
  if (!status_.ok()) return false;
  for (uint32_t slot = 0; slot < pending_.size(); ++slot) {
    const PendingLoad& load = pending_[slot];
    // A ready load waits for its turn on the copy stream, not for a look.
    if (load.active && !load.ready && (!load.looked_at || Released(slot, load))) return true;
  }
  return false;
}

absl::StatusOr<int> RingProducer::FindReleased(std::vector<Ready>* ready) {
  BLOCKSWAP_RETURN_IF_ERROR(status_);
  int found = 0;
  for (uint32_t slot = 0; slot < pending_.size(); ++slot) {
    PendingLoad& load = pending_[slot];
    if (!load.active || load.ready) continue;
    const ReleaseSeen seen =
        load.looked_at ? ReleaseSeen::kByNotification : ReleaseSeen::kAtRequest;
    load.looked_at = true;
    if (!Skipped(ProtocolStep::kDaemonAwaitFree)) {
      // The client's word, never a GPU-side wait on anything of the
      // client's: a client that dies with its work pending cannot hang the
      // copy stream, and a word that lies lets the daemon overwrite only
      // that client's own slot.
      const uint32_t releasable =
          ring_.client_control().releasable_seq[slot].load(std::memory_order_acquire);
      if (releasable != load.generation) {
        // The client releases generation g+1 only after it has seen g
        // filled, which has not happened while g is pending.
        if (static_cast<int32_t>(releasable - load.generation) > 0) {
          absl::Status error = absl::FailedPreconditionError(absl::StrCat(
              "slot ", slot, " generation ", load.generation,
              " is pending, but the client published releasable_seq=", releasable,
              " (a release of a generation it has not been given)"));
          Fail(error, slot);
          return error;
        }
        continue;
      }
    }
    load.ready = true;
    load.seen = seen;
    ++found;
    if (ready != nullptr) {
      ready->push_back(Ready{slot, load.generation, load.bytes, MonotonicNanos()});
    }
  }
  return found;
}

uint32_t RingProducer::OldestReadySlot() const {
  uint32_t oldest = static_cast<uint32_t>(pending_.size());
  for (uint32_t slot = 0; slot < pending_.size(); ++slot) {
    const PendingLoad& load = pending_[slot];
    if (load.active && load.ready &&
        (oldest == pending_.size() || load.request_seq < pending_[oldest].request_seq)) {
      oldest = slot;
    }
  }
  return oldest;
}

std::optional<RingProducer::Ready> RingProducer::OldestReady() const {
  const uint32_t slot = OldestReadySlot();
  if (slot == pending_.size()) return std::nullopt;
  const PendingLoad& load = pending_[slot];
  return Ready{slot, load.generation, load.bytes, 0};
}

absl::Status RingProducer::IssueOldestReady(std::vector<Issued>* issued) {
  BLOCKSWAP_RETURN_IF_ERROR(status_);
  const uint32_t slot = OldestReadySlot();
  if (slot == pending_.size()) {
    return absl::FailedPreconditionError("no copy of the ring is ready to issue");
  }
  PendingLoad taken = pending_[slot];
  pending_[slot].active = false;
  pending_[slot].ready = false;
  if (absl::Status issued_status = Issue(slot, taken, taken.seen, issued); !issued_status.ok()) {
    Fail(issued_status, slot);
    return issued_status;
  }
  return absl::OkStatus();
}

absl::StatusOr<int> RingProducer::Poll(std::vector<Issued>* issued) {
  BLOCKSWAP_RETURN_IF_ERROR(FindReleased().status());
  int count = 0;
  while (OldestReadySlot() != pending_.size()) {
    BLOCKSWAP_RETURN_IF_ERROR(IssueOldestReady(issued));
    ++count;
  }
  return count;
}

absl::Status RingProducer::Issue(uint32_t slot, const PendingLoad& load, ReleaseSeen release,
                                 std::vector<Issued>* issued) {
  const uint64_t issued_ns = issued != nullptr ? MonotonicNanos() : 0;
  BLOCKSWAP_RETURN_IF_ERROR(
      load.copier != nullptr
          ? load.copier->Copy(copy_stream_, ring_.slot(slot), load.source, load.bytes)
          : copy_stream_.CopyHostToDevice(ring_.slot(slot), load.source, load.bytes));
  // The ready word where there is one; without, landed_seq is published
  // when the copy is seen complete (PublishCopied).
  if (StreamWords* words = ring_.ready_words();
      words != nullptr && !Skipped(ProtocolStep::kDaemonRecordReady)) {
    BLOCKSWAP_RETURN_IF_ERROR(copy_stream_.WriteWord(*words, slot, load.generation));
  }
  if (!Skipped(ProtocolStep::kDaemonPublishFilled)) {
    // Published at issue: the client's wait on the ready word, or on
    // landed_seq, covers completion (docs/protocol.md, "A dead daemon", says
    // why not at completion).
    std::atomic<uint32_t>& filled = ring_.control().filled_seq[slot];
    filled.store(load.generation, std::memory_order_release);
    FutexWakeAll(&filled);
  }
  if (issued != nullptr) {
    const uint64_t notified_ns =
        release == ReleaseSeen::kByNotification
            ? ring_.client_control().released_ns[slot].load(std::memory_order_relaxed)
            : 0;
    issued->push_back(Issued{slot, load.generation, load.bytes, issued_ns, MonotonicNanos(),
                             release, notified_ns});
  }
  return absl::OkStatus();
}

int RingProducer::pending_count() const {
  int count = 0;
  for (const PendingLoad& load : pending_) count += load.active ? 1 : 0;
  return count;
}

bool RingProducer::awaits_release() const {
  return std::any_of(pending_.begin(), pending_.end(),
                     [](const PendingLoad& load) { return load.active && !load.ready; });
}

void RingProducer::Fail(const absl::Status& error, uint32_t slot) {
  if (!status_.ok()) return;
  status_ = error;
  for (PendingLoad& load : pending_) load = PendingLoad{};
  DaemonControlBlock& control = ring_.control();
  // The message before the code: a client that sees error_code (acquire)
  // may read it. Written once: the first error sticks.
  const size_t length = std::min(error.message().size(), kErrorMessageBytes - 1);
  std::memcpy(control.error_message, error.message().data(), length);
  control.error_message[length] = '\0';
  control.status.error_slot.store(slot, std::memory_order_relaxed);
  control.status.error_code.store(static_cast<uint32_t>(error.code()), std::memory_order_release);
  for (uint32_t s = 0; s < ring_.shape().slot_count; ++s) FutexWakeAll(&control.filled_seq[s]);
  // Nothing more is copied: a client stream waiting on a ready word would
  // wait for ever. The words are moved ahead at the end of the copy stream,
  // behind every copy issued before the failure, so that no client stream
  // is let go before a copy it waits for has landed (its work would read a
  // half-copied slot). Only a stream that cannot take the writes (it failed,
  // and its copies will not land either) has the words moved at once.
  StreamWords* words = ring_.ready_words();
  if (words == nullptr) return;
  bool queued = true;
  for (uint32_t s = 0; s < ring_.shape().slot_count && queued; ++s) {
    queued = copy_stream_.WriteWord(*words, s, AbandonedWordValue(control, s)).ok();
  }
  word_writes_queued_ = true;
  if (!queued) ring_.AbandonReadyWords();
}

void RingProducer::Heartbeat() {
  ring_.control().status.heartbeat_ms.store(MonotonicMillis(), std::memory_order_release);
}

void RingProducer::PublishCopied(uint32_t slot, uint32_t generation, absl::Duration stream_time) {
  DaemonControlBlock& control = ring_.control();
  if (slot < ring_.shape().slot_count && !Skipped(ProtocolStep::kDaemonRecordReady)) {
    std::atomic<uint32_t>& landed = control.landed_seq[slot];
    // Copies of one slot complete in order; a late report never moves back.
    if (WordReached(generation, landed.load(std::memory_order_relaxed))) {
      landed.store(generation, std::memory_order_release);
      FutexWakeAll(&landed);
    }
  }
  const uint64_t ns =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(stream_time)));
  // One writer (the device worker): plain read-modify-writes suffice.
  control.copy_ns.store(control.copy_ns.load(std::memory_order_relaxed) + ns,
                        std::memory_order_relaxed);
  control.copies_done.store(control.copies_done.load(std::memory_order_relaxed) + 1,
                            std::memory_order_release);
}

absl::Status RingProducer::status() const { return status_; }

// ---------------------------------------------------------------------------
// RingConsumer

RingConsumer::RingConsumer(RingImport& ring, ConsumerOptions options)
    : ring_(ring),
      options_(options),
      requested_(ring.shape().slot_count, 0),
      filled_seen_(ring.shape().slot_count, true) {}

absl::Status RingConsumer::CheckSlot(uint32_t slot) const {
  if (slot >= requested_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("slot ", slot, " out of range (ring has ", requested_.size(), " slots)"));
  }
  return absl::OkStatus();
}

absl::Status RingConsumer::Release(uint32_t slot, Stream& stream) {
  BLOCKSWAP_RETURN_IF_ERROR(CheckSlot(slot));
  if (!filled_seen_[slot]) {
    BLOCKSWAP_RETURN_IF_ERROR(AwaitFilled(slot, requested_[slot], options_.wait_timeout));
    filled_seen_[slot] = true;
  }
  // Recorded on every release, even of a slot released before: the caller
  // may have used the slot again since (a backward pass re-reading a block),
  // and the next copy must wait for that use too. An extra record costs
  // nothing and binds no wait of the daemon's (it polls only for a request).
  if (!Skipped(ProtocolStep::kClientRecordFree)) {
    BLOCKSWAP_RETURN_IF_ERROR(stream.Record(ring_.free(slot)));
  }
  if (!Skipped(ProtocolStep::kClientPublishConsumed)) {
    ring_.client_control().consumed_seq[slot].store(requested_[slot], std::memory_order_release);
  }
  RecordTrace(TraceKind::kRelease, slot, requested_[slot], MonotonicNanos());
  return absl::OkStatus();
}

absl::Status RingConsumer::NotifyRelease(uint32_t slot, uint32_t releasable, Stream& stream) {
  if (Skipped(ProtocolStep::kClientNotifyRelease)) return absl::OkStatus();
  ClientControlBlock& control = ring_.client_control();
  Doorbell* doorbell = ring_.doorbell();
  auto publish = [&control, doorbell, slot, releasable] {
    control.released_ns[slot].store(MonotonicNanos(), std::memory_order_relaxed);
    control.releasable_seq[slot].store(releasable, std::memory_order_release);
    if (doorbell != nullptr) doorbell->Ring();
  };
  if (options_.notifier == nullptr) {
    BLOCKSWAP_RETURN_IF_ERROR(stream.Synchronize());
    publish();
    return absl::OkStatus();
  }
  // The side stream's wait binds to the record just issued (both are this
  // thread's). Its host function touches only shared memory and the
  // doorbell (no backend call, as a CUDA host function must not make CUDA
  // calls).
  BLOCKSWAP_RETURN_IF_ERROR(options_.notifier->Wait(ring_.free(slot)));
  return options_.notifier->LaunchHostFunc(publish);
}

void RingConsumer::RecordTrace(TraceKind kind, uint32_t slot, uint32_t generation, uint64_t time_ns,
                               uint64_t value, uint16_t flags) {
  TraceEvent event;
  event.time_ns = time_ns;
  event.ring_id = ring_.ring_id();
  event.value = value;
  event.slot = slot;
  event.generation = generation;
  event.kind = kind;
  event.flags = flags;
  ring_.trace().Record(event);
}

absl::StatusOr<uint32_t> RingConsumer::BeginLoad(uint32_t slot, Stream& stream) {
  BLOCKSWAP_RETURN_IF_ERROR(Release(slot, stream));
  // Only the release just recorded may announce the next generation: an
  // earlier one's (the slot released, then used again by a backward pass)
  // would let the daemon copy while that later use still reads.
  BLOCKSWAP_RETURN_IF_ERROR(NotifyRelease(slot, requested_[slot] + 1, stream));
  requested_[slot] += 1;
  filled_seen_[slot] = false;
  RecordTrace(TraceKind::kRequest, slot, requested_[slot], MonotonicNanos());
  return requested_[slot];
}

absl::Status RingConsumer::AwaitLoaded(uint32_t slot, Stream& stream) {
  return AwaitLoaded(slot, stream, options_.wait_timeout);
}

absl::Status RingConsumer::AwaitLoaded(uint32_t slot, Stream& stream, absl::Duration timeout) {
  return AwaitLoaded(slot, stream, timeout, nullptr);
}

absl::Status RingConsumer::AwaitLoaded(uint32_t slot, Stream& stream, absl::Duration timeout,
                                       WaitTimer* timer) {
  BLOCKSWAP_RETURN_IF_ERROR(CheckSlot(slot));
  if (requested_[slot] == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("slot ", slot, " was never loaded (load it before waiting)"));
  }
  // Also on a slot already released (a backward pass re-reading a block):
  // no request followed, so the daemon has not copied into it since.
  if (!filled_seen_[slot] && !Skipped(ProtocolStep::kClientAwaitFilled)) {
    BLOCKSWAP_RETURN_IF_ERROR(AwaitFilled(slot, requested_[slot], timeout));
  }
  filled_seen_[slot] = true;
  if (Skipped(ProtocolStep::kClientStreamWaitReady)) return absl::OkStatus();
  StreamWords* words = ring_.ready_words();
  if (words == nullptr) {
    // Without ready words the stream cannot wait for another process's
    // signal on the device (no event crosses processes), so the copy's
    // completion is awaited here, on the host, and the stream needs no wait.
    return AwaitLanded(slot, requested_[slot], timeout);
  }
  BLOCKSWAP_RETURN_IF_ERROR(stream.WaitWord(*words, slot, requested_[slot], timer));
  // The watchdog let the words go (the daemon was lost): a wait that
  // returned, or a stream that runs on, does not mean the copy was made.
  // A host trainer's wait has already returned here, so say so now. A
  // wait committed before the watchdog ran is judged by it instead
  // (RingImport::TakeUnfinishedWaits).
  if (!ring_.CommitStreamWait(slot, requested_[slot])) {
    return absl::UnavailableError(
        absl::StrCat("slot ", slot, " generation ", requested_[slot],
                     ": the daemon was lost before its copy was known to be done"));
  }
  return absl::OkStatus();
}

absl::Status RingConsumer::AwaitLanded(uint32_t slot, uint32_t generation,
                                       absl::Duration timeout) {
  const std::atomic<uint32_t>& landed = ring_.control().landed_seq[slot];
  absl::Status waited = FutexAwait(&landed, timeout, [&]() -> absl::StatusOr<bool> {
    BLOCKSWAP_RETURN_IF_ERROR(CheckHealth());
    return WordReached(landed.load(std::memory_order_acquire), generation);
  });
  if (absl::IsDeadlineExceeded(waited)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "slot ", slot, " generation ", generation, ": its copy was not seen complete within ",
        absl::FormatDuration(timeout), " (ring ", ring_.ring_id(),
        ", landed_seq=", landed.load(std::memory_order_relaxed),
        "; the device has no stream words, so the wait is on the host)"));
  }
  return waited;
}

void RingConsumer::RecordStall(uint32_t slot, uint32_t generation, const WaitIdle& idle) {
  RecordTrace(TraceKind::kStall, slot, generation, idle.began_ns,
              static_cast<uint64_t>(absl::ToInt64Nanoseconds(idle.idle)));
}

absl::Status RingConsumer::Drain() { return Drain(options_.wait_timeout); }

absl::Status RingConsumer::Drain(absl::Duration timeout) {
  for (uint32_t slot = 0; slot < requested_.size(); ++slot) {
    if (filled_seen_[slot]) continue;
    BLOCKSWAP_RETURN_IF_ERROR(AwaitFilled(slot, requested_[slot], timeout));
    filled_seen_[slot] = true;
  }
  return absl::OkStatus();
}

absl::Duration RingConsumer::CopyTimeSoFar() const {
  const DaemonControlBlock& control = ring_.control();
  (void)control.copies_done.load(std::memory_order_acquire);
  return absl::Nanoseconds(control.copy_ns.load(std::memory_order_relaxed));
}

absl::Status RingConsumer::CheckHealth() const {
  absl::Status health = RingHealth();
  // A ring that failed, or a daemon lost, fills nothing more: release this
  // process's streams from their waits on the ready words (the step fails
  // with `health`).
  if (!health.ok()) ring_.AbandonReadyWords();
  return health;
}

absl::Status RingConsumer::RingHealth() const {
  if (options_.liveness) BLOCKSWAP_RETURN_IF_ERROR(options_.liveness());
  const RingStatusWord& status = ring_.control().status;
  if (uint32_t code = status.error_code.load(std::memory_order_acquire); code != 0) {
    uint32_t slot = status.error_slot.load(std::memory_order_relaxed);
    const char* message = ring_.control().error_message;
    const size_t length = ::strnlen(message, kErrorMessageBytes);
    return absl::Status(
        static_cast<absl::StatusCode>(code),
        absl::StrCat("ring ", ring_.ring_id(), " failed in the daemon",
                     slot == UINT32_MAX ? std::string() : absl::StrCat(" at slot ", slot),
                     length == 0 ? std::string(" (the daemon's reply to the request says why)")
                                 : absl::StrCat(": ", absl::string_view(message, length))));
  }
  if (status.boot_id.load(std::memory_order_relaxed) != ring_.boot_id()) {
    return absl::UnavailableError(
        absl::StrCat("ring ", ring_.ring_id(), " belongs to a daemon that has restarted"));
  }
  if (options_.heartbeat_timeout > absl::ZeroDuration()) {
    uint64_t last = status.heartbeat_ms.load(std::memory_order_acquire);
    uint64_t now = MonotonicMillis();
    if (now > last && absl::Milliseconds(now - last) > options_.heartbeat_timeout) {
      return absl::UnavailableError(
          absl::StrCat("daemon silent for ", now - last, " ms (ring ", ring_.ring_id(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status RingConsumer::AwaitFilled(uint32_t slot, uint32_t generation, absl::Duration timeout) {
  const std::atomic<uint32_t>& filled = ring_.control().filled_seq[slot];
  // A stall: the slot was not filled yet when the client came to use it.
  const bool stalled = filled.load(std::memory_order_acquire) != generation;
  const uint64_t started_ns = MonotonicNanos();
  absl::Status waited = FutexAwait(&filled, timeout, [&]() -> absl::StatusOr<bool> {
    BLOCKSWAP_RETURN_IF_ERROR(CheckHealth());
    return filled.load(std::memory_order_acquire) == generation;
  });
  const uint64_t ended_ns = MonotonicNanos();
  RecordTrace(TraceKind::kWait, slot, generation, started_ns, ended_ns - started_ns,
              stalled ? kTraceStalled : 0);
  if (absl::IsDeadlineExceeded(waited)) {
    return absl::DeadlineExceededError(
        absl::StrCat("slot ", slot, " generation ", generation, " not filled within ",
                     absl::FormatDuration(timeout), " (ring ", ring_.ring_id(),
                     ", filled_seq=", filled.load(std::memory_order_relaxed), ")"));
  }
  return waited;
}

}  // namespace blockswap
