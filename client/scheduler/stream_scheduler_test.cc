// The StreamScheduler on the RecordingSlotDriver. The reference's own
// schedules are checked line by line by the plan_trace ctests
// (tests/plan/, tests/data/traces/); these cover what a trace cannot show:
// placement edge cases, what the driver is asked to do, aborted passes and
// driver errors, and the statistics.
#include "client/scheduler/stream_scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/scheduler/recording_slot_driver.h"

namespace blockswap::client {
namespace {

using Call = RecordingSlotDriver::Call;
using CallKind = RecordingSlotDriver::CallKind;

std::vector<uint32_t> Blocks(std::initializer_list<uint32_t> blocks) { return blocks; }

// A scheduler on a recording driver, with its trace and its reported passes,
// driven like a trainer with gradient checkpointing: forward hooks around
// every block in order, backward hooks after every block in reverse.
// Every wait is checked against the driver's model of the ring: the slot
// must really hold the block the compute is about to read.
class Trainer {
 public:
  explicit Trainer(SchedulerConfig config, RecordingSlotDriver::Options options = {}) {
    absl::StatusOr<Placement> placement =
        PlaceBlocks(config.num_blocks, config.blocks_to_swap, config.ring_size);
    EXPECT_TRUE(placement.ok()) << placement.status();
    driver_ = std::make_unique<RecordingSlotDriver>(placement->ring_slots, options);
    SchedulerCallbacks callbacks;
    callbacks.on_bind = [this](const SlotEvent& event) {
      if (throw_on_next_bind_) {
        throw_on_next_bind_ = false;
        throw std::runtime_error("the integration failed while rebinding");
      }
      trace_.push_back(TraceLine(event));
      events_.push_back(event);
    };
    callbacks.on_pass = [this](const PassStats& pass) { passes_.push_back(pass); };
    absl::StatusOr<std::unique_ptr<StreamScheduler>> scheduler =
        StreamScheduler::Create(config, *driver_, std::move(callbacks));
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(*scheduler);
  }

  absl::Status Forward(uint32_t stop_before = UINT32_MAX) {
    for (uint32_t block = 0; block < num_blocks() && block < stop_before; ++block) {
      if (absl::Status status = scheduler_->WaitForBlock(block); !status.ok()) return status;
      ExpectReadable(block);
      if (absl::Status status = scheduler_->AfterForward(block); !status.ok()) return status;
    }
    return absl::OkStatus();
  }

  absl::Status Backward() {
    for (uint32_t block = num_blocks(); block-- > 0;) {
      if (absl::Status status = scheduler_->AfterBackward(block); !status.ok()) return status;
      if (block > 0) ExpectReadable(block - 1);
    }
    return absl::OkStatus();
  }

  // What the compute of `block` would read is `block`'s bytes.
  void ExpectReadable(uint32_t block) {
    const Placement& placement = scheduler_->placement();
    if (!placement.is_streaming(block)) return;
    uint32_t slot = *placement.StreamingRank(block) % placement.ring_slots;
    EXPECT_EQ(driver_->content(slot), block) << "slot " << slot << " read for block " << block;
    EXPECT_EQ(scheduler_->slot_of(block), slot);
  }

  std::vector<std::string> TakeTrace() { return std::exchange(trace_, {}); }
  uint32_t num_blocks() const { return scheduler_->placement().num_blocks; }
  StreamScheduler& scheduler() { return *scheduler_; }
  RecordingSlotDriver& driver() { return *driver_; }
  const std::vector<SlotEvent>& events() const { return events_; }
  const std::vector<PassStats>& passes() const { return passes_; }
  void ThrowOnNextBind() { throw_on_next_bind_ = true; }

 private:
  std::unique_ptr<RecordingSlotDriver> driver_;
  std::unique_ptr<StreamScheduler> scheduler_;
  std::vector<std::string> trace_;
  std::vector<SlotEvent> events_;
  std::vector<PassStats> passes_;
  bool throw_on_next_bind_ = false;
};

int CountCalls(const std::vector<Call>& calls, CallKind kind) {
  int count = 0;
  for (const Call& call : calls) count += call.kind == kind;
  return count;
}

// --- placement -------------------------------------------------------------------------

// on_before_reload names exactly the slots a hook hands back for another
// block's load, each before the driver is asked to release it: the ground
// truth N=10 S=4 B=2 (forward reloads slots 0 and 1 after blocks 1 and 3,
// backward slots 1 and 0 after blocks 8 and 6; the tail and the head keep
// theirs), and in inference the wrap-around after the last block names every
// slot.
TEST(StreamSchedulerReload, EachSlotHandedBackForAnotherBlockIsToldBeforeItsRelease) {
  for (const bool forward_only : {false, true}) {
    SCOPED_TRACE(forward_only ? "inference" : "training");
    RecordingSlotDriver driver(2);
    std::vector<std::pair<uint32_t, size_t>> told;  // slot, driver calls so far
    SchedulerCallbacks callbacks;
    callbacks.on_before_reload = [&](uint32_t slot) {
      told.emplace_back(slot, driver.calls().size());
    };
    auto scheduler = StreamScheduler::Create(
        {.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2, .forward_only = forward_only},
        driver, std::move(callbacks));
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    ASSERT_TRUE((*scheduler)->Prepare().ok());
    EXPECT_TRUE(told.empty()) << "prepare hands no slot back";
    std::vector<uint32_t> forward;
    for (uint32_t block = 0; block < 10; ++block) {
      ASSERT_TRUE((*scheduler)->WaitForBlock(block).ok());
      told.clear();
      ASSERT_TRUE((*scheduler)->AfterForward(block).ok());
      for (const auto& [slot, calls_before] : told) {
        forward.push_back(slot);
        // The slot's release comes after the callback, in this hook.
        bool released_after = false;
        for (size_t c = calls_before; c < driver.calls().size(); ++c) {
          released_after |= driver.calls()[c].kind == CallKind::kRelease;
        }
        EXPECT_TRUE(released_after) << "slot " << slot << " after block " << block;
      }
    }
    EXPECT_EQ(forward, forward_only ? std::vector<uint32_t>({0, 1, 0, 1})
                                    : std::vector<uint32_t>({0, 1}));
    if (forward_only) continue;
    std::vector<uint32_t> backward;
    for (uint32_t block = 10; block-- > 0;) {
      told.clear();
      ASSERT_TRUE((*scheduler)->AfterBackward(block).ok());
      for (const auto& entry : told) backward.push_back(entry.first);
    }
    EXPECT_EQ(backward, std::vector<uint32_t>({1, 0}));
  }
}

TEST(StreamSchedulerPlacement, SpreadsStreamingBlocksByTheMidpointFormula) {
  absl::StatusOr<Placement> placement = PlaceBlocks(10, 4, 2);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->streaming, Blocks({1, 3, 6, 8}));
  EXPECT_EQ(placement->resident, Blocks({0, 2, 4, 5, 7, 9}));
  EXPECT_EQ(placement->ring_slots, 2u);
  EXPECT_EQ(placement->StreamingRank(6), 2u);
  EXPECT_EQ(placement->StreamingRank(5), std::nullopt);
  EXPECT_EQ(placement->StreamingRank(10), std::nullopt);
}

TEST(StreamSchedulerPlacement, ClampsTheRingToTheStreamingBlocks) {
  absl::StatusOr<Placement> placement = PlaceBlocks(5, 3, 5);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->streaming, Blocks({0, 2, 4}));
  EXPECT_EQ(placement->ring_slots, 3u);
}

TEST(StreamSchedulerPlacement, SwapZeroStreamsNothingWithAnEmptyRing) {
  absl::StatusOr<Placement> placement = PlaceBlocks(5, 0, 2);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_TRUE(placement->streaming.empty());
  EXPECT_EQ(placement->resident, Blocks({0, 1, 2, 3, 4}));
  EXPECT_EQ(placement->ring_slots, 0u);
}

TEST(StreamSchedulerPlacement, SwapBeyondTheBlockCountCollapsesToDistinctBlocks) {
  absl::StatusOr<Placement> placement = PlaceBlocks(4, 6, 2);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->streaming, Blocks({0, 1, 2, 3}));
  EXPECT_TRUE(placement->resident.empty());
  EXPECT_EQ(placement->ring_slots, 2u);
}

TEST(StreamSchedulerPlacement, RefusesAnEmptyRingOrModel) {
  EXPECT_EQ(PlaceBlocks(10, 4, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceBlocks(0, 0, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceBlocks(kMaxSchedulerBlocks + 1, 4, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- schedules -------------------------------------------------------------------------

TEST(StreamScheduler, ReproducesTheDesignGroundTruth) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  EXPECT_EQ(trainer.TakeTrace(), (std::vector<std::string>{"prepare load block=1 slot=0",
                                                           "prepare load block=3 slot=1"}));
  ASSERT_TRUE(trainer.Forward().ok());
  EXPECT_EQ(trainer.TakeTrace(),
            (std::vector<std::string>{"fwd load block=6 slot=0", "fwd load block=8 slot=1"}));
  ASSERT_TRUE(trainer.Backward().ok());
  EXPECT_EQ(trainer.TakeTrace(),
            (std::vector<std::string>{"bwd load block=3 slot=1", "bwd load block=1 slot=0"}));
  trainer.driver().ClearCalls();
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  EXPECT_EQ(trainer.TakeTrace(), (std::vector<std::string>{"prepare rebind block=1 slot=0",
                                                           "prepare rebind block=3 slot=1"}));
  // The rebinds moved nothing, and nothing was left to drain.
  EXPECT_TRUE(trainer.driver().calls().empty());
  EXPECT_EQ(trainer.driver().loads_over_unawaited(), 0);
}

TEST(StreamScheduler, AsksTheDriverToReleaseBeforeEachPrefetchAndToWaitBeforeEachRead) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  EXPECT_EQ(trainer.driver().calls(), (std::vector<Call>{{CallKind::kLoad, 0, 1},
                                                         {CallKind::kLoad, 1, 3},
                                                         {CallKind::kWait, 0},  // block 1
                                                         {CallKind::kRelease, 0},
                                                         {CallKind::kLoad, 0, 6},
                                                         {CallKind::kWait, 1},  // block 3
                                                         {CallKind::kRelease, 1},
                                                         {CallKind::kLoad, 1, 8},
                                                         {CallKind::kWait, 0},  // block 6
                                                         {CallKind::kRelease, 0},
                                                         {CallKind::kWait, 1},  // block 8
                                                         {CallKind::kRelease, 1}}));
}

TEST(StreamScheduler, TellsTheCallerWhichBlockEachLoadEvicts) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_EQ(trainer.events().size(), 4u);
  EXPECT_EQ(trainer.events()[0].evicted, std::nullopt);
  EXPECT_EQ(trainer.events()[2].block, 6u);
  EXPECT_EQ(trainer.events()[2].evicted, 1u);
  EXPECT_EQ(trainer.scheduler().slot_of(1), std::nullopt);
  EXPECT_EQ(trainer.scheduler().slot_of(6), 0u);
  EXPECT_EQ(trainer.scheduler().slot_state(1).bound, 8u);
}

// A backward that needs a block its hooks did not bring back (a prepare
// between forward and backward evicted the forward's tail) loads it on
// demand in the pass in progress, counted as a self-heal; a block already in
// its slot is only waited for, and no pass begins either way.
TEST(StreamScheduler, EnsureBlockLoadsAnEvictedBlockInThePassInProgress) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.scheduler().AfterBackward(9).ok());  // the backward pass begins
  ASSERT_TRUE(trainer.scheduler().EnsureBlock(8).ok());    // still in its slot
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());         // evicts 6 and 8
  trainer.TakeTrace();
  ASSERT_TRUE(trainer.scheduler().EnsureBlock(8).ok());
  trainer.ExpectReadable(8);
  EXPECT_EQ(trainer.TakeTrace(), (std::vector<std::string>{"fwd load block=8 slot=1 self-heal"}));
  ASSERT_TRUE(trainer.scheduler().EnsureBlock(0).ok());  // resident: nothing to do
  EXPECT_TRUE(trainer.TakeTrace().empty());
  EXPECT_EQ(trainer.scheduler().current_pass().self_heals, 1u);
  EXPECT_EQ(trainer.scheduler().EnsureBlock(10).code(), absl::StatusCode::kOutOfRange);
}

TEST(StreamScheduler, ForwardOnlyWrapsAroundToTheFirstRanks) {
  Trainer trainer({.num_blocks = 9, .blocks_to_swap = 5, .ring_size = 3, .forward_only = true});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  trainer.TakeTrace();
  ASSERT_TRUE(trainer.Forward().ok());
  // After the last streaming block (8), ranks 0..2 come back; block 4 never
  // left slot 2.
  EXPECT_EQ(trainer.TakeTrace(),
            (std::vector<std::string>{"fwd load block=6 slot=0", "fwd load block=8 slot=1",
                                      "fwd load block=0 slot=0", "fwd load block=2 slot=1",
                                      "fwd rebind block=4 slot=2"}));
  // The next pass starts without a self-heal, and reads what it waits for.
  ASSERT_TRUE(trainer.Forward().ok());
  for (const SlotEvent& event : trainer.events()) EXPECT_FALSE(event.self_heal);
  EXPECT_EQ(trainer.driver().loads_over_unawaited(), 0);
}

TEST(StreamScheduler, ForwardOnlyWithTheWholeRingStreamingLoadsNothingMore) {
  Trainer trainer({.num_blocks = 5, .blocks_to_swap = 3, .ring_size = 5, .forward_only = true});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  trainer.driver().ClearCalls();
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  EXPECT_EQ(CountCalls(trainer.driver().calls(), CallKind::kLoad), 0);
  EXPECT_EQ(CountCalls(trainer.driver().calls(), CallKind::kWait), 6);
}

TEST(StreamScheduler, SwitchingToTrainingStopsTheWrapAround) {
  Trainer trainer({.num_blocks = 9, .blocks_to_swap = 5, .ring_size = 3, .forward_only = true});
  trainer.scheduler().SetForwardOnly(false);
  EXPECT_FALSE(trainer.scheduler().forward_only());
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  trainer.TakeTrace();
  ASSERT_TRUE(trainer.Forward().ok());
  EXPECT_EQ(trainer.TakeTrace(),
            (std::vector<std::string>{"fwd load block=6 slot=0", "fwd load block=8 slot=1"}));
}

TEST(StreamScheduler, SwapZeroNeverTouchesTheDriver) {
  Trainer trainer({.num_blocks = 5, .blocks_to_swap = 0, .ring_size = 2});
  EXPECT_EQ(trainer.scheduler().placement().ring_slots, 0u);
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.Backward().ok());
  trainer.scheduler().FinishPass();
  EXPECT_TRUE(trainer.driver().calls().empty());
  EXPECT_TRUE(trainer.passes().empty());
}

TEST(StreamScheduler, SwapBeyondTheBlockCountStreamsEveryBlockOnce) {
  Trainer trainer({.num_blocks = 4, .blocks_to_swap = 6, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.Backward().ok());
  EXPECT_EQ(trainer.TakeTrace(),
            (std::vector<std::string>{"prepare load block=0 slot=0", "prepare load block=1 slot=1",
                                      "fwd load block=2 slot=0", "fwd load block=3 slot=1",
                                      "bwd load block=1 slot=1", "bwd load block=0 slot=0"}));
}

TEST(StreamScheduler, RefusesABlockOutOfRange) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  EXPECT_EQ(trainer.scheduler().WaitForBlock(10).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(trainer.scheduler().AfterForward(10).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(trainer.scheduler().AfterBackward(11).code(), absl::StatusCode::kOutOfRange);
}

// --- aborted passes --------------------------------------------------------------------

// The pass after an aborted one must be the normal pass, byte for byte.
void ExpectANormalStep(Trainer& trainer) {
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.Backward().ok());
  EXPECT_EQ(trainer.TakeTrace(),
            (std::vector<std::string>{"fwd load block=6 slot=0", "fwd load block=8 slot=1",
                                      "bwd load block=3 slot=1", "bwd load block=1 slot=0"}));
}

TEST(StreamSchedulerAbort, AnExceptionMidForwardIsDrainedByThePrepareAfterIt) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  // The trainer throws in block 2: block 6's load into slot 0 is in flight.
  ASSERT_TRUE(trainer.Forward(/*stop_before=*/2).ok());
  EXPECT_TRUE(trainer.scheduler().slot_state(0).load_outstanding);
  trainer.TakeTrace();
  trainer.driver().ClearCalls();

  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  // Drained before anything else; slot 0 holds 6 now, slot 1 still holds 3.
  ASSERT_FALSE(trainer.driver().calls().empty());
  EXPECT_EQ(trainer.driver().calls().front(), (Call{CallKind::kDrain}));
  EXPECT_EQ(trainer.TakeTrace(), (std::vector<std::string>{"prepare load block=1 slot=0",
                                                           "prepare rebind block=3 slot=1"}));
  EXPECT_EQ(trainer.driver().loads_in_flight(), 1);
  ExpectANormalStep(trainer);
  EXPECT_EQ(trainer.driver().loads_over_unawaited(), 0);
}

TEST(StreamSchedulerAbort, AnExceptionFromTheBindCallbackLeavesTheStateConsistent) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  trainer.TakeTrace();
  ASSERT_TRUE(trainer.scheduler().WaitForBlock(0).ok());
  ASSERT_TRUE(trainer.scheduler().AfterForward(0).ok());
  ASSERT_TRUE(trainer.scheduler().WaitForBlock(1).ok());
  trainer.ThrowOnNextBind();  // while block 6 is bound to slot 0
  EXPECT_THROW((void)trainer.scheduler().AfterForward(1), std::runtime_error);
  // The load went out: the scheduler knows slot 0 now receives block 6.
  EXPECT_EQ(trainer.scheduler().slot_state(0).held, 6u);

  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  EXPECT_EQ(trainer.TakeTrace(), (std::vector<std::string>{"prepare load block=1 slot=0",
                                                           "prepare rebind block=3 slot=1"}));
  ExpectANormalStep(trainer);
}

TEST(StreamSchedulerAbort, AFailedLoadIsNeverTakenForANoOpRebind) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  trainer.TakeTrace();
  // Block 6's load into slot 0 (which held block 1) fails after its request
  // went out: slot 0's bytes are undefined.
  trainer.driver().FailCall(CallKind::kLoad, 0, absl::UnavailableError("daemon went away"));
  absl::Status status = trainer.Forward();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("while loading block 6 into slot 0"), std::string::npos)
      << status;
  EXPECT_EQ(trainer.scheduler().slot_state(0).held, std::nullopt);
  EXPECT_EQ(trainer.driver().content(0), std::nullopt);
  trainer.driver().ClearCalls();

  // Block 1 was bound to slot 0 before; only a real load makes it right again.
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  EXPECT_EQ(trainer.driver().calls().front(), (Call{CallKind::kDrain}));
  EXPECT_EQ(trainer.TakeTrace(), (std::vector<std::string>{"prepare load block=1 slot=0",
                                                           "prepare rebind block=3 slot=1"}));
  EXPECT_EQ(trainer.driver().content(0), 1u);
  ExpectANormalStep(trainer);
}

TEST(StreamSchedulerAbort, AFailedWaitMidBackwardReloadsThatSlot) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  trainer.TakeTrace();
  // Backward's first wait (block 8, slot 1) times out.
  trainer.driver().FailCall(CallKind::kWait, 0, absl::DeadlineExceededError("slot 1 not filled"));
  EXPECT_EQ(trainer.Backward().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(trainer.scheduler().slot_state(1).held, std::nullopt);

  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  // Slot 0 still holds 6 (not rank 0), slot 1 is not trusted: both load.
  EXPECT_EQ(trainer.TakeTrace(), (std::vector<std::string>{"prepare load block=1 slot=0",
                                                           "prepare load block=3 slot=1"}));
  ExpectANormalStep(trainer);
}

TEST(StreamSchedulerAbort, AFailedDrainFailsPrepareUntilADrainSucceeds) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward(/*stop_before=*/2).ok());  // block 6 in flight in slot 0
  trainer.TakeTrace();
  trainer.driver().FailCall(CallKind::kDrain, 0, absl::DeadlineExceededError("drain timed out"));
  EXPECT_EQ(trainer.scheduler().Prepare().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(trainer.TakeTrace().empty());
  trainer.driver().ClearCalls();

  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  EXPECT_EQ(trainer.driver().calls().front(), (Call{CallKind::kDrain}));
  // What was in flight during the failed drain is not trusted any more:
  // block 3, loaded by the first prepare and never waited for, is loaded again.
  EXPECT_EQ(trainer.TakeTrace(), (std::vector<std::string>{"prepare load block=1 slot=0",
                                                           "prepare load block=3 slot=1"}));
  ExpectANormalStep(trainer);
}

TEST(StreamSchedulerAbort, APrepareAfterACompletePassDrainsNothing) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.Backward().ok());
  trainer.driver().ClearCalls();
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  EXPECT_EQ(CountCalls(trainer.driver().calls(), CallKind::kDrain), 0);
}

// --- statistics ------------------------------------------------------------------------

TEST(StreamSchedulerStats, CountsEachPassAndDirection) {
  constexpr absl::Duration kCopy = absl::Milliseconds(1);
  constexpr absl::Duration kWait = absl::Milliseconds(2);
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2},
                  {.copy_time = kCopy, .wait_delay = kWait});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.Forward().ok());  // cold: blocks 1 and 3 self-heal
  ASSERT_TRUE(trainer.Backward().ok());
  trainer.scheduler().FinishPass();

  ASSERT_EQ(trainer.passes().size(), 3u);
  const PassStats& first = trainer.passes()[0];
  EXPECT_EQ(first.direction, Phase::kForward);
  EXPECT_EQ(first.loads, 4u);  // prepare's two count in the pass they prepare
  EXPECT_EQ(first.waits, 4u);
  EXPECT_EQ(first.not_ready_waits, 0u);
  EXPECT_EQ(first.self_heals, 0u);
  EXPECT_EQ(first.copy_time, 4 * kCopy);
  EXPECT_GE(first.host_wait, 4 * kWait);

  const PassStats& second = trainer.passes()[1];
  EXPECT_EQ(second.direction, Phase::kForward);
  EXPECT_EQ(second.loads, 4u);
  EXPECT_EQ(second.self_heals, 2u);
  EXPECT_EQ(second.not_ready_waits, 2u);  // a self-heal's wait follows its own load
  EXPECT_EQ(second.waits, 4u);

  const PassStats& third = trainer.passes()[2];
  EXPECT_EQ(third.direction, Phase::kBackward);
  EXPECT_EQ(third.loads, 2u);
  EXPECT_EQ(third.waits, 4u);  // blocks 8, 6, 3, 1 before the blocks after them
  EXPECT_EQ(third.rebinds, 0u);
  EXPECT_EQ(third.copy_time, 2 * kCopy);  // 8 and 6 were reported by the forward pass
  EXPECT_EQ(DirectionName(third.direction), "backward");
}

TEST(StreamSchedulerStats, CountsRebindsAndReportsOnlyPassesThatDidSomething) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.Backward().ok());
  ASSERT_EQ(trainer.passes().size(), 1u);  // the backward pass is still open
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_EQ(trainer.passes().size(), 2u);
  EXPECT_EQ(trainer.scheduler().current_pass().rebinds, 2u);
  EXPECT_EQ(trainer.scheduler().current_pass().loads, 0u);
  trainer.scheduler().FinishPass();
  trainer.scheduler().FinishPass();  // nothing happened since: nothing reported
  ASSERT_EQ(trainer.passes().size(), 3u);
  EXPECT_EQ(trainer.passes()[2].rebinds, 2u);
}

// The two waits of a pass are different numbers: the thread blocking in Wait
// (host_wait) and the compute stream sitting idle (stall, measured by the
// driver on the stream and reported after the fact).
TEST(StreamSchedulerStats, AThreadThatBlocksWhileItsStreamNeverIdlesHasNoStall) {
  constexpr absl::Duration kWait = absl::Milliseconds(2);
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2},
                  {.wait_delay = kWait, .not_ready_stream_stall = absl::ZeroDuration()});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  trainer.scheduler().FinishPass();
  ASSERT_EQ(trainer.passes().size(), 1u);
  EXPECT_GE(trainer.passes()[0].host_wait, 4 * kWait);
  EXPECT_EQ(trainer.passes()[0].stall, absl::ZeroDuration());
  EXPECT_EQ(trainer.passes()[0].unmeasured_stalls, 0u);
}

TEST(StreamSchedulerStats, ASlowCopyIsAStallOfTheStreamThatWaitedForIt) {
  constexpr absl::Duration kIdle = absl::Milliseconds(7);
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2},
                  {.not_ready_stream_stall = kIdle});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.Forward().ok());  // cold: two self-heals wait on their own copies
  trainer.scheduler().FinishPass();
  ASSERT_EQ(trainer.passes().size(), 2u);
  EXPECT_EQ(trainer.passes()[0].stall, absl::ZeroDuration());  // every copy was done
  EXPECT_EQ(trainer.passes()[1].not_ready_waits, 2u);
  EXPECT_EQ(trainer.passes()[1].stall, 2 * kIdle);
  EXPECT_LT(trainer.passes()[1].host_wait, trainer.passes()[1].stall) << "the fake never blocks";
}

TEST(StreamSchedulerStats, AStreamBehindItsCallerReportsEachStallInItsOwnPass) {
  constexpr absl::Duration kIdle = absl::Milliseconds(3);
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2},
                  {.not_ready_stream_stall = kIdle, .stream_lags = true});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.Forward().ok());
  ASSERT_TRUE(trainer.Backward().ok());
  trainer.scheduler().FinishPass();
  EXPECT_TRUE(trainer.passes().empty()) << "no pass is complete before its stalls are measured";
  ASSERT_TRUE(trainer.scheduler().SettlePasses().ok());
  ASSERT_EQ(trainer.passes().size(), 3u);
  EXPECT_EQ(trainer.passes()[0].stall, absl::ZeroDuration());
  EXPECT_EQ(trainer.passes()[1].stall, 2 * kIdle);
  EXPECT_EQ(trainer.passes()[2].direction, Phase::kBackward);
  EXPECT_EQ(trainer.passes()[2].stall, trainer.passes()[2].not_ready_waits * kIdle);
  for (const PassStats& pass : trainer.passes()) EXPECT_EQ(pass.unmeasured_stalls, 0u);
}

TEST(StreamSchedulerStats, ADriverErrorStillCountsTheWait) {
  Trainer trainer({.num_blocks = 10, .blocks_to_swap = 4, .ring_size = 2});
  ASSERT_TRUE(trainer.scheduler().Prepare().ok());
  trainer.driver().FailCall(CallKind::kWait, 0, absl::UnavailableError("daemon went away"));
  EXPECT_FALSE(trainer.Forward().ok());
  EXPECT_EQ(trainer.scheduler().current_pass().waits, 1u);
}

}  // namespace
}  // namespace blockswap::client
