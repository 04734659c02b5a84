// The C ABI of the StreamScheduler (blockswap.h, "stream scheduler"): the
// scheduler over a RingSlotDriver on the caller's ring, model and stream,
// reporting each finished pass to the daemon.
#include <cstddef>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "client/c_api/c_api_internal.h"
#include "client/core/session_recovery.h"
#include "client/scheduler/ring_slot_driver.h"
#include "client/scheduler/stream_scheduler.h"
#include "shared/base/status.h"

struct bs_scheduler {
  blockswap::client::OwnerProcess owner;  // as bs_client's (c_api_internal.h)
  blockswap::client::Connection* connection = nullptr;
  std::unique_ptr<blockswap::Stream> stream;  // the caller's, wrapped
  std::unique_ptr<blockswap::client::SessionRecovery> recovery;
  std::unique_ptr<blockswap::client::RingSlotDriver> driver;
  std::unique_ptr<blockswap::client::StreamScheduler> scheduler;
  std::map<int, blockswap::client::PassStats> last_pass;  // by bs_direction
  absl::Status report_error;                              // the last failure to report a pass
  bool daemon_lost = false;  // a report found the daemon gone (trainer copies: re-attached later)
  bs_reload_fn on_reload = nullptr;  // bs_scheduler_set_reload_hook
  void* reload_user_data = nullptr;
  void Forget() {
    blockswap::client::OwnerProcess::KeepInherited(scheduler.release());
    blockswap::client::OwnerProcess::KeepInherited(driver.release());
    blockswap::client::OwnerProcess::KeepInherited(recovery.release());
    blockswap::client::OwnerProcess::KeepInherited(stream.release());
  }
};

using blockswap::client::c_api::Destroy;
using blockswap::client::c_api::Guard;
using blockswap::client::c_api::Inherited;
using blockswap::client::c_api::InvalidArgument;
using blockswap::client::c_api::Report;
using blockswap::client::c_api::Unusable;

namespace {

int Direction(blockswap::client::Phase phase) {
  return phase == blockswap::client::Phase::kBackward ? BS_BACKWARD : BS_FORWARD;
}

// The last finished pass in `direction`, once the stream has passed its
// waits (StreamScheduler::SettlePasses: the stall is measured on the
// stream). A failed measurement still leaves the pass with what it counted.
absl::StatusOr<blockswap::client::PassStats> LastPass(const bs_scheduler& scheduler,
                                                      int direction) {
  (void)scheduler.scheduler->SettlePasses();
  auto it = scheduler.last_pass.find(direction);
  if (it == scheduler.last_pass.end()) {
    return absl::NotFoundError("no pass in that direction has finished yet");
  }
  return it->second;
}

template <typename Scheduler, typename Body>
int OnScheduler(Scheduler* scheduler, const char* what, Body&& body) {
  return blockswap::client::c_api::OnHandle(scheduler, what, "scheduler", std::forward<Body>(body));
}

}  // namespace

extern "C" {

int bs_place_blocks(uint32_t num_blocks, uint32_t blocks_to_swap, uint32_t ring_size,
                    uint32_t* streaming, uint32_t capacity, uint32_t* count, uint32_t* ring_slots) {
  if (streaming == nullptr && capacity != 0) {
    return InvalidArgument("bs_place_blocks: streaming is NULL but capacity is not 0");
  }
  return Guard([&]() -> absl::Status {
    auto placement = blockswap::client::PlaceBlocks(num_blocks, blocks_to_swap, ring_size);
    if (!placement.ok()) return placement.status();
    const auto& blocks = placement->streaming;
    if (streaming != nullptr && blocks.size() > capacity) {
      return absl::InvalidArgumentError(
          absl::StrCat(blocks.size(), " blocks stream but `streaming` has room for ", capacity));
    }
    for (size_t r = 0; streaming != nullptr && r < blocks.size(); ++r) streaming[r] = blocks[r];
    if (count != nullptr) *count = static_cast<uint32_t>(blocks.size());
    if (ring_slots != nullptr) *ring_slots = placement->ring_slots;
    return absl::OkStatus();
  });
}

int bs_scheduler_create(bs_client* client, bs_ring* ring, const bs_model* model,
                        const bs_scheduler_config* config, void* stream, bs_bind_fn on_bind,
                        void* user_data, bs_scheduler** out) {
  if (client == nullptr || ring == nullptr || model == nullptr || config == nullptr ||
      out == nullptr) {
    return InvalidArgument("bs_scheduler_create: client, ring, model, config and out are needed");
  }
  *out = nullptr;
  if (int code = Inherited(client, "bs_scheduler_create")) return code;
  return Guard([&]() -> absl::Status {
    using namespace blockswap::client;
    auto placement = PlaceBlocks(config->num_blocks, config->blocks_to_swap, config->ring_size);
    if (!placement.ok()) return placement.status();
    const bool every_block = config->model_has_every_block != 0;
    if (every_block && model->model->block_count() < config->num_blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model has ", model->model->block_count(), " blocks, fewer than the ",
                       config->num_blocks,
                       " transformer blocks (model_has_every_block: block b of the "
                       "model is transformer block b)"));
    }
    if (!every_block && placement->streaming.size() > model->model->block_count()) {
      return absl::InvalidArgumentError(absl::StrCat(
          placement->streaming.size(), " blocks stream but the model has only ",
          model->model->block_count(), " (block r of the model is the r-th streaming block)"));
    }
    if (placement->ring_slots > ring->ring->shape().slot_count) {
      return absl::InvalidArgumentError(absl::StrCat("the scheduler needs ", placement->ring_slots,
                                                     " slots, the ring has ",
                                                     ring->ring->shape().slot_count));
    }
    auto scheduler = std::make_unique<bs_scheduler>();
    scheduler->connection = client->connection.get();
    auto wrapped = ring->ring->device().WrapStream(stream);
    if (!wrapped.ok()) return wrapped.status();
    scheduler->stream = *std::move(wrapped);
    scheduler->recovery =
        std::make_unique<SessionRecovery>(*client->connection, *model->model, *ring->ring);
    RingSlotDriver::Options driver_options{.recovery = scheduler->recovery.get()};
    if (on_bind != nullptr) {
      // A reloaded block sits at the re-created ring's new address.
      driver_options.on_reload = [on_bind, user_data](uint32_t block, uint32_t slot) {
        on_bind(user_data, block, slot, 1);
      };
    }
    scheduler->driver = std::make_unique<RingSlotDriver>(
        *ring->ring, *model->model, *scheduler->stream,
        every_block ? MapIdentity() : MapByStreamingRank(*placement), std::move(driver_options));
    SchedulerCallbacks callbacks;
    if (on_bind != nullptr) {
      callbacks.on_bind = [on_bind, user_data](const SlotEvent& event) {
        on_bind(user_data, event.block, event.slot, event.action == SlotEvent::Action::kLoad);
      };
    }
    bs_scheduler* raw = scheduler.get();
    callbacks.on_pass = [raw,
                         trainer_copies = ring->ring->copy_path() ==
                                          blockswap::CopyPath::kTrainer](const PassStats& pass) {
      raw->last_pass[Direction(pass.direction)] = pass;
      // A ring the trainer fills needs its daemon for nothing in a pass:
      // a lost daemon is waited for off this thread, and the session comes
      // back at the first pass boundary after it answers again.
      if (trainer_copies && raw->daemon_lost) {
        if (!raw->recovery->RecoverInBackground(raw->report_error).ok()) return;
        raw->daemon_lost = false;
      }
      // Statistics are best effort: a failed report never fails training.
      raw->report_error = raw->connection->ReportStats({PassStatsToProto(pass)});
      if (trainer_copies && blockswap::client::SessionRecovery::IsDaemonLost(raw->report_error)) {
        raw->daemon_lost = true;
        (void)raw->recovery->RecoverInBackground(raw->report_error);
      }
    };
    callbacks.on_before_reload = [raw](uint32_t slot) {
      if (raw->on_reload != nullptr) raw->on_reload(raw->reload_user_data, slot);
    };
    auto created =
        StreamScheduler::Create(SchedulerConfig{config->num_blocks, config->blocks_to_swap,
                                                config->ring_size, config->forward_only != 0},
                                *scheduler->driver, std::move(callbacks));
    if (!created.ok()) return created.status();
    scheduler->scheduler = *std::move(created);
    *out = scheduler.release();
    return absl::OkStatus();
  });
}

void bs_scheduler_destroy(bs_scheduler* scheduler) { Destroy(scheduler); }

uint32_t bs_scheduler_ring_slots(const bs_scheduler* scheduler) {
  return Unusable(scheduler, "bs_scheduler_ring_slots")
             ? 0
             : scheduler->scheduler->placement().ring_slots;
}

uint32_t bs_scheduler_streaming_count(const bs_scheduler* scheduler) {
  return Unusable(scheduler, "bs_scheduler_streaming_count")
             ? 0
             : static_cast<uint32_t>(scheduler->scheduler->placement().streaming.size());
}

uint32_t bs_scheduler_streaming_block(const bs_scheduler* scheduler, uint32_t rank) {
  if (Unusable(scheduler, "bs_scheduler_streaming_block")) return UINT32_MAX;
  const auto& streaming = scheduler->scheduler->placement().streaming;
  return rank < streaming.size() ? streaming[rank] : UINT32_MAX;
}

int bs_scheduler_is_streaming(const bs_scheduler* scheduler, uint32_t block) {
  return !Unusable(scheduler, "bs_scheduler_is_streaming") &&
         scheduler->scheduler->placement().is_streaming(block);
}

int bs_scheduler_prepare(bs_scheduler* scheduler) {
  return OnScheduler(scheduler, "bs_scheduler_prepare",
                     [&](bs_scheduler& s) { return s.scheduler->Prepare(); });
}

int bs_scheduler_wait_for_block(bs_scheduler* scheduler, uint32_t block) {
  return OnScheduler(scheduler, "bs_scheduler_wait_for_block",
                     [&](bs_scheduler& s) { return s.scheduler->WaitForBlock(block); });
}

int bs_scheduler_after_forward(bs_scheduler* scheduler, uint32_t block) {
  return OnScheduler(scheduler, "bs_scheduler_after_forward",
                     [&](bs_scheduler& s) { return s.scheduler->AfterForward(block); });
}

int bs_scheduler_after_backward(bs_scheduler* scheduler, uint32_t block) {
  return OnScheduler(scheduler, "bs_scheduler_after_backward",
                     [&](bs_scheduler& s) { return s.scheduler->AfterBackward(block); });
}

int bs_scheduler_ensure_block(bs_scheduler* scheduler, uint32_t block) {
  return OnScheduler(scheduler, "bs_scheduler_ensure_block",
                     [&](bs_scheduler& s) { return s.scheduler->EnsureBlock(block); });
}

int bs_scheduler_set_forward_only(bs_scheduler* scheduler, int forward_only) {
  return OnScheduler(scheduler, "bs_scheduler_set_forward_only", [&](bs_scheduler& s) {
    s.scheduler->SetForwardOnly(forward_only != 0);
    return absl::OkStatus();
  });
}

int bs_scheduler_set_reload_hook(bs_scheduler* scheduler, bs_reload_fn fn, void* user_data) {
  return OnScheduler(scheduler, "bs_scheduler_set_reload_hook", [&](bs_scheduler& s) {
    s.on_reload = fn;
    s.reload_user_data = user_data;
    return absl::OkStatus();
  });
}

int bs_scheduler_set_reconnect_timeout(bs_scheduler* scheduler, uint32_t timeout_ms) {
  return OnScheduler(scheduler, "bs_scheduler_set_reconnect_timeout", [&](bs_scheduler& s) {
    s.recovery->set_timeout(absl::Milliseconds(timeout_ms));
    return absl::OkStatus();
  });
}

int bs_scheduler_finish_pass(bs_scheduler* scheduler) {
  return OnScheduler(scheduler, "bs_scheduler_finish_pass", [](bs_scheduler& s) {
    s.scheduler->FinishPass();
    return absl::OkStatus();
  });
}

int bs_scheduler_last_pass(const bs_scheduler* scheduler, int direction, bs_pass_stats* out) {
  return OnScheduler(
      scheduler, "bs_scheduler_last_pass", [&](const bs_scheduler& s) -> absl::Status {
        if (out == nullptr)
          return absl::InvalidArgumentError("bs_scheduler_last_pass: out is NULL");
        BLOCKSWAP_ASSIGN_OR_RETURN(blockswap::client::PassStats pass, LastPass(s, direction));
        *out = bs_pass_stats{direction,
                             absl::ToDoubleSeconds(pass.stall),
                             absl::ToDoubleSeconds(pass.host_wait),
                             absl::ToDoubleSeconds(pass.copy_time),
                             pass.waits,
                             pass.not_ready_waits,
                             pass.self_heals,
                             pass.loads,
                             pass.rebinds};
        return absl::OkStatus();
      });
}

}  // extern "C"
