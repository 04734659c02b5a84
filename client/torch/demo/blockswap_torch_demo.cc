// blockswap-torch-demo: LoRA training of a small transformer stack (frozen
// base, adapters on every Linear) whose streamed blocks come from
// blockswapd through blockswap::torch::StreamOffloader. Synthetic data; the
// same --blocks/--dim/--seed give the same frozen weights, so concurrent
// demos share one model. Prints the loss of each step and the statistics of
// each pass; first checks that the offloaded model's loss equals the loss of
// the same model kept whole (resident), and exits non-zero if not.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "blockswap/blockswap.hpp"
#include "blockswap/torch.h"
#include "client/torch/lora_transformer.h"

namespace {

namespace bt = blockswap::torch;

struct Args {
  std::string socket;
  std::string name = "torch-demo";
  std::string device = "auto";
  uint32_t swap = 6;
  uint32_t ring = 2;
  int steps = 5;
  int batch = 2;
  int seq = 16;
  double lr = 0.05;
  blockswap_lora::StackOptions stack;
};

at::Tensor RunStack(const std::vector<blockswap_lora::Block>& blocks,
                    bt::StreamOffloader* offloader, at::Tensor x) {
  for (uint32_t i = 0; i < blocks.size(); ++i) {
    blockswap_lora::Block block = blocks[i];  // a shared handle
    if (offloader == nullptr) {
      x = block->forward(x);
    } else {
      // Captured by value: backward calls it again, after this loop.
      x = offloader->Forward(
          i, [block](const at::Tensor& h) { return block.ptr()->forward(h); }, x);
    }
  }
  return x;
}

int Run(const Args& args) {
  c10::Device device(c10::kCPU);
  if (args.device == "auto") {
    blockswap::Client probe(args.socket, args.name + "-probe");
    if (probe.backend() == BS_BACKEND_CUDA) device = c10::Device(c10::kCUDA, 0);
  } else {
    device = c10::Device(args.device);
  }

  ::torch::manual_seed(args.stack.seed + 1000);
  const at::Tensor input = ::torch::randn({args.batch, args.seq, args.stack.dim}).to(device);
  const at::Tensor target = ::torch::randn({args.batch, args.seq, args.stack.dim}).to(device);

  // The same model kept whole: the first step's loss must match it.
  double resident_loss = 0;
  {
    std::vector<blockswap_lora::Block> whole = blockswap_lora::MakeStack(args.stack);
    for (auto& block : whole) block->to(device);
    at::NoGradGuard no_grad;
    resident_loss = ::torch::mse_loss(RunStack(whole, nullptr, input), target).item<double>();
  }

  std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(args.stack);
  bt::BlockSwapConfig config;
  config.device = device;
  config.blocks_to_swap = args.swap;
  config.ring_size = args.ring;
  config.socket_path = args.socket;
  config.client_name = args.name;
  config.model_name = "torch-demo";
  bt::StreamOffloader offloader(blockswap_lora::Modules(blocks), config);
  const std::vector<at::Tensor> adapters = blockswap_lora::LoraParameters(blocks);
  std::printf("model %s: %zu blocks, streaming %zu through %u slots of %llu bytes on %s\n",
              offloader.model_id().c_str(), blocks.size(), offloader.streaming_blocks().size(),
              offloader.ring_slots(), static_cast<unsigned long long>(offloader.slot_bytes()),
              device.str().c_str());

  uint64_t loads = 0;
  int mismatches = 0;
  double first_loss = 0;
  for (int step = 1; step <= args.steps; ++step) {
    offloader.PrepareBlockDevicesBeforeForward();
    at::Tensor loss = ::torch::mse_loss(RunStack(blocks, &offloader, input), target);
    loss.backward();
    offloader.FinishPass();
    blockswap_lora::SgdStep(adapters, args.lr);
    const double value = loss.item<double>();
    if (step == 1) first_loss = value;
    std::printf("step %d/%d loss %.6f\n", step, args.steps, value);
    for (bt::Direction direction : {bt::Direction::kForward, bt::Direction::kBackward}) {
      if (auto pass = offloader.LastPass(direction)) {
        loads += pass->loads;
        std::printf("  %s\n", bt::FormatPassStats(*pass).c_str());
      }
    }
    std::fflush(stdout);
  }
  if (first_loss != resident_loss) {
    std::printf("loss of step 1 %.9g differs from the resident model's %.9g\n", first_loss,
                resident_loss);
    ++mismatches;
  }
  if (mismatches != 0 || (loads == 0 && !offloader.streaming_blocks().empty())) {
    std::printf("demo FAILED: loads %llu mismatches %d\n", static_cast<unsigned long long>(loads),
                mismatches);
    return 1;
  }
  std::printf(
      "demo ok: %s loads %llu checks 1 mismatches 0 (step 1 loss equals the resident "
      "model's)\n",
      args.name.c_str(), static_cast<unsigned long long>(loads));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{
      "LoRA training of a small transformer whose frozen blocks stream through blockswapd"};
  app.add_option("--socket", args.socket, "blockswapd's socket (default: the system one)");
  app.add_option("--name", args.name, "client name shown by blockswapctl");
  app.add_option("--device", args.device, "cpu, cuda, cuda:N or auto (the daemon's backend)");
  app.add_option("--blocks", args.stack.blocks, "transformer blocks")->check(CLI::Range(1, 256));
  app.add_option("--swap", args.swap, "blocks streamed through the daemon (S)");
  app.add_option("--ring", args.ring, "ring slots (B, clamped to S)")->check(CLI::Range(1, 64));
  app.add_option("--steps", args.steps, "training steps")->check(CLI::Range(1, 100000));
  app.add_option("--dim", args.stack.dim, "model width")->check(CLI::Range(8, 8192));
  app.add_option("--heads", args.stack.heads, "attention heads (divide --dim)");
  app.add_option("--rank", args.stack.rank, "LoRA rank")->check(CLI::Range(1, 1024));
  app.add_option("--batch", args.batch, "batch size")->check(CLI::Range(1, 1024));
  app.add_option("--seq", args.seq, "sequence length")->check(CLI::Range(1, 65536));
  app.add_option("--seed", args.stack.seed, "seed of the frozen weights and the data");
  app.add_option("--lr", args.lr, "SGD learning rate of the adapters");
  CLI11_PARSE(app, argc, argv);
  if (args.stack.dim % args.stack.heads != 0) {
    std::fprintf(stderr, "--heads %lld must divide --dim %lld\n",
                 static_cast<long long>(args.stack.heads), static_cast<long long>(args.stack.dim));
    return 2;
  }
  try {
    return Run(args);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "blockswap-torch-demo: %s\n", error.what());
    return 1;
  }
}
