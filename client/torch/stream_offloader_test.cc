// blockswap::torch::StreamOffloader against a real blockswapd (host backend,
// so the model computes on the CPU): the offloaded model trains exactly like
// the resident one, every streamed block computes from its ring slot, slots
// are poisoned once given back, inference wraps around, misuse is refused.
// Links only libblockswap.so (through blockswap_torch) and a daemon
// launcher without the generated gRPC code.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "blockswap/torch.h"
#include "client/torch/demo/lora_transformer.h"
#include "shared/base/unique_fd.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"

#if BLOCKSWAP_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace blockswap::torch {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 3;

blockswap_lora::StackOptions SmallStack() {
  return blockswap_lora::StackOptions{.blocks = 6, .dim = 32, .heads = 2, .rank = 2, .seed = 11};
}

// Inside each block's compute: the streamed tensors of a streaming block
// point into its ring slot (rank % B), those of a resident block nowhere in
// the ring. Counted apart in forward (no grad: the checkpoint's first run,
// or inference) and backward (the recompute).
struct AddressCheck {
  explicit AddressCheck(const StreamOffloader* offloader) : offloader(offloader) {}
  const StreamOffloader* offloader;
  int forward_checks = 0;
  int backward_checks = 0;
  std::vector<std::string> failures;

  void Check(uint32_t block, const ModulePtr& module) {
    const std::optional<uint32_t> rank = offloader->streaming_rank(block);
    for (const StreamedTensor& entry : LinearWeights(module)) {
      const auto* p =
          static_cast<const char*>(entry.module->named_parameters(false)[entry.name].data_ptr());
      for (uint32_t slot = 0; slot < offloader->ring_slots(); ++slot) {
        const auto* base = static_cast<const char*>(offloader->slot_data(slot));
        const bool inside = p >= base && p < base + offloader->slot_bytes();
        const bool expected = rank.has_value() && *rank % offloader->ring_slots() == slot;
        if (inside != expected) {
          failures.push_back("block " + std::to_string(block) + " " + entry.path + " slot " +
                             std::to_string(slot) + (inside ? ": inside" : ": outside"));
        }
      }
    }
    ++(c10::GradMode::is_enabled() ? backward_checks : forward_checks);
  }
};

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<at::Tensor>> grads;  // per step, per adapter parameter
  std::vector<PassStats> forward, backward;    // per step
};

// kSteps LoRA steps on fixed synthetic data, through `offloader` when given.
Trained Train(const std::vector<blockswap_lora::Block>& blocks, StreamOffloader* offloader,
              AddressCheck* check = nullptr) {
  ::torch::manual_seed(77);
  const at::Tensor input = ::torch::randn({2, 8, SmallStack().dim});
  const at::Tensor target = ::torch::randn({2, 8, SmallStack().dim});
  const std::vector<at::Tensor> adapters = blockswap_lora::LoraParameters(blocks);
  Trained out;
  for (int step = 0; step < kSteps; ++step) {
    if (offloader != nullptr) offloader->PrepareBlockDevicesBeforeForward();
    at::Tensor x = input;
    for (uint32_t i = 0; i < blocks.size(); ++i) {
      const blockswap_lora::Block& block = blocks[i];
      if (offloader == nullptr) {
        x = block.ptr()->forward(x);
        continue;
      }
      // By value: backward calls it again after this loop.
      x = offloader->Forward(
          i,
          [i, block, check](const at::Tensor& h) {
            if (check != nullptr) check->Check(i, block.ptr());
            return block.ptr()->forward(h);
          },
          x);
    }
    at::Tensor loss = ::torch::mse_loss(x, target);
    loss.backward();
    if (offloader != nullptr) {
      offloader->FinishPass();
      out.forward.push_back(offloader->LastPass(Direction::kForward).value_or(PassStats{}));
      out.backward.push_back(offloader->LastPass(Direction::kBackward).value_or(PassStats{}));
    }
    out.losses.push_back(loss.item<double>());
    out.grads.emplace_back();
    for (const at::Tensor& p : adapters) {
      out.grads.back().push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    }
    blockswap_lora::SgdStep(adapters, 0.05);
  }
  return out;
}

// Every step's loss and every adapter gradient bitwise equal.
void ExpectSameTraining(const Trained& got, const Trained& expected) {
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(got.losses[step], expected.losses[step]) << "step " << step;
    ASSERT_EQ(got.grads[step].size(), expected.grads[step].size());
    for (size_t p = 0; p < expected.grads[step].size(); ++p) {
      ASSERT_TRUE(got.grads[step][p].defined()) << "step " << step << " adapter " << p;
      EXPECT_TRUE(::torch::equal(got.grads[step][p], expected.grads[step][p]))
          << "step " << step << " adapter " << p;
    }
  }
}

// kSteps through an offloader of `config` over a fresh SmallStack().
Trained TrainThrough(const BlockSwapConfig& config) {
  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(SmallStack());
  StreamOffloader offloader(blockswap_lora::Modules(blocks), config);
  return Train(blocks, &offloader);
}

class TorchLayerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto dirs = testing::ScratchDirs::Create();
    ASSERT_TRUE(dirs.ok()) << dirs.status();
    dirs_ = *std::move(dirs);
    auto daemon = testing::DaemonProcess::Start(*dirs_);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
  }
  static void TearDownTestSuite() {
    daemon_.reset();
    dirs_.reset();
  }

  static BlockSwapConfig Config(uint32_t swap, uint32_t ring) {
    BlockSwapConfig config;
    config.blocks_to_swap = swap;
    config.ring_size = ring;
    config.socket_path = dirs_->socket_path();
    config.poison_released_slots = true;
    return config;
  }

  static inline std::unique_ptr<testing::ScratchDirs> dirs_;
  static inline std::unique_ptr<testing::DaemonProcess> daemon_;
};

struct SwapCase {
  uint32_t swap;
  uint32_t ring;
};

class OffloadedTrainingTest : public TorchLayerTest,
                              public ::testing::WithParamInterface<SwapCase> {};

TEST_P(OffloadedTrainingTest, LossesAndAdapterGradientsEqualTheResidentModels) {
  const SwapCase c = GetParam();
  const std::vector<blockswap_lora::Block> resident = blockswap_lora::MakeStack(SmallStack());
  const Trained expected = Train(resident, nullptr);

  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(SmallStack());
  StreamOffloader offloader(blockswap_lora::Modules(blocks), Config(c.swap, c.ring));
  const auto s = static_cast<uint32_t>(offloader.streaming_blocks().size());
  const uint32_t b = offloader.ring_slots();
  ASSERT_EQ(s, std::min<uint32_t>(c.swap, 6));
  ASSERT_EQ(b, std::min(c.ring, s));
  AddressCheck check(&offloader);
  const Trained got = Train(blocks, &offloader, &check);

  ASSERT_NO_FATAL_FAILURE(ExpectSameTraining(got, expected));
  // Every block's adapters learn, block 0's too (its input needs no grad).
  EXPECT_GT(got.grads[0].front().abs().sum().item<double>(), 0);

  EXPECT_THAT(check.failures, ::testing::IsEmpty());
  EXPECT_EQ(check.forward_checks, kSteps * 6);
  EXPECT_EQ(check.backward_checks, kSteps * 6);

  // The loads the scheduler plans (docs/client.md): the first forward pass loads
  // every streaming block; afterwards backward leaves ranks 0..B-1 in the
  // ring, so prepare rebinds them and forward loads the other S-B; backward
  // reloads S-B. No self-heal anywhere.
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_EQ(got.forward[step].loads, step == 0 ? s : s - b);
    EXPECT_EQ(got.forward[step].rebinds, step == 0 ? 0u : b);
    EXPECT_EQ(got.backward[step].loads, s - b);
    EXPECT_EQ(got.forward[step].self_heals + got.backward[step].self_heals, 0u);
    EXPECT_EQ(got.forward[step].waits, s);
  }
}

INSTANTIATE_TEST_SUITE_P(SwapAndRing, OffloadedTrainingTest,
                         ::testing::Values(SwapCase{1, 1}, SwapCase{2, 1}, SwapCase{3, 2},
                                           SwapCase{6, 2}, SwapCase{6, 6}, SwapCase{2, 4}),
                         [](const ::testing::TestParamInfo<SwapCase>& info) {
                           return "S" + std::to_string(info.param.swap) + "_B" +
                                  std::to_string(info.param.ring);
                         });

TEST_F(TorchLayerTest, ForwardOnlyInferenceWrapsAroundAndMatchesTheResidentOutputs) {
  ::torch::manual_seed(5);
  const at::Tensor input = ::torch::randn({2, 8, SmallStack().dim});
  at::NoGradGuard no_grad;
  const std::vector<blockswap_lora::Block> resident = blockswap_lora::MakeStack(SmallStack());
  at::Tensor expected = input;
  for (const blockswap_lora::Block& block : resident) expected = block.ptr()->forward(expected);

  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(SmallStack());
  BlockSwapConfig config = Config(4, 2);
  config.supports_backward = false;
  StreamOffloader offloader(blockswap_lora::Modules(blocks), config);
  AddressCheck check(&offloader);
  offloader.PrepareBlockDevicesBeforeForward();
  for (int pass = 0; pass < 3; ++pass) {
    at::Tensor x = input;
    for (uint32_t i = 0; i < blocks.size(); ++i) {
      x = offloader.Forward(
          i,
          [&check, i, block = blocks[i]](const at::Tensor& h) {
            check.Check(i, block.ptr());
            return block.ptr()->forward(h);
          },
          x);
    }
    EXPECT_TRUE(::torch::equal(x, expected)) << "pass " << pass;
    offloader.FinishPass();
    const std::optional<PassStats> stats = offloader.LastPass(Direction::kForward);
    ASSERT_TRUE(stats.has_value());
    // Prepare's 2 (first pass only), 2 prefetches, 2 of the wrap-around,
    // which also spares the next pass any self-heal.
    EXPECT_EQ(stats->loads, pass == 0 ? 6u : 4u) << "pass " << pass;
    EXPECT_EQ(stats->self_heals, 0u) << "pass " << pass;
  }
  EXPECT_THAT(check.failures, ::testing::IsEmpty());
  EXPECT_EQ(check.forward_checks, 3 * 6);
}

TEST_F(TorchLayerTest, StreamedWeightsSavedByAutogradFailLoudlyOnceTheirSlotIsReloaded) {
  // No checkpoint (supports_backward false), yet a graph: the weights the
  // graph saved point into slots that later loads overwrite. Each load bumps
  // their version counter, so backward refuses instead of using stale bytes.
  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(SmallStack());
  BlockSwapConfig config = Config(3, 1);
  config.supports_backward = false;
  StreamOffloader offloader(blockswap_lora::Modules(blocks), config);
  ::torch::manual_seed(3);
  at::Tensor x = ::torch::randn({2, 8, SmallStack().dim});
  offloader.PrepareBlockDevicesBeforeForward();
  for (uint32_t i = 0; i < blocks.size(); ++i) {
    x = offloader.Forward(
        i, [block = blocks[i]](const at::Tensor& h) { return block.ptr()->forward(h); }, x);
  }
  at::Tensor loss = x.square().mean();
  try {
    loss.backward();
    ADD_FAILURE() << "backward used weights whose slot was reloaded";
  } catch (const c10::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("modified by an inplace operation"));
  }
}

// Without checkpointing each streamed Linear saves (block, tensor) instead of
// its weight, and backward takes the weight from the slot: one slot that
// every block overwrites (poisoned when released) still trains bit for bit
// like the resident model.
TEST_F(TorchLayerTest, WithoutCheckpointingSavedWeightsComeBackFromTheRing) {
  BlockSwapConfig config = Config(4, 1);
  config.gradient_checkpointing = false;
  const Trained got = TrainThrough(config);
  const Trained expected = Train(blockswap_lora::MakeStack(SmallStack()), nullptr);
  ASSERT_NO_FATAL_FAILURE(ExpectSameTraining(got, expected));
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(got.backward[step].loads, 3u) << "step " << step;
    EXPECT_EQ(got.forward[step].self_heals + got.backward[step].self_heals, 0u);
  }
}

// Out of the expected order (a prepare between forward and backward evicts
// the forward's last block), backward loads the block on demand.
TEST_F(TorchLayerTest, WithoutCheckpointingAnEvictedBlockIsLoadedForItsBackward) {
  auto step = [](const std::vector<blockswap_lora::Block>& blocks, StreamOffloader* offloader) {
    ::torch::manual_seed(5);
    at::Tensor x = ::torch::randn({2, 8, SmallStack().dim});
    if (offloader != nullptr) offloader->PrepareBlockDevicesBeforeForward();
    for (uint32_t i = 0; i < blocks.size(); ++i) {
      auto fn = [block = blocks[i]](const at::Tensor& h) { return block.ptr()->forward(h); };
      x = offloader != nullptr ? offloader->Forward(i, fn, x) : fn(x);
    }
    if (offloader != nullptr) offloader->PrepareBlockDevicesBeforeForward();
    x.square().mean().backward();
    std::vector<at::Tensor> grads;
    for (const at::Tensor& p : blockswap_lora::LoraParameters(blocks)) grads.push_back(p.grad());
    return grads;
  };
  const std::vector<blockswap_lora::Block> resident = blockswap_lora::MakeStack(SmallStack());
  const std::vector<at::Tensor> expected = step(resident, nullptr);
  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(SmallStack());
  BlockSwapConfig config = Config(4, 2);
  config.gradient_checkpointing = false;
  StreamOffloader offloader(blockswap_lora::Modules(blocks), config);
  const std::vector<at::Tensor> got = step(blocks, &offloader);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t p = 0; p < expected.size(); ++p) {
    EXPECT_TRUE(::torch::equal(got[p], expected[p])) << "adapter " << p;
  }
  offloader.FinishPass();
  const std::optional<PassStats> backward = offloader.LastPass(Direction::kBackward);
  ASSERT_TRUE(backward.has_value());
  const std::optional<PassStats> forward = offloader.LastPass(Direction::kForward);
  EXPECT_GT(backward->self_heals + (forward.has_value() ? forward->self_heals : 0), 0u);
}

TEST_F(TorchLayerTest, TrainableStreamedTensorIsRefused) {
  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(SmallStack());
  blocks[3]->fc1->base->weight.requires_grad_(true);
  try {
    StreamOffloader offloader(blockswap_lora::Modules(blocks), Config(6, 2));
    ADD_FAILURE() << "a trainable streamed tensor was accepted";
  } catch (const c10::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("block 3 tensor 'fc1.base.weight' requires grad"));
    EXPECT_THAT(error.what(), HasSubstr("requires_grad_(false)"));
  }

  // Made trainable after the offloader was built: refused at its next wait.
  blocks[3]->fc1->base->weight.requires_grad_(false);
  StreamOffloader offloader(blockswap_lora::Modules(blocks), Config(6, 2));
  offloader.PrepareBlockDevicesBeforeForward();
  blocks[3]->fc1->base->weight.requires_grad_(true);
  try {
    offloader.WaitForBlock(3);
    ADD_FAILURE() << "a streamed tensor made trainable was accepted";
  } catch (const c10::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("must be frozen"));
  }
}

TEST_F(TorchLayerTest, ASelectedNameThatIsNoTensorOfItsModuleIsRefusedNamingThePath) {
  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(SmallStack());
  BlockSwapConfig config = Config(6, 2);
  config.selector = [](const ModulePtr& block) {
    std::vector<StreamedTensor> picked;
    for (const auto& item : block->named_modules("", false)) {
      if (item.key() == "fc1") picked.push_back({item.key(), item.value(), "scale"});
    }
    return picked;
  };
  try {
    StreamOffloader offloader(blockswap_lora::Modules(blocks), config);
    ADD_FAILURE() << "a selected name that is no tensor was accepted";
  } catch (const c10::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("returned 'scale' of fc1 ("));
    EXPECT_THAT(error.what(), HasSubstr("which is neither a parameter nor a registered buffer"));
  }
}

TEST_F(TorchLayerTest, TheSelectorMayStreamSeveralTensorsPerModule) {
  // Weight and bias of every Linear, and the norms' parameters.
  Selector everything_frozen = [](const ModulePtr& block) {
    std::vector<StreamedTensor> picked;
    for (const auto& item : block->named_modules("", false)) {
      for (const auto& param : item.value()->named_parameters(false)) {
        if (!param.value().requires_grad())
          picked.push_back({item.key(), item.value(), param.key()});
      }
    }
    return picked;
  };
  const std::vector<blockswap_lora::Block> resident = blockswap_lora::MakeStack(SmallStack());
  const Trained expected = Train(resident, nullptr);
  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(SmallStack());
  BlockSwapConfig config = Config(3, 2);
  config.selector = everything_frozen;
  StreamOffloader offloader(blockswap_lora::Modules(blocks), config);
  const uint32_t streamed_block = offloader.streaming_blocks().front();
  const Trained got = Train(blocks, &offloader);
  EXPECT_EQ(got.losses, expected.losses);
  // Between passes, a streamed bias points into the ring or at its master,
  // never at memory of its own.
  offloader.PrepareBlockDevicesBeforeForward();
  const auto* bias = static_cast<const char*>(blocks[streamed_block]->fc2->base->bias.data_ptr());
  const auto* slot = static_cast<const char*>(offloader.slot_data(0));
  EXPECT_TRUE(bias >= slot && bias < slot + offloader.slot_bytes());
}

TEST_F(TorchLayerTest, OffloadedActivationsTrainIdentically) {
  BlockSwapConfig config = Config(3, 2);
  config.offload_activations = true;
  const Trained got = TrainThrough(config);
  const Trained expected = Train(blockswap_lora::MakeStack(SmallStack()), nullptr);
  ASSERT_NO_FATAL_FAILURE(ExpectSameTraining(got, expected));
}

// --- models the daemon already holds (BlockSwapConfig.model_file / model_id)

// The suite's stack's frozen base as a safetensors file (the layout
// blockswap-torch-demo --write-model gives), once per process.
std::string BaseFile(const testing::ScratchDirs& dirs) {
  const std::string path = dirs.temp_dir() + "/base.safetensors";
  if (!std::ifstream(path).good()) {
    blockswap_lora::WriteBaseSafetensors(path, blockswap_lora::MakeStack(SmallStack()));
  }
  return path;
}

blockswap_lora::StackOptions MetaStack() {
  blockswap_lora::StackOptions options = SmallStack();
  options.meta_weights = true;
  return options;
}

class FileModelTest : public TorchLayerTest {
 protected:
  BlockSwapConfig FileConfig(uint32_t swap, uint32_t ring) {
    BlockSwapConfig config = Config(swap, ring);
    config.model_file = BaseFile(*dirs_);
    config.model_select = "\\.weight$";
    config.model_select_rank = 2;
    return config;
  }
  // The message of the c10::Error an offloader over `blocks` throws.
  std::string Refusal(const std::vector<blockswap_lora::Block>& blocks, BlockSwapConfig config) {
    try {
      StreamOffloader offloader(blockswap_lora::Modules(blocks), std::move(config));
    } catch (const c10::Error& error) {
      return error.what_without_backtrace();
    }
    return "(accepted)";
  }
};

class FileModelTrainingTest : public FileModelTest,
                              public ::testing::WithParamInterface<SwapCase> {};

TEST_P(FileModelTrainingTest, MetaWeightsBoundToTheFileTrainLikeTheWholeModel) {
  const SwapCase c = GetParam();
  const Trained expected = Train(blockswap_lora::MakeStack(SmallStack()), nullptr);

  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(MetaStack());
  for (const blockswap_lora::Block& block : blocks) {
    for (const StreamedTensor& t : LinearWeights(block.ptr())) {
      ASSERT_TRUE(t.module->named_parameters(false)[t.name].is_meta()) << t.path;
    }
  }
  StreamOffloader offloader(blockswap_lora::Modules(blocks), FileConfig(c.swap, c.ring));
  // Streaming blocks point at the daemon's masters, resident ones hold a
  // device copy (the file's model has every block).
  for (uint32_t b = 0; b < blocks.size(); ++b) {
    for (const StreamedTensor& t : LinearWeights(blocks[b].ptr())) {
      const at::Tensor w = t.module->named_parameters(false)[t.name];
      EXPECT_FALSE(w.is_meta()) << "block " << b << " " << t.path;
      EXPECT_TRUE(w.is_cpu()) << "block " << b << " " << t.path;
    }
  }
  EXPECT_EQ(offloader.streaming_blocks().size(), std::min<uint32_t>(c.swap, 6));
  AddressCheck check(&offloader);
  const Trained got = Train(blocks, &offloader, &check);
  ASSERT_NO_FATAL_FAILURE(ExpectSameTraining(got, expected));
  EXPECT_THAT(check.failures, ::testing::IsEmpty());
  EXPECT_EQ(check.forward_checks, kSteps * 6);
  EXPECT_GT(got.forward.front().loads, 0u);

  // Another trainer opens the same model by id, again from meta tensors.
  const std::vector<blockswap_lora::Block> again = blockswap_lora::MakeStack(MetaStack());
  BlockSwapConfig by_id = Config(c.swap, c.ring);
  by_id.model_id = offloader.model_id();
  StreamOffloader second(blockswap_lora::Modules(again), by_id);
  EXPECT_EQ(second.model_id(), offloader.model_id());
  EXPECT_EQ(Train(again, &second).losses, expected.losses);
}

INSTANTIATE_TEST_SUITE_P(SwapAndRing, FileModelTrainingTest,
                         ::testing::Values(SwapCase{3, 2}, SwapCase{6, 2}),
                         [](const ::testing::TestParamInfo<SwapCase>& info) {
                           return "S" + std::to_string(info.param.swap) + "_B" +
                                  std::to_string(info.param.ring);
                         });

TEST_F(FileModelTest, AMismatchingLayoutIsRefusedNamingTheBlockAndTensor) {
  {
    const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(MetaStack());
    blocks[2]->fc1->base->weight.set_data(at::empty({5, 32}, at::TensorOptions(at::kMeta)));
    const std::string error = Refusal(blocks, FileConfig(3, 2));
    EXPECT_THAT(error, HasSubstr("block 2: model "));
    EXPECT_THAT(error, HasSubstr("tensor 'fc1.base.weight': the model has shape [128,32], "
                                 "the module [5,32]"));
  }
  {
    const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(MetaStack());
    blocks[4]->proj->base->weight.set_data(
        at::empty({32, 32}, at::TensorOptions(at::kMeta).dtype(at::kHalf)));
    EXPECT_THAT(Refusal(blocks, FileConfig(6, 2)),
                HasSubstr("tensor 'proj.base.weight': the model has dtype F32, the module F16"));
  }
  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(MetaStack());
  {
    // The selector names a tensor the file's blocks lack (biases are extras here).
    BlockSwapConfig config = FileConfig(3, 2);
    config.selector = [](const ModulePtr& block) {
      std::vector<StreamedTensor> picked = LinearWeights(block);
      picked.push_back({"qkv.base", picked.front().module, "bias"});
      return picked;
    };
    EXPECT_THAT(Refusal(blocks, config),
                HasSubstr("the selector streams 'qkv.base.bias', which the model's block does "
                          "not have (it has 'qkv.base.weight', 'proj.base.weight', "
                          "'fc1.base.weight', 'fc2.base.weight')"));
  }
  {
    // The file's blocks hold more than the selector streams.
    BlockSwapConfig config = FileConfig(3, 2);
    config.selector = [](const ModulePtr& block) {
      std::vector<StreamedTensor> picked = LinearWeights(block);
      picked.pop_back();
      return picked;
    };
    EXPECT_THAT(Refusal(blocks, config),
                HasSubstr("has tensor 'fc2.base.weight' that the selector does not stream"));
  }
  {
    // Four blocks against the file's six.
    const std::vector<blockswap_lora::Block> four(blocks.begin(), blocks.begin() + 4);
    EXPECT_THAT(Refusal(four, FileConfig(2, 2)),
                HasSubstr("has 6 blocks; the offloader has 4 blocks of which 2 stream"));
  }
  // Meta tensors with no model to bind them to.
  EXPECT_THAT(Refusal(blocks, Config(3, 2)),
              HasSubstr("tensor 'qkv.base.weight' is a meta tensor (never materialised): set "
                        "BlockSwapConfig.model_id or model_file"));
}

TEST_F(FileModelTest, TheDemoTrainsFromAFileHoldingNoneOfTheWeightsThatPackingHolds) {
  // 16 blocks of width 640: 300 MiB of streamed weights, all streaming
  // through 2 slots. The same trainer runs twice side by side: once packing
  // its own weights, once from a file the daemon reads. What each grew by
  // beyond its own start is compared, so LibTorch's run-time memory (which
  // differs by CPU and LibTorch build) cancels out.
  const std::string demo = testing::BinaryDirectory() + "/blockswap-torch-demo";
  const std::string file = dirs_->temp_dir() + "/demo.safetensors";
  const std::vector<std::string> size = {"--blocks", "16", "--dim",  "640",
                                         "--heads",  "4",  "--seed", "3"};
  const std::vector<std::string> training = {"--socket", dirs_->socket_path(),
                                             "--device", "cpu",
                                             "--swap",   "16",
                                             "--ring",   "2",
                                             "--steps",  "2",
                                             "--batch",  "1",
                                             "--seq",    "8"};
  struct Memory {
    unsigned long long peak = 0, start = 0, streamed = 0;
    unsigned long long growth() const { return peak - std::min(peak, start); }
  };
  // Runs the demo; returns its output, or an empty string with a failure.
  auto run = [&](std::vector<std::string> args, const std::string& name) -> std::string {
    args.insert(args.end(), size.begin(), size.end());
    const std::string log = dirs_->temp_dir() + "/" + name + ".log";
    UniqueFd out(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    auto child = testing::ChildProcess::SpawnProgram(
        demo, testing::SpawnOptions{.args = args, .inherit = {{out.get(), 1}, {out.get(), 2}}});
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return "";
    auto status = child->Wait(absl::Seconds(120));
    std::stringstream text;
    text << std::ifstream(log).rdbuf();
    EXPECT_TRUE(status.ok() && *status == 0) << name << ": " << text.str();
    if (!status.ok() || *status != 0) return "";
    return text.str();
  };
  auto memory_of = [](const std::string& output, Memory* memory) {
    const size_t at = output.find("memory: peak");
    return at != std::string::npos &&
           std::sscanf(output.c_str() + at, "memory: peak %llu start %llu streamed %llu",
                       &memory->peak, &memory->start, &memory->streamed) == 3;
  };
  ASSERT_NE(run({"--write-model", file}, "write"), "");
  std::vector<std::string> packing_args = training;
  packing_args.push_back("--no-resident-check");
  const std::string packing = run(packing_args, "packing");
  std::vector<std::string> file_args = training;
  file_args.insert(file_args.end(), {"--model", file});
  const std::string from_file = run(file_args, "file");
  ASSERT_NE(packing, "");
  ASSERT_NE(from_file, "");

  Memory packed, streamed_from_file;
  ASSERT_TRUE(memory_of(packing, &packed)) << packing;
  ASSERT_TRUE(memory_of(from_file, &streamed_from_file)) << from_file;
  unsigned long long loads = 0;
  const size_t at = from_file.find("demo ok:");
  ASSERT_NE(at, std::string::npos) << from_file;
  ASSERT_EQ(std::sscanf(from_file.c_str() + at, "demo ok: %*s loads %llu from file model", &loads),
            1)
      << from_file;
  EXPECT_GT(loads, 0u);
  const unsigned long long streamed = 16ull * 12 * 640 * 640 * 4;
  EXPECT_EQ(packed.streamed, streamed);
  EXPECT_EQ(streamed_from_file.streamed, streamed);
  EXPECT_GT(streamed_from_file.start, 0u);
  // The packing run holds the weights twice (its own tensors, and the
  // staging area it fills for the daemon); the file run holds neither, only
  // two ring slots (2 x 18.75 MiB) beside what both runs hold alike. A file
  // run that materialised the weights once would close the gap to about one
  // copy; 1.25 copies leave a quarter copy (75 MiB) of noise either way.
  EXPECT_GT(packed.growth(), streamed_from_file.growth() + streamed + streamed / 4)
      << "packing grew by " << packed.growth() << " bytes, the file model by "
      << streamed_from_file.growth() << " (streamed " << streamed << ")\n"
      << packing << "\n"
      << from_file;
}

TEST(TorchContainersTest, NestedContainersMoveEveryTensorAndKeepTheRest) {
  // The meta device stands in for an accelerator: a move is visible without one.
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  dict.insert("scale", ::torch::ones({2}));
  c10::List<at::Tensor> list({::torch::zeros({1}), ::torch::zeros({3})});
  const c10::IValue nested = c10::ivalue::Tuple::create(
      {c10::IValue(::torch::ones({4})), c10::IValue(list), c10::IValue(dict), c10::IValue(7)});
  const c10::IValue moved = ToDevice(nested, c10::Device(c10::kMeta));
  const auto& elements = moved.toTupleRef().elements();
  ASSERT_EQ(elements.size(), 4u);
  EXPECT_TRUE(elements[0].toTensor().is_meta());
  const c10::List<at::Tensor> moved_list = elements[1].toTensorList();
  ASSERT_EQ(moved_list.size(), 2u);
  EXPECT_TRUE(moved_list.get(1).is_meta());
  EXPECT_EQ(moved_list.get(1).sizes(), at::IntArrayRef({3}));
  EXPECT_TRUE(elements[2].toGenericDict().at("scale").toTensor().is_meta());
  EXPECT_EQ(elements[3].toInt(), 7);
  EXPECT_TRUE(ToCpu(nested).toTupleRef().elements()[0].toTensor().is_cpu());

  std::vector<bool> inputs_on_meta;
  BlockFnList wrapped = CpuOffloadingWrapper(
      [&inputs_on_meta](const std::vector<at::Tensor>& inputs) {
        for (const at::Tensor& t : inputs) inputs_on_meta.push_back(t.is_meta());
        return std::vector<at::Tensor>{::torch::ones(inputs[0].sizes())};
      },
      c10::Device(c10::kMeta));
  const std::vector<at::Tensor> out = wrapped({::torch::ones({2, 2}), ::torch::ones({1})});
  EXPECT_EQ(inputs_on_meta, std::vector<bool>({true, true}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].is_cpu());
}

TEST_F(TorchLayerTest, IdenticalContentIsOneModel) {
  const std::vector<blockswap_lora::Block> first = blockswap_lora::MakeStack(SmallStack());
  const std::vector<blockswap_lora::Block> second = blockswap_lora::MakeStack(SmallStack());
  blockswap_lora::StackOptions other = SmallStack();
  other.seed = 12;
  const std::vector<blockswap_lora::Block> third = blockswap_lora::MakeStack(other);
  StreamOffloader a(blockswap_lora::Modules(first), Config(3, 2));
  StreamOffloader b(blockswap_lora::Modules(second), Config(3, 2));
  StreamOffloader c(blockswap_lora::Modules(third), Config(3, 2));
  EXPECT_EQ(a.model_id().size(), 64u);
  EXPECT_EQ(a.model_id(), b.model_id());
  EXPECT_NE(a.model_id(), c.model_id());
}

TEST_F(TorchLayerTest, NothingStreamsWithoutBlocksToSwap) {
  const std::vector<blockswap_lora::Block> resident = blockswap_lora::MakeStack(SmallStack());
  const Trained expected = Train(resident, nullptr);
  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(SmallStack());
  StreamOffloader offloader(blockswap_lora::Modules(blocks), Config(0, 2));
  EXPECT_TRUE(offloader.streaming_blocks().empty());
  EXPECT_EQ(offloader.model_id(), "");
  EXPECT_EQ(Train(blocks, &offloader).losses, expected.losses);
}

TEST_F(TorchLayerTest, UseUnderCudaGraphCaptureIsRefused) {
#if BLOCKSWAP_TORCH_CUDA
  if (!::torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device: graph capture needs one (runs on GPU machines)";
  }
  // The daemon of this suite serves the host backend; capture is checked
  // before any daemon is contacted.
  c10::cuda::CUDAStream capture = c10::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(capture);
  ASSERT_EQ(cudaStreamBeginCapture(capture.stream(), cudaStreamCaptureModeRelaxed), cudaSuccess);
  const std::vector<blockswap_lora::Block> blocks = blockswap_lora::MakeStack(SmallStack());
  BlockSwapConfig config = Config(3, 2);
  config.device = c10::Device(c10::kCUDA, 0);
  try {
    StreamOffloader offloader(blockswap_lora::Modules(blocks), config);
    ADD_FAILURE() << "an offloader was created under graph capture";
  } catch (const c10::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("during CUDA graph capture"));
  }
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(capture.stream(), &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
#else
  GTEST_SKIP() << "this torch has no CUDA";
#endif
}

}  // namespace
}  // namespace blockswap::torch
