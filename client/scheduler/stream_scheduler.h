// StreamScheduler: the trainer-side residency logic of docs/client.md (the
// reference's LoRAStreamOffloader), without torch and without gRPC. It decides
// which streaming block goes into which ring slot and when, drives a
// SlotDriver (client/scheduler/slot_driver.h) to carry that out, tells its caller which
// block is bound to which slot so that an integration can rebind its tensors,
// and keeps per-pass statistics.
//
// With N blocks, S of them streamed and a ring of B slots (B <= S), the
// streaming block of rank k always lives in slot k % B:
//   Prepare()         drains what an aborted pass left in flight, then puts
//                     ranks 0..B-1 into slots 0..B-1; a slot that still holds
//                     the right block is a no-op rebind, not a transfer.
//   WaitForBlock(b)   before block b's forward: loads b on demand if its slot
//                     holds something else (self-heal), then waits for it.
//   AfterForward(b)   b's slot is free; prefetch the rank B ahead. In
//                     training the last B ranks stay for the turn-around; in
//                     forward-only mode the last rank wraps around and
//                     preloads ranks 0..B-1 for the next pass.
//   AfterBackward(b)  b's slot is free; prefetch the rank B behind, then wait
//                     for block b-1 (the next to run backward).
//   EnsureBlock(b)    b is in its slot and waited for, in the pass in progress
//                     (a saved tensor of b's forward is needed in backward):
//                     loads b on demand if its slot holds something else.
// The `block` arguments are transformer block indices 0..N-1 (resident
// blocks may be passed too; they are no-ops), the same numbers the driver
// receives (client/scheduler/slot_driver.h).
//
// Aborted passes. The scheduler keeps, per slot, what it may trust: a load
// issued and not yet seen complete, a load seen complete (a Wait or a Drain
// returned OK), or unknown (a driver call on the slot failed). An exception
// anywhere between two hooks leaves it consistent: the next Prepare() drains
// outstanding loads first (docs/protocol.md: no slot is reused while a generation
// is in flight) and rebinds only slots whose content it trusts.
#ifndef BLOCKSWAP_CLIENT_SCHEDULER_STREAM_SCHEDULER_H_
#define BLOCKSWAP_CLIENT_SCHEDULER_STREAM_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/scheduler/slot_driver.h"

namespace blockswap::client {

// More blocks than any transformer has; bounds the tables a typo could make.
inline constexpr uint32_t kMaxSchedulerBlocks = 1u << 16;

// Which streaming blocks there are and how big the ring really is.
struct Placement {
  static constexpr uint32_t kResident = UINT32_MAX;

  uint32_t num_blocks = 0;
  std::vector<uint32_t> streaming;      // ascending; rank k is streaming[k]
  std::vector<uint32_t> resident;       // ascending; never streamed
  uint32_t ring_slots = 0;              // the requested ring clamped to S
  std::vector<uint32_t> rank_of_block;  // per block: its rank, or kResident

  bool is_streaming(uint32_t block) const {
    return block < num_blocks && rank_of_block[block] != kResident;
  }
  std::optional<uint32_t> StreamingRank(uint32_t block) const;
};

// Places `blocks_to_swap` (S) streaming blocks evenly among `num_blocks` (N):
// block ((2i+1)N) / (2S) for i in 0..S-1, duplicates collapsed (so S > N
// streams every block once), and clamps the ring to the number streamed.
// S = 0 streams nothing and leaves a ring of 0 slots.
absl::StatusOr<Placement> PlaceBlocks(uint32_t num_blocks, uint32_t blocks_to_swap,
                                      uint32_t ring_size);

// Where an action happened. Statistics are per pass and direction: the loads
// of Prepare() count in the forward pass that follows it.
enum class Phase : uint8_t { kPrepare, kForward, kBackward };
// "prepare", "fwd", "bwd" (the trace's words).
absl::string_view PhaseName(Phase phase);
// "forward", "backward" (v1::PassStats.direction); kPrepare counts as forward.
absl::string_view DirectionName(Phase phase);

// A block bound to a slot: the caller repoints the block's streamed tensors
// at the slot (and `evicted`'s back at their host masters).
struct SlotEvent {
  enum class Action : uint8_t {
    kLoad,    // a copy was requested into the slot
    kRebind,  // the slot already holds the block: no transfer
  };
  Phase phase = Phase::kPrepare;
  Action action = Action::kLoad;
  uint32_t block = 0;
  uint32_t slot = 0;
  bool self_heal = false;                          // a wait found its block missing and loaded it
  std::optional<uint32_t> evicted = std::nullopt;  // the block bound to the slot before, if another
};
// One line of `blockswapctl plan --trace`: "fwd load block=6 slot=0",
// "fwd load block=1 slot=0 self-heal", "prepare rebind block=1 slot=0".
std::string TraceLine(const SlotEvent& event);

// Statistics of one pass in one direction (docs/client.md), as reported to the
// daemon (v1::PassStats). Two different waits:
//   stall      how long the compute stream sat idle at the pass's waits (the
//              reference's "GPU stall"; time the trainer really lost), as
//              the driver measured it on the stream;
//   host_wait  how long the trainer's thread blocked in the driver's Wait:
//              mostly its own queued compute draining, not time lost.
struct PassStats {
  Phase direction = Phase::kForward;                // kForward or kBackward
  absl::Duration stall = absl::ZeroDuration();      // compute-stream idle time
  absl::Duration host_wait = absl::ZeroDuration();  // time spent in the driver's Wait
  absl::Duration copy_time = absl::ZeroDuration();  // as the driver reported it, where it could
  uint64_t waits = 0;
  uint64_t not_ready_waits = 0;  // waits that found the copy unfinished
  uint64_t self_heals = 0;
  uint64_t loads = 0;    // copies requested (self-heals included)
  uint64_t rebinds = 0;  // no-op rebinds: no copy
  // Waits whose stall the driver measures but has not reported (yet; once
  // the pass was reported, never: `stall` leaves them out).
  uint64_t unmeasured_stalls = 0;

  bool empty() const { return waits == 0 && loads == 0 && rebinds == 0; }
};

struct SchedulerConfig {
  uint32_t num_blocks = 0;
  uint32_t blocks_to_swap = 0;
  uint32_t ring_size = 2;
  // Inference: no backward follows a forward pass, so the ring wraps around.
  bool forward_only = false;
};

struct SchedulerCallbacks {
  // Every load and no-op rebind, in order, after the scheduler's own state
  // has been updated (so a callback that throws leaves it consistent).
  std::function<void(const SlotEvent&)> on_bind;
  // Every pass with some activity, once it is over (the direction changes,
  // a new pass starts, Prepare() runs, or FinishPass() is called) AND its
  // compute-stream stall is measured: that is known only once the stream
  // has passed the pass's waits, which a later hook notices without
  // blocking, or SettlePasses() waits for. In pass order.
  std::function<void(const PassStats&)> on_pass;
  // A slot that the hook under way is about to hand back for another block's
  // load, told before the slot is released: the last moment work the caller
  // queues on the slot (on the scheduler's stream) is ordered before the
  // daemon's copy into it.
  std::function<void(uint32_t slot)> on_before_reload;
};

// What the scheduler believes a slot holds.
struct SlotState {
  std::optional<uint32_t> bound = std::nullopt;  // the block the caller was last told is bound here
  std::optional<uint32_t> held = std::nullopt;  // the block whose bytes the slot holds or will hold
  bool load_outstanding = false;  // `held`'s load was issued and not yet seen complete
};

// Thread-compatible: one thread (the trainer's) calls it, as with the driver.
class StreamScheduler {
 public:
  // `driver` must outlive the scheduler and serve at least
  // placement().ring_slots slots.
  static absl::StatusOr<std::unique_ptr<StreamScheduler>> Create(const SchedulerConfig& config,
                                                                 SlotDriver& driver,
                                                                 SchedulerCallbacks callbacks = {});

  StreamScheduler(const StreamScheduler&) = delete;
  StreamScheduler& operator=(const StreamScheduler&) = delete;

  const Placement& placement() const { return placement_; }
  bool forward_only() const { return forward_only_; }
  // Takes effect at the next hook. Nothing needs draining: the scheduler's
  // decisions never depend on a copy having completed, and the driver's
  // Load releases (and so awaits) a slot's previous generation itself.
  void SetForwardOnly(bool forward_only) { forward_only_ = forward_only; }

  // The trainer's hooks (see the top of this file).
  absl::Status Prepare();
  absl::Status WaitForBlock(uint32_t block);
  absl::Status AfterForward(uint32_t block);
  absl::Status AfterBackward(uint32_t block);
  absl::Status EnsureBlock(uint32_t block);

  // Ends the current pass and starts counting afresh; its statistics are
  // reported (on_pass) if it did anything, at once when the stream has
  // passed its waits, else once it has (see on_pass).
  void FinishPass();
  // Blocks until the compute stream has passed every wait issued so far and
  // reports every finished pass (a statistics read: on a GPU it costs what a
  // stream synchronisation costs). An error of the measurement leaves the
  // stalls it lost out, and is returned once the passes are reported.
  absl::Status SettlePasses();
  // The pass being counted.
  const PassStats& current_pass() const { return pass_; }

  SlotState slot_state(uint32_t slot) const;
  // The slot `block` is bound to, if any.
  std::optional<uint32_t> slot_of(uint32_t block) const;

 private:
  enum class Trust : uint8_t {
    kEmpty,    // never loaded
    kLoading,  // load issued, completion not seen yet
    kLoaded,   // completion seen (Wait or Drain returned OK)
    kUnknown,  // a driver call on the slot failed: the bytes are not trusted
  };
  struct Slot {
    Trust trust = Trust::kEmpty;
    uint32_t held = 0;  // meaningful for kLoading and kLoaded only
    std::optional<uint32_t> bound;

    bool Holds(uint32_t block) const {
      return (trust == Trust::kLoading || trust == Trust::kLoaded) && held == block;
    }
  };

  StreamScheduler(Placement placement, SlotDriver& driver, SchedulerCallbacks callbacks,
                  bool forward_only);

  absl::Status CheckBlock(uint32_t block) const;
  // Statistics bookkeeping: which pass a hook belongs to.
  void EnterForward(uint32_t block, bool is_wait);
  void EnterBackward(uint32_t block);
  // Puts the streaming block of `rank` into `slot`: a no-op rebind when the
  // slot already holds it, otherwise a load.
  absl::Status Place(uint32_t rank, uint32_t slot, Phase phase, bool self_heal);
  absl::Status Await(uint32_t block, Phase phase);
  // Tells on_before_reload that `slot` is about to get another block.
  void BeforeReload(uint32_t slot);
  absl::Status ReleaseSlot(uint32_t slot);
  absl::Status DrainIfNeeded();
  // After a failed driver call on `slot`.
  void Distrust(uint32_t slot);
  void Notify(const SlotEvent& event);
  // Adds the driver's measured stalls to their passes and reports the
  // finished passes that are complete; `wait_for_all` as the driver's.
  absl::Status CollectStalls(bool wait_for_all);
  void ReportSettledPasses();

  const Placement placement_;
  SlotDriver& driver_;
  const SchedulerCallbacks callbacks_;
  bool forward_only_;
  std::vector<Slot> slots_;
  // A driver call failed: a request may be in flight that no slot records.
  bool drain_needed_ = false;

  PassStats pass_;
  uint64_t pass_serial_ = 0;  // pass_'s number; finished passes have lower ones
  struct FinishedPass {
    uint64_t serial = 0;
    PassStats stats;
  };
  std::deque<FinishedPass> unsettled_;           // finished, some stall not reported yet
  std::map<uint64_t, uint64_t> pass_of_ticket_;  // stall ticket -> pass serial
  // The last block index of the pass seen by a forward / backward hook, to
  // notice that a new pass began (indices run up in forward, down in
  // backward); nullopt right after the pass opened.
  std::optional<uint32_t> last_forward_block_;
  std::optional<uint32_t> last_backward_block_;
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_SCHEDULER_STREAM_SCHEDULER_H_
