// blockswap_abi_client: a trainer-shaped program that uses nothing but the
// public C++ wrapper over the C ABI (libblockswap.so), as a trainer would.
// It registers the test model, streams it through a ring on the calling
// thread (null stream: waits block, slots are host memory) and checks every
// byte, and that the read-only master view holds the same bytes.
//
//   blockswap_abi_client --socket=PATH [--seed=N --blocks=N --elements=N
//                        --slots=N --passes=N --report=FILE]
//                        [--scheduler-blocks=N [--reconnect-timeout-ms=N --hook-sleep-us=N]]
//   blockswap_abi_client --socket=PATH --file=F.safetensors --block-pattern=RE
//                        [--select=RE] [--report=FILE]
//   blockswap_abi_client --socket=PATH --fork=1 [--passes=N --report=FILE]
//   blockswap_abi_client --socket=PATH --offloader=1 --blocks=N [--report=FILE]
// The second form registers the file (bs_model_register_file), reports the
// model, its extras and its layout, and streams every block once, comparing
// each slot with the master view.
// The --fork form streams, forks two children mid-stream (one calls every
// kind of bs_* on the inherited handles, destroys them and returns from
// main; the other _exit()s), waits for both and streams on (RunFork).
// The --offloader form drives bs_offloader (placement 4 of --blocks through 2
// slots, the streaming blocks uploaded): it reports its refusal of a
// trainable tensor, every binding ("bind BLOCK SLOT PREVIOUS LOADED", -
// for no previous block) of one prepare, forward and backward, and whether
// each slot held its block's master bytes at its wait.
// Exit 0 when every byte was right, 10 on wrong bytes, 1 on an error.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "blockswap/blockswap.hpp"
#include "tests/integration/test_model.h"
#include "tests/support/key_value_args.h"

namespace {

// This process's memcpy rate from a master into private memory (the median
// of a few copies of block 0, after one that faults the pages in): what the
// host backend's copy from master to slot should about take.
double MemcpyRate(const blockswap::Model& model) {
  const uint64_t bytes = model.block_bytes(0);
  std::vector<uint8_t> into(bytes);
  std::vector<double> rates;
  for (int i = 0; i < 6; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(into.data(), model.master(0), bytes);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (i > 0) rates.push_back(static_cast<double>(bytes) / took.count());
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// Drives the ring with the C ABI's scheduler over `num_blocks` transformer
// blocks, of which the model's blocks are the streaming ones (in rank
// order), for `steps` training steps; checks each streamed block's bytes
// whenever a block is about to run, forward and backward.
// With --reconnect-timeout-ms the scheduler's reconnection timeout is set;
// "streaming 1" is reported once the first step is through (so a test can
// kill the daemon mid-run), and each hook may sleep --hook-sleep-us.
int RunScheduler(blockswap::Client& client, blockswap::Model& model, blockswap::Ring& ring,
                 const std::vector<std::vector<uint8_t>>& expected, uint32_t num_blocks,
                 uint32_t steps, const blockswap::testing::KeyValueArgs& args,
                 std::ofstream& report) {
  struct Bindings {
    std::map<uint32_t, uint32_t> slot_of_block;
    uint64_t copies = 0;
  } bindings;
  bs_bind_fn on_bind = [](void* user, uint32_t block, uint32_t slot, int loaded) {
    auto* b = static_cast<Bindings*>(user);
    for (auto it = b->slot_of_block.begin(); it != b->slot_of_block.end();) {
      it = it->second == slot ? b->slot_of_block.erase(it) : std::next(it);
    }
    b->slot_of_block[block] = slot;
    b->copies += loaded;
  };
  bs_scheduler_config config{num_blocks, model.block_count(), ring.slot_count(), 0};
  bs_scheduler* scheduler = nullptr;
  blockswap::detail::Check(bs_scheduler_create(client.get(), ring.get(), model.get(), &config,
                                               nullptr, on_bind, &bindings, &scheduler),
                           "bs_scheduler_create");
  // Destroyed on every path, an exception's included.
  std::unique_ptr<bs_scheduler, void (*)(bs_scheduler*)> owned(scheduler, bs_scheduler_destroy);
  if (args.Has("reconnect-timeout-ms")) {
    blockswap::detail::Check(
        bs_scheduler_set_reconnect_timeout(
            scheduler, static_cast<uint32_t>(args.Int("reconnect-timeout-ms", 0))),
        "bs_scheduler_set_reconnect_timeout");
  }
  const int64_t hook_sleep_us = args.Int("hook-sleep-us", 0);
  uint64_t wrong = 0;
  auto check = [&](uint32_t block) {
    if (!bs_scheduler_is_streaming(scheduler, block)) return;
    uint32_t rank = 0;
    while (bs_scheduler_streaming_block(scheduler, rank) != block) ++rank;
    auto bound = bindings.slot_of_block.find(block);
    if (bound == bindings.slot_of_block.end() ||
        std::memcmp(ring.slot(bound->second), expected[rank].data(), expected[rank].size()) != 0) {
      ++wrong;
    }
  };
  auto run = [&](int code, const char* what) {
    blockswap::detail::Check(code, what);
    if (hook_sleep_us > 0) usleep(static_cast<useconds_t>(hook_sleep_us));
  };
  // The last step's wall time per pass, for its copy_seconds to be within.
  std::chrono::duration<double> forward_wall{}, backward_wall{};
  for (uint32_t step = 0; step < steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    run(bs_scheduler_prepare(scheduler), "prepare");
    for (uint32_t block = 0; block < num_blocks; ++block) {
      run(bs_scheduler_wait_for_block(scheduler, block), "wait_for_block");
      check(block);
      run(bs_scheduler_after_forward(scheduler, block), "after_forward");
    }
    const auto turn = std::chrono::steady_clock::now();
    for (uint32_t block = num_blocks; block-- > 0;) {
      check(block);
      run(bs_scheduler_after_backward(scheduler, block), "after_backward");
    }
    run(bs_scheduler_finish_pass(scheduler), "finish_pass");
    forward_wall = turn - start;
    backward_wall = std::chrono::steady_clock::now() - turn;
    if (step == 0) report << "streaming 1" << std::endl;
  }
  bs_pass_stats forward{}, backward{};
  run(bs_scheduler_last_pass(scheduler, BS_FORWARD, &forward), "last_pass forward");
  run(bs_scheduler_last_pass(scheduler, BS_BACKWARD, &backward), "last_pass backward");
  // The compute stream cannot idle longer than the thread waited for it (the
  // host backend's caller stream is the thread).
  const bool stall_consistent =
      forward.stall_seconds >= 0 && forward.stall_seconds <= forward.host_wait_seconds;
  owned.reset();
  report << "stall_consistent " << (stall_consistent ? 1 : 0) << "\n";
  report << "forward_copy_s " << forward.copy_seconds << "\nbackward_copy_s "
         << backward.copy_seconds << "\nforward_wall_s " << forward_wall.count()
         << "\nbackward_wall_s " << backward_wall.count() << "\nblock_bytes "
         << model.block_bytes(0) << "\nmemcpy_bytes_per_s " << MemcpyRate(model) << "\n";
  report << "copies " << bindings.copies << "\nforward_loads " << forward.loads
         << "\nbackward_loads " << backward.loads << "\nwrong " << wrong << "\n";
  if (wrong > 0) {
    std::cerr << "blockswap_abi_client: " << wrong << " wrong blocks under the scheduler\n";
    return 10;
  }
  return 0;
}

// Streams every block of `model` `passes` times through `ring`, pipelined
// over its slots; returns how many slots or masters held wrong bytes.
uint64_t StreamPasses(blockswap::Model& model, blockswap::Ring& ring,
                      const std::vector<std::vector<uint8_t>>& expected, int64_t passes) {
  const uint32_t slots = ring.slot_count();
  const uint32_t blocks = model.block_count();
  const uint64_t total = passes * blocks;
  uint64_t wrong = 0;
  for (uint64_t k = 0; k < slots && k < total; ++k) {
    ring.Load(static_cast<uint32_t>(k), model, static_cast<uint32_t>(k % blocks));
  }
  for (uint64_t k = 0; k < total; ++k) {
    const uint32_t slot = static_cast<uint32_t>(k % slots);
    const uint32_t block = static_cast<uint32_t>(k % blocks);
    ring.Wait(slot);
    wrong += std::memcmp(ring.slot(slot), expected[block].data(), expected[block].size()) != 0;
    wrong += std::memcmp(model.master(block), expected[block].data(), expected[block].size()) != 0;
    if (k + slots < total) {
      ring.Load(slot, model, static_cast<uint32_t>((k + slots) % blocks));
    } else {
      ring.Release(slot);
    }
  }
  return wrong;
}

// In a child forked from `parent`: every call on an inherited handle must
// fail FAILED_PRECONDITION naming the call and the parent's pid, and every
// value getter must return its empty value; attaching again must fail too
// (gRPC does not survive fork()). Writes one line per call that
// did not, then "checked N".
std::string CheckInheritedHandles(pid_t parent, const std::string& socket_path,
                                  blockswap::Client& client, blockswap::Model& model,
                                  blockswap::Ring& ring, bs_scheduler* scheduler) {
  std::ostringstream out;
  int checked = 0;
  auto expect_refused = [&](int code, const char* call) {
    ++checked;
    const std::string message = bs_last_error();
    if (code != BS_FAILED_PRECONDITION || message.find(call) == std::string::npos ||
        message.find("forked from pid " + std::to_string(parent)) == std::string::npos) {
      out << "not_refused " << call << " code " << code << ": " << message << "\n";
    }
  };
  auto expect_empty = [&](bool empty, const char* call) {
    expect_refused(empty ? BS_FAILED_PRECONDITION : BS_OK, call);
  };
  bs_client* attached = nullptr;
  expect_refused(bs_connect(socket_path.c_str(), "child", &attached), "bs_connect");
  bs_model* opened = nullptr;
  expect_refused(bs_model_open(client.get(), model.id() == nullptr ? "" : model.id(), &opened),
                 "bs_model_open");
  bs_ring* created = nullptr;
  expect_refused(bs_ring_create(client.get(), "HOST-0", 1, 4096, &created), "bs_ring_create");
  expect_refused(bs_model_register(client.get(), "child", nullptr, 0, &opened),
                 "bs_model_register");
  expect_refused(bs_ring_load(ring.get(), 0, model.get(), 0, nullptr), "bs_ring_load");
  expect_refused(bs_ring_wait(ring.get(), 0, nullptr, 1000), "bs_ring_wait");
  expect_refused(bs_ring_release(ring.get(), 0, nullptr), "bs_ring_release");
  expect_refused(bs_ring_drain(ring.get(), 1000), "bs_ring_drain");
  expect_refused(bs_ring_close(ring.get(), nullptr, 1000), "bs_ring_close");
  bs_tensor_info info{};
  expect_refused(bs_model_tensor(model.get(), 0, 0, &info), "bs_model_tensor");
  expect_refused(bs_scheduler_prepare(scheduler), "bs_scheduler_prepare");
  expect_refused(bs_scheduler_wait_for_block(scheduler, 0), "bs_scheduler_wait_for_block");
  expect_refused(bs_scheduler_after_forward(scheduler, 0), "bs_scheduler_after_forward");
  expect_refused(bs_scheduler_finish_pass(scheduler), "bs_scheduler_finish_pass");
  bs_pass_stats stats{};
  expect_refused(bs_scheduler_last_pass(scheduler, BS_FORWARD, &stats), "bs_scheduler_last_pass");
  expect_empty(ring.slot(0) == nullptr, "bs_ring_slot");
  expect_empty(model.master(0) == nullptr, "bs_model_master");
  expect_empty(model.id() == nullptr, "bs_model_id");
  expect_empty(client.devices().empty(), "bs_client_device_count");
  expect_empty(bs_scheduler_streaming_count(scheduler) == 0, "bs_scheduler_streaming_count");
  out << "checked " << checked << "\n";
  return out.str();
}

// Waits up to `timeout_s` for `child`; its exit code, 128+signal, or -1 if
// it hung (then it is killed).
int AwaitChild(pid_t child, int timeout_s) {
  for (int tick = 0; tick < timeout_s * 100; ++tick) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    usleep(10000);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return -1;
}

// The --fork form: a trainer whose DataLoader workers fork after it attached.
// Streams, runs a scheduler step, then forks two children while a load is
// outstanding: one checks its inherited handles (CheckInheritedHandles),
// destroys them and returns from main (static destructors, atexit); one
// _exit()s at once. The parent streams on meanwhile and after, byte-exact,
// and its session still answers (bs_model_open by id, a new ring).
int RunFork(blockswap::Client& client, blockswap::Model& model, blockswap::Ring& ring,
            const std::vector<std::vector<uint8_t>>& expected,
            const blockswap::testing::KeyValueArgs& args, std::ofstream& report) {
  const int64_t passes = args.Int("passes", 3);
  uint64_t wrong = StreamPasses(model, ring, expected, passes);
  // The scheduler's ring is its own: it trusts what it left in the slots.
  blockswap::Ring scheduled = client.CreateRing(client.devices().front(), 2, ring.slot_bytes());
  bs_scheduler_config config{model.block_count(), model.block_count(), 2, 0, 0};
  bs_scheduler* scheduler = nullptr;
  blockswap::detail::Check(bs_scheduler_create(client.get(), scheduled.get(), model.get(), &config,
                                               nullptr, nullptr, nullptr, &scheduler),
                           "bs_scheduler_create");
  for (uint32_t block = 0; block < model.block_count(); ++block) {
    blockswap::detail::Check(bs_scheduler_wait_for_block(scheduler, block), "wait_for_block");
    blockswap::detail::Check(bs_scheduler_after_forward(scheduler, block), "after_forward");
  }
  const pid_t parent = getpid();
  int to_parent[2];
  if (pipe(to_parent) != 0) return 1;
  report.flush();
  const pid_t checker = fork();
  if (checker == 0) {
    close(to_parent[0]);
    const std::string found =
        CheckInheritedHandles(parent, args.Str("socket"), client, model, ring, scheduler);
    (void)!write(to_parent[1], found.data(), found.size());
    close(to_parent[1]);
    bs_scheduler_destroy(scheduler);
    return 0;  // main destroys the ring, the model and the client, then returns
  }
  close(to_parent[1]);
  const pid_t quitter = fork();
  if (quitter == 0) _exit(0);
  // Stream on while the children run and exit.
  wrong += StreamPasses(model, ring, expected, passes);
  std::string found;
  char buffer[4096];
  for (ssize_t n; (n = read(to_parent[0], buffer, sizeof(buffer))) > 0;) found.append(buffer, n);
  close(to_parent[0]);
  report << found;
  report << "checker_exit " << AwaitChild(checker, 30) << "\n";
  report << "quitter_exit " << AwaitChild(quitter, 30) << "\n";
  // The session is intact: the ring, the scheduler, the daemon's answers.
  wrong += StreamPasses(model, ring, expected, passes);
  blockswap::detail::Check(bs_scheduler_prepare(scheduler), "prepare after the fork");
  for (uint32_t block = 0; block < model.block_count(); ++block) {
    blockswap::detail::Check(bs_scheduler_wait_for_block(scheduler, block), "wait_for_block");
    wrong +=
        std::memcmp(scheduled.slot(block % 2), expected[block].data(), expected[block].size()) != 0;
    blockswap::detail::Check(bs_scheduler_after_forward(scheduler, block), "after_forward");
  }
  bs_scheduler_destroy(scheduler);
  blockswap::Model reopened = client.Open(model.id());
  blockswap::Ring another = client.CreateRing(client.devices().front(), 1, ring.slot_bytes());
  report << "reopened " << (std::string(reopened.id()) == model.id() ? 1 : 0) << "\n";
  report << "wrong " << wrong << "\n";
  return wrong == 0 ? 0 : 10;
}

// The --file form.
int RunFile(blockswap::Client& client, const blockswap::testing::KeyValueArgs& args,
            std::ofstream& report) {
  std::unique_ptr<blockswap::Model> extras;
  blockswap::Model model = client.RegisterFile(args.Str("file"), args.Str("block-pattern"),
                                               args.Str("select", ""), 0, &extras);
  report << "model " << model.id() << "\n";
  report << "extras " << (extras ? extras->id() : "none") << "\n";
  report << "blocks " << model.block_count() << "\n";
  uint64_t slot_bytes = 0;
  for (uint32_t b = 0; b < model.block_count(); ++b) {
    slot_bytes = std::max<uint64_t>(slot_bytes, model.block_bytes(b));
    for (uint32_t t = 0; t < model.tensor_count(b); ++t) {
      bs_tensor_info info = model.tensor(b, t);
      report << "tensor " << b << " " << info.name << " " << info.dtype << " " << info.offset
             << "\n";
    }
  }
  blockswap::Ring ring = client.CreateRing(client.devices().front(), 1, slot_bytes);
  uint64_t wrong = 0;
  for (uint32_t b = 0; b < model.block_count(); ++b) {
    ring.Load(0, model, b);
    ring.Wait(0);
    wrong += std::memcmp(ring.slot(0), model.master(b), model.block_bytes(b)) != 0;
    ring.Release(0);
  }
  report << "wrong " << wrong << "\n";
  return wrong == 0 ? 0 : 10;
}

// The process that started this program; its forked children are others.
const pid_t main_pid = ::getpid();

}  // namespace

// LeakSanitizer's hook (configuration B): no leak check at a forked child's
// exit. What a child inherited from gRPC (its thread pool's state, referenced
// only from the parent's threads, which a child does not have) reads as lost
// there, and the child keeps its blockswap handles on purpose
// (client/core/owner_process.h). The parent is checked as always.
extern "C" int __lsan_is_turned_off() { return ::getpid() != main_pid ? 1 : 0; }

// The --offloader form (see the top of this file).
int RunOffloader(const std::string& socket, uint32_t blocks,
                 const std::vector<std::vector<uint8_t>>& data, std::ostream& report) {
  using blockswap::testing::kTensorDtypes;
  using blockswap::testing::kTensorElementBytes;
  using blockswap::testing::kTensorNames;
  using blockswap::testing::kTensorsPerBlock;
  bs_offloader_config config{};
  config.kind = "abi";
  config.num_blocks = blocks;
  config.blocks_to_swap = 4;
  config.ring_size = 2;
  config.socket_path = socket.c_str();
  config.client_name = "abi-offloader";
  config.model_name = "abi-offloader";
  config.reconnect_timeout_s = 0;
  bs_offloader* raw = nullptr;
  blockswap::detail::Check(bs_offloader_create(&config, &raw), "bs_offloader_create");
  std::unique_ptr<bs_offloader, void (*)(bs_offloader*)> offloader(raw, &bs_offloader_destroy);
  std::vector<std::vector<uint64_t>> shapes(blocks * kTensorsPerBlock);
  std::vector<std::vector<bs_offloader_tensor>> tensors(blocks);
  std::vector<bs_offloader_block> layout(blocks);
  for (uint32_t b = 0; b < blocks; ++b) {
    for (int t = 0; t < kTensorsPerBlock; ++t) {
      const auto& bytes = data[b * kTensorsPerBlock + t];
      shapes[b * kTensorsPerBlock + t] = {bytes.size() / kTensorElementBytes[t]};
      tensors[b].push_back(bs_offloader_tensor{kTensorNames[t], kTensorDtypes[t],
                                               shapes[b * kTensorsPerBlock + t].data(), 1,
                                               bytes.data(), 0, 0});
    }
    layout[b] = bs_offloader_block{tensors[b].data(), static_cast<uint32_t>(tensors[b].size())};
  }
  const uint32_t first = bs_offloader_streaming_block(offloader.get(), 0);
  tensors[first][0].requires_grad = 1;
  const int refused = bs_offloader_check_block(offloader.get(), first, tensors[first].data(),
                                               static_cast<uint32_t>(tensors[first].size()));
  report << "trainable " << refused << " " << bs_last_error() << "\n";
  tensors[first][0].requires_grad = 0;
  blockswap::detail::Check(bs_offloader_connect(offloader.get()), "bs_offloader_connect");
  blockswap::detail::Check(bs_offloader_use_device(offloader.get(), -1, nullptr, "cpu"),
                           "bs_offloader_use_device");
  blockswap::detail::Check(bs_offloader_open_model(offloader.get(), layout.data()),
                           "bs_offloader_open_model");
  const auto on_bind = [](void* out, uint32_t block, uint32_t slot, uint32_t previous, int loaded) {
    *static_cast<std::ostream*>(out)
        << "bind " << block << " " << slot << " "
        << (previous == UINT32_MAX ? std::string("-") : std::to_string(previous)) << " " << loaded
        << "\n";
  };
  blockswap::detail::Check(bs_offloader_start(offloader.get(), nullptr, on_bind, &report),
                           "bs_offloader_start");
  uint64_t wrong = 0;
  const auto check = [&](uint32_t block) {
    const uint32_t slot = bs_offloader_slot_of(offloader.get(), block);
    const uint64_t bytes = bs_offloader_master_bytes(offloader.get(), block);
    if (bs_offloader_slot_block(offloader.get(), slot) != block ||
        std::memcmp(bs_offloader_slot(offloader.get(), slot),
                    bs_offloader_master(offloader.get(), block), bytes) != 0) {
      ++wrong;
    }
  };
  blockswap::detail::Check(bs_offloader_prepare(offloader.get()), "bs_offloader_prepare");
  report << "forward\n";
  for (uint32_t b = 0; b < blocks; ++b) {
    blockswap::detail::Check(bs_offloader_wait_for_block(offloader.get(), b), "wait");
    if (bs_offloader_is_streaming(offloader.get(), b)) check(b);
    blockswap::detail::Check(bs_offloader_after_forward(offloader.get(), b), "after_forward");
  }
  report << "backward\n";
  for (uint32_t b = blocks; b-- > 0;) {
    if (bs_offloader_is_streaming(offloader.get(), b)) {
      blockswap::detail::Check(bs_offloader_ensure_block(offloader.get(), b), "ensure");
      check(b);
    }
    blockswap::detail::Check(bs_offloader_after_backward(offloader.get(), b), "after_backward");
  }
  blockswap::detail::Check(bs_offloader_close(offloader.get(), nullptr, 5000), "close");
  report << "wrong " << wrong << "\n";
  return wrong == 0 ? 0 : 10;
}

int main(int argc, char** argv) {
  using blockswap::testing::kTensorDtypes;
  using blockswap::testing::kTensorElementBytes;
  using blockswap::testing::kTensorNames;
  using blockswap::testing::kTensorsPerBlock;
  const blockswap::testing::KeyValueArgs args(std::vector<std::string>(argv + 1, argv + argc));
  const uint32_t blocks = static_cast<uint32_t>(args.Int("blocks", 6));
  const auto data =
      blockswap::testing::ModelTensorData(args.Int("seed", 1), blocks, args.Int("elements", 4096));
  std::ofstream report(args.Str("report", "/dev/null"), std::ios::app);
  try {
    if (args.Has("offloader")) return RunOffloader(args.Str("socket"), blocks, data, report);
    blockswap::Client client(args.Str("socket"), "abi-client");
    if (args.Has("file")) return RunFile(client, args, report);
    std::vector<blockswap::Block> model_blocks(blocks);
    for (uint32_t b = 0; b < blocks; ++b) {
      for (int t = 0; t < kTensorsPerBlock; ++t) {
        const auto& bytes = data[b * kTensorsPerBlock + t];
        model_blocks[b].push_back({kTensorNames[t],
                                   kTensorDtypes[t],
                                   {bytes.size() / kTensorElementBytes[t]},
                                   bytes.data()});
      }
    }
    blockswap::Model model = client.Register("integration", model_blocks);
    report << "model " << model.id() << "\n";

    // What each block must hold: every tensor at the offset the layout gives.
    std::vector<std::vector<uint8_t>> expected(blocks);
    uint64_t slot_bytes = 0;
    for (uint32_t b = 0; b < blocks; ++b) {
      expected[b].assign(model.block_bytes(b), 0);
      for (uint32_t t = 0; t < model.tensor_count(b); ++t) {
        bs_tensor_info info = model.tensor(b, t);
        std::memcpy(expected[b].data() + info.offset, data[b * kTensorsPerBlock + t].data(),
                    info.length);
      }
      slot_bytes = std::max<uint64_t>(slot_bytes, model.block_bytes(b));
    }

    blockswap::Ring ring = client.CreateRing(
        client.devices().front(), static_cast<uint32_t>(args.Int("slots", 2)), slot_bytes);
    if (args.Has("scheduler-blocks")) {
      return RunScheduler(client, model, ring, expected,
                          static_cast<uint32_t>(args.Int("scheduler-blocks", 0)),
                          static_cast<uint32_t>(args.Int("passes", 3)), args, report);
    }
    if (args.Has("fork")) return RunFork(client, model, ring, expected, args, report);
    const uint64_t wrong = StreamPasses(model, ring, expected, args.Int("passes", 3));
    report << "wrong " << wrong << "\n";
    if (wrong > 0) {
      std::cerr << "blockswap_abi_client: " << wrong << " wrong blocks\n";
      return 10;
    }
    return 0;
  } catch (const blockswap::Error& e) {
    std::cerr << "blockswap_abi_client: " << e.what() << " (code " << e.code() << ")\n";
    report << "error " << e.code() << " " << e.what() << "\n";
    return 1;
  }
}
