// blockswap-demo: a trainer stand-in without torch. It registers a
// deterministic synthetic model, streams it through a ring with the
// StreamScheduler for a number of training steps (prepare, forward over every
// block, backward in reverse), runs a busy "compute" per block on its stream,
// and checks every streamed block byte for byte, on the stream, before and
// after each compute that uses it.
// Several demos started with the same --blocks/--swap/--block-bytes/--seed
// register the same bytes, so they share one model in the daemon.
//
//   blockswap-demo [--socket PATH] [--blocks N] [--swap S] [--ring B]
//                  [--block-bytes BYTES] [--seed K] [--steps T] [--compute-us US]
//
// Exit: 0 when every check passed, 1 on a mismatch or any error, 2 on a
// usage error.
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "client/model.h"
#include "client/ring.h"
#include "client/ring_slot_driver.h"
#include "client/stream_scheduler.h"

namespace blockswap::demo {
namespace {

using client::PassStats;
using client::Phase;

struct Flags {
  std::string socket_path;
  std::string name = "blockswap-demo";
  uint32_t blocks = 8;
  uint32_t swap = 4;
  uint32_t ring = 2;
  uint64_t block_bytes = 1 << 20;
  uint64_t seed = 1;
  uint32_t steps = 3;
  uint32_t compute_us = 200;
  uint32_t device = 0;
  double timeout_seconds = 30;
};

// The F32 weight of transformer block `block`: a function of the seed and
// the block index only, so that every demo with the same flags uploads the
// same bytes (one model), and a block loaded into the wrong slot or from the
// wrong model block fails the comparison.
std::vector<std::byte> BlockWeights(uint64_t seed, uint32_t block, uint64_t bytes) {
  std::vector<std::byte> data(bytes);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t{block} + 1) * 0xbf58476d1ce4e5b9ull;
  for (std::byte& byte : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    byte = static_cast<std::byte>(x >> 24);
  }
  return data;
}

// A kernel stand-in: holds the stream (not the caller) for `duration`.
void Spin(absl::Duration duration) {
  const auto end = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(duration);
  while (std::chrono::steady_clock::now() < end) {
  }
}

long PeakRssKiB() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // KiB on Linux
}

class Demo {
 public:
  explicit Demo(Flags flags) : flags_(std::move(flags)) {}

  absl::Status Run() {
    absl::StatusOr<client::Placement> placement =
        client::PlaceBlocks(flags_.blocks, flags_.swap, flags_.ring);
    if (!placement.ok()) return placement.status();
    placement_ = *std::move(placement);
    if (placement_.streaming.empty()) {
      return absl::InvalidArgumentError("--swap 0 streams nothing: there is nothing to show");
    }
    absl::StatusOr<std::unique_ptr<client::Connection>> connection =
        client::Connection::Connect(flags_.socket_path, flags_.name);
    if (!connection.ok()) return connection.status();
    connection_ = *std::move(connection);
    if (absl::Status s = RegisterModel(); !s.ok()) return s;
    if (absl::Status s = CreateRing(); !s.ok()) return s;

    client::RingSlotDriver driver(*ring_, *model_, *stream_,
                                  client::MapByStreamingRank(placement_),
                                  {.timeout = absl::Seconds(flags_.timeout_seconds)});
    client::SchedulerCallbacks callbacks;
    callbacks.on_pass = [this](const PassStats& pass) { step_passes_.push_back(pass); };
    absl::StatusOr<std::unique_ptr<client::StreamScheduler>> scheduler =
        client::StreamScheduler::Create({.num_blocks = flags_.blocks,
                                         .blocks_to_swap = flags_.swap,
                                         .ring_size = flags_.ring},
                                        driver, std::move(callbacks));
    if (!scheduler.ok()) return scheduler.status();

    std::cout << absl::StrFormat(
        "demo %d: model %s, %u blocks, streaming %u of %u bytes through %u slots, %u steps\n",
        ::getpid(), model_->id(), flags_.blocks, static_cast<uint32_t>(placement_.streaming.size()),
        flags_.block_bytes, placement_.ring_slots, flags_.steps);
    uint64_t total_loads = 0;
    for (uint32_t step = 1; step <= flags_.steps; ++step) {
      absl::StatusOr<uint64_t> loads = RunStep(step, **scheduler, driver);
      if (!loads.ok()) return loads.status();
      total_loads += *loads;
    }
    if (absl::Status s = ring_->Drain(absl::Seconds(flags_.timeout_seconds)); !s.ok()) return s;
    if (absl::Status s = stream_->Synchronize(); !s.ok()) return s;
    if (mismatches_.load() > 0) {
      return absl::DataLossError(absl::StrCat(mismatches_.load(), " of ", verified_.load(),
                                              " checked blocks had wrong bytes; first: ",
                                              FirstMismatch()));
    }
    std::cout << absl::StrFormat(
        "demo ok: model %s steps %u loads %u checks %u mismatches 0 peak-rss %d KiB\n",
        model_->id(), flags_.steps, total_loads, verified_.load(), PeakRssKiB());
    return absl::OkStatus();
  }

 private:
  absl::Status RegisterModel() {
    // Only the streaming blocks, in rank order: resident blocks never need a
    // master (the driver maps block -> rank).
    const uint64_t elements = flags_.block_bytes / 4;
    if (elements == 0) return absl::InvalidArgumentError("--block-bytes must be at least 4");
    expected_.clear();
    for (uint32_t block : placement_.streaming) {
      expected_.push_back(BlockWeights(flags_.seed, block, elements * 4));
    }
    std::vector<std::vector<client::TensorUpload>> uploads;
    for (const std::vector<std::byte>& weights : expected_) {
      client::TensorUpload upload;
      upload.spec.name = "proj.weight";
      upload.spec.dtype = "F32";
      upload.spec.shape = {elements};
      upload.data = weights.data();
      uploads.push_back({std::move(upload)});
    }
    absl::StatusOr<std::unique_ptr<client::Model>> model = client::Model::Register(
        *connection_,
        absl::StrCat("blockswap-demo-", flags_.blocks, "x", flags_.block_bytes, "-swap",
                     flags_.swap, "-seed", flags_.seed),
        uploads);
    if (!model.ok()) return model.status();
    model_ = *std::move(model);
    // What a slot must hold: the tensor at its layout offset, zeros up to
    // the block's flat size (the layout's alignment padding).
    for (uint32_t rank = 0; rank < expected_.size(); ++rank) {
      const BlockSpec& spec = model_->layout().blocks[rank];
      std::vector<std::byte> flat(spec.bytes);
      std::memcpy(flat.data() + spec.tensors[0].offset, expected_[rank].data(),
                  spec.tensors[0].length);
      expected_[rank] = std::move(flat);
    }
    return absl::OkStatus();
  }

  absl::Status CreateRing() {
    uint64_t slot_bytes = 0;
    for (const BlockSpec& block : model_->layout().blocks) {
      slot_bytes = std::max(slot_bytes, block.bytes);
    }
    const std::vector<std::string>& devices = connection_->device_uuids();
    if (devices.empty()) return absl::FailedPreconditionError("blockswapd has no devices");
    absl::StatusOr<std::unique_ptr<client::Ring>> ring = client::Ring::Create(
        *connection_, devices[flags_.device % devices.size()], placement_.ring_slots, slot_bytes);
    if (!ring.ok()) return ring.status();
    ring_ = *std::move(ring);
    absl::StatusOr<std::unique_ptr<Stream>> stream = ring_->device().CreateStream();
    if (!stream.ok()) return stream.status();
    stream_ = *std::move(stream);
    readback_.assign(placement_.ring_slots, std::vector<std::byte>(slot_bytes));
    return absl::OkStatus();
  }

  // Queues, on the stream, a copy of the block's slot back to the host and a
  // comparison with its expected bytes: the check sees exactly what a kernel
  // at this point of the stream would read.
  absl::Status Verify(uint32_t block) {
    if (!placement_.is_streaming(block)) return absl::OkStatus();  // resident: never copied
    const uint32_t rank = placement_.rank_of_block[block];
    const uint32_t slot = rank % placement_.ring_slots;
    const std::vector<std::byte>& want = expected_[rank];
    // One readback buffer per slot is enough: the stream runs the previous
    // comparison before the next copy into it.
    std::byte* copy = readback_[slot].data();
    if (absl::Status s = stream_->CopyDeviceToHost(copy, ring_->slot(slot), want.size()); !s.ok()) {
      return s;
    }
    return stream_->LaunchHostFunc([this, copy, &want, block, slot] {
      verified_.fetch_add(1);
      if (std::memcmp(copy, want.data(), want.size()) != 0 && mismatches_.fetch_add(1) == 0) {
        first_mismatch_block_ = block;
        first_mismatch_slot_ = slot;
      }
    });
  }

  absl::Status Compute() {
    if (flags_.compute_us == 0) return absl::OkStatus();
    const absl::Duration duration = absl::Microseconds(flags_.compute_us);
    return stream_->LaunchHostFunc([duration] { Spin(duration); });
  }

  // Checks the slot both when the compute starts reading it and when it is
  // done: a load that lands too late fails the first, a load into the slot
  // that starts before the compute is done (a `free` recorded too early)
  // fails the second.
  absl::Status UseBlock(uint32_t block) {
    if (absl::Status s = Verify(block); !s.ok()) return s;
    if (absl::Status s = Compute(); !s.ok()) return s;
    return Verify(block);
  }

  // One training step; returns its loads.
  absl::StatusOr<uint64_t> RunStep(uint32_t step, client::StreamScheduler& scheduler,
                                   client::RingSlotDriver& driver) {
    const absl::Time start = absl::Now();
    step_passes_.clear();
    if (absl::Status s = scheduler.Prepare(); !s.ok()) return s;
    for (uint32_t block = 0; block < flags_.blocks; ++block) {
      if (absl::Status s = scheduler.WaitForBlock(block); !s.ok()) return s;
      if (absl::Status s = UseBlock(block); !s.ok()) return s;
      if (absl::Status s = scheduler.AfterForward(block); !s.ok()) return s;
    }
    for (uint32_t block = flags_.blocks; block-- > 0;) {
      if (absl::Status s = UseBlock(block); !s.ok()) return s;
      if (absl::Status s = scheduler.AfterBackward(block); !s.ok()) return s;
    }
    scheduler.FinishPass();
    // The optimizer step of a real trainer: the step's compute is complete.
    if (absl::Status s = stream_->Synchronize(); !s.ok()) return s;
    const absl::Duration wall = absl::Now() - start;

    std::vector<v1::PassStats> report;
    PassStats fwd{.direction = Phase::kForward}, bwd{.direction = Phase::kBackward};
    for (const PassStats& pass : step_passes_) {
      report.push_back(client::PassStatsToProto(pass));
      PassStats& sum = pass.direction == Phase::kBackward ? bwd : fwd;
      sum.stall += pass.stall;
      sum.copy_time += pass.copy_time;
      sum.waits += pass.waits;
      sum.not_ready_waits += pass.not_ready_waits;
      sum.self_heals += pass.self_heals;
      sum.loads += pass.loads;
      sum.rebinds += pass.rebinds;
    }
    if (absl::Status s = connection_->ReportStats(report); !s.ok()) return s;
    auto ms = [](absl::Duration d) { return absl::ToDoubleMilliseconds(d); };
    std::cout << absl::StrFormat(
        "step %u/%u: stall %.3f ms (fwd %.3f bwd %.3f) copy %.3f ms loads %u (fwd %u bwd %u) "
        "rebinds %u waits %u not-ready %u self-heals %u checks %u mismatches %u wall %.1f ms "
        "peak-rss %d KiB\n",
        step, flags_.steps, ms(fwd.stall + bwd.stall), ms(fwd.stall), ms(bwd.stall),
        ms(fwd.copy_time + bwd.copy_time), fwd.loads + bwd.loads, fwd.loads, bwd.loads,
        fwd.rebinds + bwd.rebinds, fwd.waits + bwd.waits, fwd.not_ready_waits + bwd.not_ready_waits,
        fwd.self_heals + bwd.self_heals, verified_.load(), mismatches_.load(), ms(wall),
        PeakRssKiB());
    std::cout.flush();
    return fwd.loads + bwd.loads;
  }

  std::string FirstMismatch() const {
    return absl::StrCat("block ", first_mismatch_block_.load(), " in slot ",
                        first_mismatch_slot_.load());
  }

  const Flags flags_;
  client::Placement placement_;
  std::unique_ptr<client::Connection> connection_;
  std::unique_ptr<client::Model> model_;
  // Declared after the connection and model, so destroyed before them: the
  // ring drains and is freed while the session is still attached.
  std::unique_ptr<client::Ring> ring_;
  std::vector<std::vector<std::byte>> expected_;  // per rank: the slot's bytes
  std::vector<std::vector<std::byte>> readback_;  // per slot
  std::vector<PassStats> step_passes_;
  std::atomic<uint64_t> verified_{0};
  std::atomic<uint64_t> mismatches_{0};
  std::atomic<uint32_t> first_mismatch_block_{0};
  std::atomic<uint32_t> first_mismatch_slot_{0};
  // Last, so destroyed first: work still queued on it (after an error) reads
  // the buffers above.
  std::unique_ptr<Stream> stream_;
};

}  // namespace
}  // namespace blockswap::demo

int main(int argc, char** argv) {
  blockswap::demo::Flags flags;
  CLI::App app{"blockswap-demo: streams a synthetic model through blockswapd like a trainer"};
  // A flag given twice takes its last value, so that wrappers (quickstart)
  // can pass defaults and let the user's arguments override them.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--socket", flags.socket_path, "blockswapd's control socket");
  app.add_option("--name", flags.name, "client name shown by blockswapctl")->capture_default_str();
  app.add_option("--blocks", flags.blocks, "transformer blocks (N)")
      ->capture_default_str()
      ->check(CLI::Range(1u, blockswap::client::kMaxSchedulerBlocks));
  app.add_option("--swap", flags.swap, "blocks to stream (S)")->capture_default_str();
  app.add_option("--ring", flags.ring, "ring slots (B), clamped to S")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--block-bytes", flags.block_bytes, "bytes of one block (rounded down to 4)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{4}, uint64_t{1} << 32));
  app.add_option("--seed", flags.seed, "content seed")->capture_default_str();
  app.add_option("--steps", flags.steps, "training steps")->capture_default_str();
  app.add_option("--compute-us", flags.compute_us, "busy compute per block and direction (us)")
      ->capture_default_str();
  app.add_option("--device", flags.device, "index of the daemon's device")->capture_default_str();
  app.add_option("--timeout", flags.timeout_seconds, "seconds a wait may block")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
  blockswap::demo::Demo demo(flags);
  if (absl::Status status = demo.Run(); !status.ok()) {
    std::cerr << "blockswap-demo: " << status << "\n";
    return 1;
  }
  return 0;
}
