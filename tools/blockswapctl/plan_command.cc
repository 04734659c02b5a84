#include "tools/blockswapctl/plan_command.h"

#include <iostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/scheduler/recording_slot_driver.h"
#include "client/scheduler/stream_scheduler.h"

namespace blockswap::ctl {
namespace {

enum class PlanStep { kPrepare, kForward, kBackward, kTrain, kInfer };

absl::StatusOr<std::vector<PlanStep>> ParseScript(absl::string_view script) {
  std::vector<PlanStep> steps;
  for (absl::string_view word : absl::StrSplit(script, ',')) {
    if (word == "prepare") {
      steps.push_back(PlanStep::kPrepare);
    } else if (word == "fwd") {
      steps.push_back(PlanStep::kForward);
    } else if (word == "bwd") {
      steps.push_back(PlanStep::kBackward);
    } else if (word == "train") {
      steps.push_back(PlanStep::kTrain);
    } else if (word == "infer") {
      steps.push_back(PlanStep::kInfer);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown script step '", word, "' (prepare, fwd, bwd, train or infer)"));
    }
  }
  return steps;
}

// What one script step (a pass) or one training step did.
struct PlanCounts {
  uint64_t loads = 0;
  uint64_t rebinds = 0;
  uint64_t self_heals = 0;

  void Add(const PlanCounts& other) {
    loads += other.loads;
    rebinds += other.rebinds;
    self_heals += other.self_heals;
  }
};

std::string CountsText(const PlanOptions& options, const PlanCounts& counts) {
  std::string text = absl::StrCat("loads=", counts.loads, " rebinds=", counts.rebinds,
                                  " self-heals=", counts.self_heals);
  if (options.block_bytes > 0) {
    const double bytes = static_cast<double>(counts.loads) * options.block_bytes;
    absl::StrAppend(&text, " bytes=", counts.loads * options.block_bytes);
    if (options.bandwidth_gbps > 0) {
      absl::StrAppend(&text,
                      absl::StrFormat(" copy=%.3fms", bytes / (options.bandwidth_gbps * 1e6)));
    }
  }
  return text;
}

}  // namespace

int Plan(const Options& options, const PlanOptions& plan) {
  if (options.json) {
    std::cerr << "blockswapctl: plan: prints text only (drop --json)\n";
    return kExitUsage;
  }
  if (plan.bandwidth_gbps > 0 && plan.block_bytes == 0) {
    std::cerr << "blockswapctl: plan: --bandwidth needs --block-bytes\n";
    return kExitUsage;
  }
  absl::StatusOr<std::vector<PlanStep>> steps = ParseScript(plan.script);
  if (!steps.ok()) {
    std::cerr << "blockswapctl: plan: " << steps.status().message() << "\n";
    return kExitUsage;
  }
  // The ring is clamped to S, and the driver must serve every slot the
  // scheduler may use, so size it from the same placement.
  absl::StatusOr<client::Placement> placement =
      client::PlaceBlocks(plan.blocks, plan.swap, plan.ring);
  if (!placement.ok()) {
    std::cerr << "blockswapctl: plan: " << placement.status().message() << "\n";
    return kExitUsage;
  }

  PlanCounts pass;
  client::RecordingSlotDriver driver(placement->ring_slots);
  client::SchedulerCallbacks callbacks;
  callbacks.on_bind = [&](const client::SlotEvent& event) {
    if (plan.trace) std::cout << TraceLine(event) << "\n";
    if (event.action == client::SlotEvent::Action::kRebind) {
      ++pass.rebinds;
    } else {
      ++pass.loads;
      pass.self_heals += event.self_heal;
    }
  };
  // As in the reference, a script starts in training mode.
  absl::StatusOr<std::unique_ptr<client::StreamScheduler>> scheduler =
      client::StreamScheduler::Create(
          {.num_blocks = plan.blocks, .blocks_to_swap = plan.swap, .ring_size = plan.ring}, driver,
          std::move(callbacks));
  if (!scheduler.ok()) {
    std::cerr << "blockswapctl: plan: " << scheduler.status().message() << "\n";
    return kExitUsage;
  }
  client::StreamScheduler& s = **scheduler;
  std::cout << "placement streaming=[" << absl::StrJoin(placement->streaming, ",") << "] resident=["
            << absl::StrJoin(placement->resident, ",") << "] ring=" << placement->ring_slots
            << "\n";

  std::vector<PlanCounts> training_steps;
  bool step_has_forward = false;
  PlanCounts total;
  for (PlanStep step : *steps) {
    // A prepare or forward pass after a forward pass begins the next training step.
    if (training_steps.empty() ||
        ((step == PlanStep::kPrepare || step == PlanStep::kForward) && step_has_forward)) {
      training_steps.emplace_back();
      step_has_forward = false;
    }
    pass = {};
    absl::Status status;
    absl::string_view name;
    switch (step) {
      case PlanStep::kTrain:
      case PlanStep::kInfer:
        s.SetForwardOnly(step == PlanStep::kInfer);
        continue;
      case PlanStep::kPrepare:
        name = "prepare";
        status = s.Prepare();
        break;
      case PlanStep::kForward:
        name = "fwd";
        step_has_forward = true;
        for (uint32_t block = 0; block < plan.blocks && status.ok(); ++block) {
          status = s.WaitForBlock(block);
          if (status.ok()) status = s.AfterForward(block);
        }
        break;
      case PlanStep::kBackward:
        // Every block takes part, and each one's hook runs right after its
        // own backward.
        name = "bwd";
        for (uint32_t block = plan.blocks; block-- > 0 && status.ok();) {
          status = s.AfterBackward(block);
        }
        break;
    }
    if (!status.ok()) {
      std::cerr << "blockswapctl: plan: " << name << ": " << status.message() << "\n";
      return kExitFailure;
    }
    training_steps.back().Add(pass);
    total.Add(pass);
    if (!plan.trace) std::cout << name << " " << CountsText(plan, pass) << "\n";
  }
  if (plan.trace) return 0;
  for (size_t i = 0; i < training_steps.size(); ++i) {
    std::cout << "step " << i + 1 << " " << CountsText(plan, training_steps[i]) << "\n";
  }
  std::cout << "total " << CountsText(plan, total) << " steps=" << training_steps.size() << "\n";
  return 0;
}

}  // namespace blockswap::ctl
