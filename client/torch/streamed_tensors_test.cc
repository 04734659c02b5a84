// A block's streamed tensors without a daemon (streamed_tensors.h): what the
// default selector picks, how a selection is named and refused, what the
// C ABI is told of each tensor, and the rebinding between meta, real data
// and views of a block's bytes.
#include "client/torch/streamed_tensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace blockswap::torch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A block: a Linear `qkv`, a `norm` with a weight, and `inner` (a module
// whose type name ends in "Linear", with a weight and a bfloat16 `scale`
// buffer) holding a Linear `out`.
ModulePtr MakeBlock() {
  auto block = std::make_shared<::torch::nn::Module>("Block");
  block->register_module("qkv", ::torch::nn::Linear(4, 8));
  auto norm = std::make_shared<::torch::nn::Module>("Norm");
  norm->register_parameter("weight", at::ones({4}));
  block->register_module("norm", norm);
  auto inner = std::make_shared<::torch::nn::Module>("LoRALinear");
  inner->register_parameter("weight", at::ones({2, 2}));
  inner->register_buffer("scale", at::ones({3}, at::kBFloat16));
  inner->register_module("out", ::torch::nn::Linear(8, 4));
  block->register_module("inner", inner);
  for (at::Tensor& p : block->parameters()) p.requires_grad_(false);
  return block;
}

// `name` on the module at `path` of `block`.
StreamedTensor Pick(const ModulePtr& block, const std::string& path, const std::string& name) {
  for (const auto& item : block->named_modules("", /*include_self=*/true)) {
    if (item.key() == path) return StreamedTensor{path, item.value(), name};
  }
  ADD_FAILURE() << "no module at " << path;
  return {};
}

// A C ABI offloader of two blocks, for its refusals' messages (contacts no
// daemon).
std::unique_ptr<bs_offloader, decltype(&bs_offloader_destroy)> MakeOffloader() {
  const bs_offloader_config config{.kind = "",
                                   .num_blocks = 2,
                                   .blocks_to_swap = 1,
                                   .ring_size = 1,
                                   .forward_only = 0,
                                   .socket_path = "",
                                   .client_name = "streamed-tensors-test",
                                   .model_id = "",
                                   .model_file = "",
                                   .model_block_pattern = "",
                                   .model_select = "",
                                   .model_select_rank = 0,
                                   .model_name = "test",
                                   .reconnect_timeout_s = 0,
                                   .name_hint = nullptr};
  bs_offloader* created = nullptr;
  EXPECT_EQ(bs_offloader_create(&config, &created), BS_OK) << bs_last_error();
  return {created, &bs_offloader_destroy};
}

// The message with which selecting `select`'s tensors of `block`, block 1
// of an offloader, is refused (a selection accepted fails the test).
std::string SelectionRefusal(const ModulePtr& block, const Selector& select) {
  auto offloader = MakeOffloader();
  try {
    SelectStreamed(offloader.get(), select, block, 1);
  } catch (const c10::Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "the selection was accepted";
  return "";
}

TEST(StreamedTensorsTest, LinearWeightsPicksTheWeightOfEveryLinearAtItsPath) {
  const ModulePtr block = MakeBlock();
  std::vector<std::string> picked;
  for (const StreamedTensor& t : LinearWeights(block)) {
    EXPECT_EQ(t.name, "weight");
    picked.push_back(t.path);
  }
  EXPECT_THAT(picked, ElementsAre("qkv", "inner", "inner.out"));
}

TEST(StreamedTensorsTest, LinearWeightsSkipsALinearWithoutAWeight) {
  auto block = std::make_shared<::torch::nn::Module>("Block");
  block->register_module("adapter", std::make_shared<::torch::nn::Module>("LoRALinear"));
  EXPECT_TRUE(LinearWeights(block).empty());
}

TEST(StreamedTensorsTest, EachSelectedTensorIsTheModulesOwnNamedByItsPath) {
  const ModulePtr block = MakeBlock();
  const Selector select = [](const ModulePtr& b) {
    return std::vector<StreamedTensor>{Pick(b, "inner.out", "weight"), Pick(b, "inner", "scale")};
  };
  const std::vector<Streamed> streamed = SelectStreamed(nullptr, select, block, 1);
  ASSERT_EQ(streamed.size(), 2u);
  EXPECT_EQ(streamed[0].name, "inner.out.weight");
  EXPECT_EQ(streamed[0].dtype_name, "F32");
  EXPECT_THAT(streamed[0].sizes, ElementsAre(4, 8));
  EXPECT_THAT(streamed[0].shape, ElementsAre(4u, 8u));
  EXPECT_EQ(streamed[0].tensor.unsafeGetTensorImpl(),
            block->named_parameters()["inner.out.weight"].unsafeGetTensorImpl());
  EXPECT_EQ(streamed[1].name, "inner.scale");
  EXPECT_EQ(streamed[1].dtype_name, "BF16");
  EXPECT_EQ(streamed[1].dtype, at::kBFloat16);
  EXPECT_EQ(streamed[1].tensor.unsafeGetTensorImpl(),
            block->named_buffers()["inner.scale"].unsafeGetTensorImpl());
}

TEST(StreamedTensorsTest, ANameThatIsNoTensorOfItsModuleIsRefusedNamingTheModule) {
  const std::string message = SelectionRefusal(
      MakeBlock(), [](const ModulePtr& b) { return std::vector{Pick(b, "qkv", "scale")}; });
  EXPECT_THAT(message, HasSubstr("returned 'scale' of qkv ("));
  EXPECT_THAT(message, HasSubstr("of block 1"));
  EXPECT_THAT(message, HasSubstr("neither a parameter nor a registered buffer"));
}

// Names are looked up on the module itself, not below it.
TEST(StreamedTensorsTest, ANameOfASubmodulesTensorIsNoTensorOfTheBlockItself) {
  EXPECT_THAT(
      SelectionRefusal(MakeBlock(),
                       [](const ModulePtr& b) { return std::vector{Pick(b, "", "qkv.weight")}; }),
      HasSubstr("returned 'qkv.weight' of (the block itself) (Block)"));
}

TEST(StreamedTensorsTest, ASelectionWithoutAModuleIsRefused) {
  EXPECT_THAT(SelectionRefusal(MakeBlock(),
                               [](const ModulePtr&) {
                                 return std::vector{StreamedTensor{"gone", nullptr, "weight"}};
                               }),
              HasSubstr("no module for 'gone.weight' in block 1"));
}

TEST(StreamedTensorsTest, DescribeCopiesTheBytesOfMaterialisedTensorsOnly) {
  const at::Tensor real = at::arange(6, at::kFloat).reshape({2, 3}).t();  // not contiguous
  const at::Tensor meta = at::empty({5}, at::TensorOptions().device(at::kMeta));
  const std::vector<Streamed> tensors = {
      Streamed{real, "a.weight", "F32", {3, 2}, {3, 2}, at::kFloat},
      Streamed{meta, "b.weight", "F32", {5}, {5}, at::kFloat}};

  std::vector<at::Tensor> host_copies;
  const std::vector<bs_offloader_tensor> descs = Describe(tensors, true, host_copies);
  ASSERT_EQ(descs.size(), 2u);
  EXPECT_STREQ(descs[0].name, "a.weight");
  EXPECT_STREQ(descs[0].dtype, "F32");
  EXPECT_EQ(descs[0].ndim, 2u);
  EXPECT_EQ(descs[0].shape[0], 3u);
  EXPECT_EQ(descs[0].is_meta, 0);
  ASSERT_NE(descs[0].data, nullptr);
  const float expected[] = {0, 3, 1, 4, 2, 5};  // the transposed values, packed
  EXPECT_EQ(std::memcmp(descs[0].data, expected, sizeof(expected)), 0);
  EXPECT_EQ(descs[1].data, nullptr);
  EXPECT_EQ(descs[1].is_meta, 1);

  std::vector<at::Tensor> none;
  for (const bs_offloader_tensor& desc : Describe(tensors, false, none)) {
    EXPECT_EQ(desc.data, nullptr);
  }
  EXPECT_TRUE(none.empty());
}

TEST(StreamedTensorsTest, DescribeTellsWhichTensorsRequireGrad) {
  const at::Tensor trainable = at::zeros({2}).requires_grad_(true);
  const std::vector<Streamed> tensors = {Streamed{trainable, "w", "F32", {2}, {2}, at::kFloat}};
  std::vector<at::Tensor> none;
  EXPECT_EQ(Describe(tensors, false, none).at(0).requires_grad, 1);
}

TEST(StreamedTensorsTest, AFrozenTensorGoesMetaAndBackInTheSameHandle) {
  const at::Tensor tensor = at::ones({2, 2});
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  ReleaseToMeta(tensor);
  EXPECT_TRUE(tensor.is_meta());
  EXPECT_THAT(tensor.sizes().vec(), ElementsAre(2, 2));
  Rebind(tensor, at::full({2, 2}, 7.0));
  EXPECT_FALSE(tensor.is_meta());
  EXPECT_EQ(tensor.sum().item<float>(), 28);
  EXPECT_EQ(tensor.unsafeGetTensorImpl(), impl);
}

TEST(StreamedTensorsTest, ATensorThatRequiresGradCannotGoMeta) {
  const at::Tensor tensor = at::ones({2}).requires_grad_(true);
  try {
    ReleaseToMeta(tensor);
    ADD_FAILURE() << "a tensor that requires grad went meta";
  } catch (const c10::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("requires grad cannot change between meta and real data"));
  }
  EXPECT_FALSE(tensor.is_meta());
}

TEST(StreamedTensorsTest, AtViewsTheTensorsBytesAtItsOffsetInTheBlock) {
  float block[6] = {0, 1, 2, 3, 4, 5};
  Streamed t{at::Tensor(), "w", "F32", {2}, {2}, at::kFloat};
  t.offset = 2 * sizeof(float);
  const at::Tensor view = t.At(block, c10::Device(c10::kCPU));
  EXPECT_EQ(view.data_ptr(), &block[2]);
  EXPECT_THAT(std::vector<float>(view.data_ptr<float>(), view.data_ptr<float>() + 2),
              ElementsAre(2, 3));
  EXPECT_EQ(view.scalar_type(), at::kFloat);
}

}  // namespace
}  // namespace blockswap::torch
