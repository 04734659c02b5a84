#include "client/scheduler/stream_scheduler.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "shared/base/status.h"

namespace blockswap::client {

// --- placement -----------------------------------------------------------------------

std::optional<uint32_t> Placement::StreamingRank(uint32_t block) const {
  if (!is_streaming(block)) return std::nullopt;
  return rank_of_block[block];
}

absl::StatusOr<Placement> PlaceBlocks(uint32_t num_blocks, uint32_t blocks_to_swap,
                                      uint32_t ring_size) {
  if (num_blocks == 0 || num_blocks > kMaxSchedulerBlocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("block count ", num_blocks, " out of range (1 to ", kMaxSchedulerBlocks, ")"));
  }
  // The reference refuses a ring of no slots even when nothing streams.
  if (ring_size == 0) {
    return absl::InvalidArgumentError("ring size 0 out of range (a ring has at least 1 slot)");
  }
  Placement placement;
  placement.num_blocks = num_blocks;
  // The midpoint formula gives distinct blocks for S <= N; past that several
  // i land on one block, which streams once. 64-bit: (2i+1)N overflows 32.
  std::set<uint32_t> streaming;
  for (uint64_t i = 0; i < blocks_to_swap; ++i) {
    streaming.insert(
        static_cast<uint32_t>(((2 * i + 1) * num_blocks) / (2 * uint64_t{blocks_to_swap})));
    if (streaming.size() == num_blocks) break;  // every block already streams
  }
  placement.streaming.assign(streaming.begin(), streaming.end());
  placement.rank_of_block.assign(num_blocks, Placement::kResident);
  for (uint32_t rank = 0; rank < placement.streaming.size(); ++rank) {
    placement.rank_of_block[placement.streaming[rank]] = rank;
  }
  for (uint32_t block = 0; block < num_blocks; ++block) {
    if (placement.rank_of_block[block] == Placement::kResident) placement.resident.push_back(block);
  }
  placement.ring_slots =
      std::min<uint32_t>(ring_size, static_cast<uint32_t>(placement.streaming.size()));
  return placement;
}

// --- names and trace lines -------------------------------------------------------------

absl::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kPrepare:
      return "prepare";
    case Phase::kForward:
      return "fwd";
    case Phase::kBackward:
      return "bwd";
  }
  return "?";
}

absl::string_view DirectionName(Phase phase) {
  return phase == Phase::kBackward ? "backward" : "forward";
}

std::string TraceLine(const SlotEvent& event) {
  return absl::StrCat(
      PhaseName(event.phase), event.action == SlotEvent::Action::kLoad ? " load" : " rebind",
      " block=", event.block, " slot=", event.slot, event.self_heal ? " self-heal" : "");
}

// --- the scheduler ---------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<StreamScheduler>> StreamScheduler::Create(
    const SchedulerConfig& config, SlotDriver& driver, SchedulerCallbacks callbacks) {
  BLOCKSWAP_ASSIGN_OR_RETURN(
      Placement placement, PlaceBlocks(config.num_blocks, config.blocks_to_swap, config.ring_size));
  return std::unique_ptr<StreamScheduler>(
      new StreamScheduler(std::move(placement), driver, std::move(callbacks), config.forward_only));
}

StreamScheduler::StreamScheduler(Placement placement, SlotDriver& driver,
                                 SchedulerCallbacks callbacks, bool forward_only)
    : placement_(std::move(placement)),
      driver_(driver),
      callbacks_(std::move(callbacks)),
      forward_only_(forward_only),
      slots_(placement_.ring_slots) {}

absl::Status StreamScheduler::CheckBlock(uint32_t block) const {
  if (block >= placement_.num_blocks) {
    return absl::OutOfRangeError(absl::StrCat("block ", block, " out of range (the model has ",
                                              placement_.num_blocks, " blocks)"));
  }
  return absl::OkStatus();
}

absl::Status StreamScheduler::Prepare() {
  FinishPass();
  // Prepare's loads belong to the forward pass it prepares.
  pass_.direction = Phase::kForward;
  last_forward_block_.reset();
  last_backward_block_.reset();
  if (placement_.ring_slots == 0) return absl::OkStatus();
  BLOCKSWAP_RETURN_IF_ERROR(DrainIfNeeded());
  for (uint32_t rank = 0; rank < placement_.ring_slots; ++rank) {
    BLOCKSWAP_RETURN_IF_ERROR(Place(rank, rank, Phase::kPrepare, /*self_heal=*/false));
  }
  return absl::OkStatus();
}

absl::Status StreamScheduler::WaitForBlock(uint32_t block) {
  BLOCKSWAP_RETURN_IF_ERROR(CheckBlock(block));
  EnterForward(block, /*is_wait=*/true);
  if (!placement_.is_streaming(block)) return absl::OkStatus();
  return Await(block, Phase::kForward);
}

absl::Status StreamScheduler::AfterForward(uint32_t block) {
  BLOCKSWAP_RETURN_IF_ERROR(CheckBlock(block));
  EnterForward(block, /*is_wait=*/false);
  if (!placement_.is_streaming(block)) return absl::OkStatus();
  const uint32_t ring = placement_.ring_slots;
  const uint32_t count = static_cast<uint32_t>(placement_.streaming.size());
  const uint32_t rank = placement_.rank_of_block[block];
  const uint32_t slot = rank % ring;
  // Rank + B shares the slot about to be released.
  const bool prefetches = rank + ring < count;
  const bool wraps_around = forward_only_ && rank == count - 1 && count > ring;
  if (prefetches) {
    BeforeReload(slot);
  } else if (wraps_around) {
    for (uint32_t next = 0; next < ring; ++next) BeforeReload(next);
  }
  BLOCKSWAP_RETURN_IF_ERROR(ReleaseSlot(slot));
  if (prefetches) {
    return Place(rank + ring, slot, Phase::kForward, /*self_heal=*/false);
  }
  if (wraps_around) {
    // No backward will consume the retained tail, and the next pass starts at
    // rank 0: preload ranks 0..B-1 now, overlapping the resident blocks and
    // the output layers instead of stalling at the next pass's start. (With
    // S == B the ring already holds every rank.)
    for (uint32_t next = 0; next < ring; ++next) {
      BLOCKSWAP_RETURN_IF_ERROR(Place(next, next, Phase::kForward, /*self_heal=*/false));
    }
  }
  // Training: the last B ranks stay for the backward pass, which needs them first.
  return absl::OkStatus();
}

absl::Status StreamScheduler::AfterBackward(uint32_t block) {
  BLOCKSWAP_RETURN_IF_ERROR(CheckBlock(block));
  EnterBackward(block);
  if (placement_.is_streaming(block)) {
    const uint32_t ring = placement_.ring_slots;
    const uint32_t rank = placement_.rank_of_block[block];
    const uint32_t slot = rank % ring;
    if (rank >= ring) BeforeReload(slot);
    BLOCKSWAP_RETURN_IF_ERROR(ReleaseSlot(slot));
    if (rank >= ring) {
      BLOCKSWAP_RETURN_IF_ERROR(Place(rank - ring, slot, Phase::kBackward, /*self_heal=*/false));
    }
  }
  // The next block to run backward must be ready before its backward starts.
  if (block > 0 && placement_.is_streaming(block - 1)) {
    return Await(block - 1, Phase::kBackward);
  }
  return absl::OkStatus();
}

absl::Status StreamScheduler::EnsureBlock(uint32_t block) {
  BLOCKSWAP_RETURN_IF_ERROR(CheckBlock(block));
  if (!placement_.is_streaming(block)) return absl::OkStatus();
  // No pass boundary: the caller is inside a pass (a backward unpacking what
  // b's forward saved), whose direction and order it does not change.
  return Await(block, pass_.direction);
}

absl::Status StreamScheduler::Place(uint32_t rank, uint32_t slot, Phase phase, bool self_heal) {
  const uint32_t block = placement_.streaming[rank];
  Slot& state = slots_[slot];
  SlotEvent event{.phase = phase, .block = block, .slot = slot, .self_heal = self_heal};
  if (state.bound && *state.bound != block) event.evicted = state.bound;
  // Only a slot whose content is trusted may be reused without a copy: after
  // a failed call (kUnknown) the same block is loaded again.
  if (state.Holds(block)) {
    event.action = SlotEvent::Action::kRebind;
    state.bound = block;
    ++pass_.rebinds;
    Notify(event);
    return absl::OkStatus();
  }
  if (absl::Status status = driver_.Load(slot, block); !status.ok()) {
    Distrust(slot);
    return Annotate(status, absl::StrCat("while loading block ", block, " into slot ", slot));
  }
  state.trust = Trust::kLoading;
  state.held = block;
  state.bound = block;
  ++pass_.loads;
  if (self_heal) ++pass_.self_heals;
  event.action = SlotEvent::Action::kLoad;
  Notify(event);
  return absl::OkStatus();
}

absl::Status StreamScheduler::Await(uint32_t block, Phase phase) {
  const uint32_t slot = placement_.rank_of_block[block] % placement_.ring_slots;
  if (!slots_[slot].Holds(block)) {
    // Cold start, a pass boundary, an aborted pass: load on demand.
    BLOCKSWAP_RETURN_IF_ERROR(
        Place(placement_.rank_of_block[block], slot, phase, /*self_heal=*/true));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<WaitOutcome> outcome = driver_.Wait(slot);
  pass_.host_wait += absl::Now() - start;
  ++pass_.waits;
  if (!outcome.ok()) {
    Distrust(slot);
    return Annotate(outcome.status(),
                    absl::StrCat("while waiting for block ", block, " in slot ", slot));
  }
  slots_[slot].trust = Trust::kLoaded;
  if (!outcome->was_ready) ++pass_.not_ready_waits;
  if (outcome->copy_time) pass_.copy_time += *outcome->copy_time;
  if (outcome->stall_ticket) {
    pass_of_ticket_[*outcome->stall_ticket] = pass_serial_;
    ++pass_.unmeasured_stalls;
  }
  // Statistics never fail a hook: a stall the driver could not measure
  // stays unmeasured.
  (void)CollectStalls(/*wait_for_all=*/false);
  return absl::OkStatus();
}

absl::Status StreamScheduler::CollectStalls(bool wait_for_all) {
  if (pass_of_ticket_.empty() && !wait_for_all) {
    ReportSettledPasses();
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<StreamStall>> stalls = driver_.TakeStreamStalls(wait_for_all);
  for (const StreamStall& stall : stalls.ok() ? *stalls : std::vector<StreamStall>{}) {
    auto ticket = pass_of_ticket_.find(stall.ticket);
    if (ticket == pass_of_ticket_.end()) continue;  // not a wait of this scheduler's
    PassStats* pass = ticket->second == pass_serial_ ? &pass_ : nullptr;
    for (FinishedPass& finished : unsettled_) {
      if (finished.serial == ticket->second) pass = &finished.stats;
    }
    pass_of_ticket_.erase(ticket);
    if (pass == nullptr) continue;
    pass->stall += stall.idle;
    --pass->unmeasured_stalls;
  }
  if (wait_for_all) {
    // What was not reported now never will be: the passes are complete.
    pass_of_ticket_.clear();
    pass_.unmeasured_stalls = 0;
    for (FinishedPass& finished : unsettled_) finished.stats.unmeasured_stalls = 0;
  }
  ReportSettledPasses();
  return stalls.status();
}

void StreamScheduler::ReportSettledPasses() {
  while (!unsettled_.empty() && unsettled_.front().stats.unmeasured_stalls == 0) {
    PassStats done = std::move(unsettled_.front().stats);
    unsettled_.pop_front();
    if (callbacks_.on_pass) callbacks_.on_pass(done);
  }
}

absl::Status StreamScheduler::SettlePasses() { return CollectStalls(/*wait_for_all=*/true); }

void StreamScheduler::BeforeReload(uint32_t slot) {
  if (callbacks_.on_before_reload) callbacks_.on_before_reload(slot);
}

absl::Status StreamScheduler::ReleaseSlot(uint32_t slot) {
  if (absl::Status status = driver_.Release(slot); !status.ok()) {
    Distrust(slot);
    return Annotate(status, absl::StrCat("while releasing slot ", slot));
  }
  return absl::OkStatus();
}

absl::Status StreamScheduler::DrainIfNeeded() {
  bool outstanding = drain_needed_;
  for (const Slot& slot : slots_) outstanding |= slot.trust == Trust::kLoading;
  if (!outstanding) return absl::OkStatus();
  if (absl::Status status = driver_.Drain(); !status.ok()) {
    // Whatever was in flight may not have landed.
    for (uint32_t slot = 0; slot < slots_.size(); ++slot) {
      if (slots_[slot].trust == Trust::kLoading) Distrust(slot);
    }
    return Annotate(status, "while draining the loads of an earlier pass");
  }
  // Every load issued has landed: the blocks they named are really there.
  for (Slot& slot : slots_) {
    if (slot.trust == Trust::kLoading) slot.trust = Trust::kLoaded;
  }
  drain_needed_ = false;
  return absl::OkStatus();
}

void StreamScheduler::Distrust(uint32_t slot) {
  slots_[slot].trust = Trust::kUnknown;
  drain_needed_ = true;
}

void StreamScheduler::Notify(const SlotEvent& event) {
  if (callbacks_.on_bind) callbacks_.on_bind(event);
}

// --- statistics ------------------------------------------------------------------------

void StreamScheduler::EnterForward(uint32_t block, bool is_wait) {
  // Forward hooks run with rising block indices; one that goes back (or a
  // second wait for the same block) starts another pass.
  bool new_pass = pass_.direction != Phase::kForward ||
                  (last_forward_block_ &&
                   (block < *last_forward_block_ || (is_wait && block == *last_forward_block_)));
  if (new_pass) {
    FinishPass();
    pass_.direction = Phase::kForward;
  }
  last_forward_block_ = block;
}

void StreamScheduler::EnterBackward(uint32_t block) {
  bool new_pass = pass_.direction != Phase::kBackward ||
                  (last_backward_block_ && block >= *last_backward_block_);
  if (new_pass) {
    FinishPass();
    pass_.direction = Phase::kBackward;
  }
  last_backward_block_ = block;
}

void StreamScheduler::FinishPass() {
  PassStats done = std::exchange(pass_, PassStats{.direction = pass_.direction});
  const uint64_t serial = pass_serial_++;
  last_forward_block_.reset();
  last_backward_block_.reset();
  if (done.empty()) {
    for (auto it = pass_of_ticket_.begin(); it != pass_of_ticket_.end();) {
      it = it->second == serial ? pass_of_ticket_.erase(it) : std::next(it);
    }
    return;
  }
  unsettled_.push_back(FinishedPass{serial, std::move(done)});
  (void)CollectStalls(/*wait_for_all=*/false);  // statistics never fail a hook
}

SlotState StreamScheduler::slot_state(uint32_t slot) const {
  if (slot >= slots_.size()) return {};
  const Slot& state = slots_[slot];
  SlotState view{.bound = state.bound};
  if (state.trust == Trust::kLoading || state.trust == Trust::kLoaded) view.held = state.held;
  view.load_outstanding = state.trust == Trust::kLoading;
  return view;
}

std::optional<uint32_t> StreamScheduler::slot_of(uint32_t block) const {
  for (uint32_t slot = 0; slot < slots_.size(); ++slot) {
    if (slots_[slot].bound == block) return slot;
  }
  return std::nullopt;
}

}  // namespace blockswap::client
