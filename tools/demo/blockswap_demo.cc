// blockswap-demo: a trainer stand-in without torch, and a client of the
// public C ABI only (libblockswap.so, bs_scheduler_*), like every real
// trainer. It registers a deterministic synthetic model, streams it through
// a ring with the library's scheduler for a number of training steps
// (prepare, forward over every block, backward in reverse), runs a busy
// "compute" per block on its stream, and checks every streamed block byte
// for byte, on the stream, before and after each compute that uses it.
// Several demos started with the same --blocks/--swap/--block-bytes/--seed
// register the same bytes, so they share one model in the daemon. A daemon
// killed and restarted under it is ridden out by the scheduler's
// reconnection (--reconnect-timeout).
//
//   blockswap-demo [--socket PATH] [--blocks N] [--swap S] [--ring B]
//                  [--block-bytes BYTES] [--seed K] [--steps T] [--compute-us US]
//                  [--reconnect-timeout SECONDS]
//
// Exit: 0 when every check passed, 1 on a mismatch or any error, 2 on a
// usage error.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "blockswap/blockswap.h"
#include "blockswap/blockswap.hpp"
#include "shared/build_info/build_info.h"
#include "tools/demo/demo_stream.h"

namespace blockswap::demo {
namespace {

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
  double reconnect_timeout_seconds = 30;
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

// DATA_LOSS reports (a daemon lost mid-copy) after which the void passes are
// run again, before the demo gives up: each needs the daemon lost once more.
constexpr uint32_t kMaxVoids = 3;

long PeakRssKiB() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // KiB on Linux
}

// The placement the scheduler will use (bs_place_blocks), before it exists:
// which blocks to register.
struct Placement {
  std::vector<uint32_t> streaming;  // ascending; rank r is streaming[r]
  uint32_t ring_slots = 0;
};

Placement Place(const Flags& flags) {
  Placement placement;
  uint32_t count = 0;
  detail::Check(bs_place_blocks(flags.blocks, flags.swap, flags.ring, nullptr, 0, &count, nullptr),
                "bs_place_blocks");
  placement.streaming.resize(count);
  detail::Check(bs_place_blocks(flags.blocks, flags.swap, flags.ring, placement.streaming.data(),
                                count, &count, &placement.ring_slots),
                "bs_place_blocks");
  return placement;
}

class Demo {
 public:
  explicit Demo(Flags flags) : flags_(std::move(flags)) {}

  // Throws blockswap::Error; returns the exit code.
  int Run() {
    placement_ = Place(flags_);
    if (placement_.streaming.empty()) {
      throw Error(BS_INVALID_ARGUMENT, "--swap 0 streams nothing: there is nothing to show");
    }
    Client client(flags_.socket_path, flags_.name);
    Model model = RegisterModel(client);
    const std::vector<std::string> devices = client.devices();
    if (devices.empty()) throw Error(BS_FAILED_PRECONDITION, "blockswapd has no devices");
    uint64_t slot_bytes = 0;
    for (uint32_t rank = 0; rank < model.block_count(); ++rank) {
      slot_bytes = std::max(slot_bytes, model.block_bytes(rank));
    }
    const std::string& device = devices[flags_.device % devices.size()];
    Ring ring = client.CreateRing(device, placement_.ring_slots, slot_bytes);
    std::unique_ptr<DemoStream> stream = DemoStream::Open(client.backend(), device);
    int code = Stream(client, model, ring, *stream, slot_bytes);
    // The ring is closed after the stream's last use of its slots, and freed
    // while the session is still attached.
    ring.Close(stream->native(),
               std::chrono::milliseconds(static_cast<int64_t>(flags_.timeout_seconds * 1000)));
    stream->Synchronize();
    return code;
  }

 private:
  Model RegisterModel(Client& client) {
    // Only the streaming blocks, in rank order: resident blocks never need a
    // master (the scheduler maps rank -> block).
    const uint64_t elements = flags_.block_bytes / 4;
    std::vector<std::vector<std::byte>> weights;
    for (uint32_t block : placement_.streaming) {
      weights.push_back(BlockWeights(flags_.seed, block, elements * 4));
    }
    std::vector<Block> blocks;
    for (const std::vector<std::byte>& w : weights) {
      blocks.push_back({Tensor{"proj.weight", "F32", {elements}, w.data()}});
    }
    char name[128];
    std::snprintf(name, sizeof(name), "blockswap-demo-%ux%llu-swap%u-seed%llu", flags_.blocks,
                  static_cast<unsigned long long>(flags_.block_bytes), flags_.swap,
                  static_cast<unsigned long long>(flags_.seed));
    Model model = client.Register(name, blocks);
    // What a slot must hold: the tensor at its layout offset, zeros up to
    // the block's flat size (the layout's alignment padding).
    for (uint32_t rank = 0; rank < weights.size(); ++rank) {
      const bs_tensor_info tensor = model.tensor(rank, 0);
      std::vector<std::byte> flat(model.block_bytes(rank));
      std::memcpy(flat.data() + tensor.offset, weights[rank].data(), tensor.length);
      expected_.push_back(std::move(flat));
    }
    return model;
  }

  struct Bindings {
    std::map<uint32_t, uint32_t> slot_of_block;
  };

  int Stream(Client& client, Model& model, Ring& ring, DemoStream& stream, uint64_t slot_bytes) {
    bs_scheduler_config config{flags_.blocks, flags_.swap, flags_.ring, 0, 0};
    bs_bind_fn on_bind = [](void* user, uint32_t block, uint32_t slot, int) {
      auto* bindings = static_cast<Bindings*>(user);
      for (auto it = bindings->slot_of_block.begin(); it != bindings->slot_of_block.end();) {
        it = it->second == slot ? bindings->slot_of_block.erase(it) : std::next(it);
      }
      bindings->slot_of_block[block] = slot;
    };
    Bindings bindings;
    bs_scheduler* raw = nullptr;
    detail::Check(bs_scheduler_create(client.get(), ring.get(), model.get(), &config,
                                      stream.native(), on_bind, &bindings, &raw),
                  "bs_scheduler_create");
    std::unique_ptr<bs_scheduler, void (*)(bs_scheduler*)> scheduler(raw, bs_scheduler_destroy);
    detail::Check(bs_scheduler_set_reconnect_timeout(
                      raw, static_cast<uint32_t>(flags_.reconnect_timeout_seconds * 1000)),
                  "bs_scheduler_set_reconnect_timeout");
    stream.PrepareChecks(placement_.ring_slots, slot_bytes);

    // Checks the block's slot both when the compute starts reading it and
    // when it is done: a load that lands too late fails the first, a load
    // into the slot that starts before the compute is done (a `free`
    // recorded too early) fails the second.
    auto use_block = [&](uint32_t block) {
      const int rank = RankOf(block);
      if (rank >= 0) {
        auto bound = bindings.slot_of_block.find(block);
        if (bound == bindings.slot_of_block.end()) {
          throw Error(BS_INTERNAL, "block " + std::to_string(block) + " is bound to no slot");
        }
        // The slot's address changes when the scheduler re-created the ring
        // after a daemon restart: ask for it each time.
        stream.Check(ring.slot(bound->second), bound->second, expected_[rank], block);
      }
      stream.Compute(flags_.compute_us);
      if (rank >= 0) {
        const uint32_t slot = bindings.slot_of_block.at(block);
        stream.Check(ring.slot(slot), slot, expected_[rank], block);
      }
    };

    std::printf(
        "demo %d: model %s, %u blocks, streaming %zu of %llu bytes through %u slots, "
        "%u steps\n",
        ::getpid(), model.id(), flags_.blocks, placement_.streaming.size(),
        static_cast<unsigned long long>(flags_.block_bytes), placement_.ring_slots, flags_.steps);
    uint64_t total_loads = 0;
    // Where a pass began, to forget it when it is void (below).
    struct PassStart {
      DemoStream::Tally checks;
      uint64_t loads = 0;
    };
    PassStart previous, current;
    bool previous_counted = false;  // the pass before this one was run to its end
    uint32_t voids = 0;
    for (uint32_t step = 1; step <= flags_.steps;) {
      current = {stream.tally(), total_loads};
      try {
        const auto start = std::chrono::steady_clock::now();
        detail::Check(bs_scheduler_prepare(raw), "prepare");
        for (uint32_t block = 0; block < flags_.blocks; ++block) {
          detail::Check(bs_scheduler_wait_for_block(raw, block), "wait_for_block");
          use_block(block);
          detail::Check(bs_scheduler_after_forward(raw, block), "after_forward");
        }
        for (uint32_t block = flags_.blocks; block-- > 0;) {
          use_block(block);
          detail::Check(bs_scheduler_after_backward(raw, block), "after_backward");
        }
        detail::Check(bs_scheduler_finish_pass(raw), "finish_pass");
        // The optimizer step of a real trainer: the step's compute is complete.
        stream.Synchronize();
        const double wall_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        bs_pass_stats fwd{}, bwd{};
        detail::Check(bs_scheduler_last_pass(raw, BS_FORWARD, &fwd), "last_pass forward");
        detail::Check(bs_scheduler_last_pass(raw, BS_BACKWARD, &bwd), "last_pass backward");
        if (step == 1) {
          std::printf(
              "stall: time the compute stream sat idle waiting for a copy (time lost); host-wait: "
              "time this thread blocked in the waits (mostly its own compute draining)\n");
        }
        total_loads += fwd.loads + bwd.loads;
        std::printf(
            "step %u/%u: stall %.3f ms (fwd %.3f bwd %.3f) host-wait %.3f ms (fwd %.3f bwd %.3f) "
            "copy %.3f ms loads %llu (fwd %llu bwd "
            "%llu) rebinds %llu waits %llu not-ready %llu self-heals %llu checks %llu mismatches "
            "%llu wall %.1f ms peak-rss %ld KiB\n",
            step, flags_.steps, 1e3 * (fwd.stall_seconds + bwd.stall_seconds),
            1e3 * fwd.stall_seconds, 1e3 * bwd.stall_seconds,
            1e3 * (fwd.host_wait_seconds + bwd.host_wait_seconds), 1e3 * fwd.host_wait_seconds,
            1e3 * bwd.host_wait_seconds, 1e3 * (fwd.copy_seconds + bwd.copy_seconds),
            Ull(fwd.loads + bwd.loads), Ull(fwd.loads), Ull(bwd.loads),
            Ull(fwd.rebinds + bwd.rebinds), Ull(fwd.waits + bwd.waits),
            Ull(fwd.not_ready_waits + bwd.not_ready_waits), Ull(fwd.self_heals + bwd.self_heals),
            Ull(stream.checks()), Ull(stream.mismatches()), wall_ms, PeakRssKiB());
        std::fflush(stdout);
      } catch (const Error& error) {
        // DATA_LOSS: the daemon was lost while the stream waited for a copy
        // it never finished, and work queued behind that wait read the slot;
        // the session is back. The first call to reach the ring after the
        // loss says it: in this pass, or in the one before when the daemon
        // was lost after that pass's last wait. A trainer would skip those
        // optimizer steps; the demo forgets both passes' checks and runs them
        // again.
        if (error.code() != BS_DATA_LOSS || ++voids > kMaxVoids) throw;
        stream.Synchronize();
        const PassStart& restart = previous_counted ? previous : current;
        stream.ForgetChecksSince(restart.checks);
        total_loads = restart.loads;
        const uint32_t first_void = previous_counted ? step - 1 : step;
        previous_counted = false;
        std::printf("steps %u-%u/%u void, run again: %s\n", first_void, step, flags_.steps,
                    error.what());
        std::fflush(stdout);
        step = first_void;
        continue;
      }
      previous = current;
      previous_counted = true;
      ++step;
    }
    scheduler.reset();
    stream.Synchronize();
    if (stream.mismatches() > 0) {
      std::fprintf(stderr,
                   "blockswap-demo: %llu of %llu checked blocks had wrong bytes; first: %s\n",
                   Ull(stream.mismatches()), Ull(stream.checks()), stream.FirstMismatch().c_str());
      return 1;
    }
    std::printf(
        "demo ok: model %s steps %u loads %llu checks %llu mismatches 0 voids %u peak-rss "
        "%ld KiB\n",
        model.id(), flags_.steps, Ull(total_loads), Ull(stream.checks()), voids,
        PeakRssKiB());
    return 0;
  }

  int RankOf(uint32_t block) const {
    for (size_t r = 0; r < placement_.streaming.size(); ++r) {
      if (placement_.streaming[r] == block) return static_cast<int>(r);
    }
    return -1;  // resident: never copied
  }

  static unsigned long long Ull(uint64_t value) { return static_cast<unsigned long long>(value); }

  const Flags flags_;
  Placement placement_;
  std::vector<std::vector<std::byte>> expected_;  // per rank: the slot's bytes
};

// The name of a bs_code, as gRPC and absl spell it.
const char* CodeName(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  return code >= 0 && code <= BS_UNAUTHENTICATED ? kNames[code] : "UNKNOWN";
}

}  // namespace
}  // namespace blockswap::demo

int main(int argc, char** argv) {
  blockswap::demo::Flags flags;
  CLI::App app{"blockswap-demo: streams a synthetic model through blockswapd like a trainer"};
  app.set_version_flag("--version",
                       blockswap::VersionText("blockswap-demo", blockswap::ThisBuild()));
  // A flag given twice takes its last value, so that wrappers (quickstart)
  // can pass defaults and let the user's arguments override them.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--socket", flags.socket_path, "blockswapd's control socket");
  app.add_option("--name", flags.name, "client name shown by blockswapctl")->capture_default_str();
  app.add_option("--blocks", flags.blocks, "transformer blocks (N)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 16));
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
  app.add_option("--timeout", flags.timeout_seconds, "seconds a drain may block")
      ->capture_default_str();
  app.add_option("--reconnect-timeout", flags.reconnect_timeout_seconds,
                 "seconds the scheduler keeps trying to re-attach to a lost daemon (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 4000000.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
  try {
    blockswap::demo::Demo demo(flags);
    return demo.Run();
  } catch (const blockswap::Error& error) {
    std::fprintf(stderr, "blockswap-demo: %s: %s\n", blockswap::demo::CodeName(error.code()),
                 error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "blockswap-demo: %s\n", error.what());
    return 1;
  }
}
