#include "shared/protocol/model_layout.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace blockswap {
namespace {

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

TensorSpec Tensor(std::string name, std::string dtype, std::vector<uint64_t> shape) {
  return TensorSpec{.name = std::move(name), .dtype = std::move(dtype), .shape = std::move(shape)};
}

// Two blocks: {w: F32 [2,3], s: BF16 scalar} and {attn.to_q.weight: F4 [4]}.
ModelLayout SmallLayout() {
  ModelLayout layout;
  layout.blocks.push_back(*PackBlock({Tensor("w", "F32", {2, 3}), Tensor("s", "BF16", {})}));
  layout.blocks.push_back(*PackBlock({Tensor("attn.to_q.weight", "F4", {4})}));
  return layout;
}

// Asserts that `status` is INVALID_ARGUMENT and its message contains `text`.
void ExpectInvalid(const absl::Status& status, const std::string& text) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(text), absl::string_view::npos)
      << "message: " << status.message() << "\nexpected to contain: " << text;
}

TEST(LayoutDtype, EverySafetensorsDtypeHasItsWidth) {
  const std::pair<const char*, uint32_t> expected[] = {
      {"F64", 64},    {"F32", 32},    {"F16", 16},        {"BF16", 16},       {"F8_E4M3", 8},
      {"F8_E5M2", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"F6_E2M3", 6},
      {"F6_E3M2", 6}, {"F4", 4},      {"I64", 64},        {"I32", 32},        {"I16", 16},
      {"I8", 8},      {"U64", 64},    {"U32", 32},        {"U16", 16},        {"U8", 8},
      {"C64", 64},    {"BOOL", 8},
  };
  for (const auto& [name, bits] : expected) {
    auto got = DtypeBits(name);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status();
    EXPECT_EQ(*got, bits) << name;
  }
}

TEST(LayoutDtype, UnknownDtypeIsRefusedByName) {
  ExpectInvalid(DtypeBits("F12").status(), "unknown dtype 'F12'");
  ExpectInvalid(DtypeBits("f32").status(), "'f32'");  // spelling is exact
  ExpectInvalid(DtypeBits("").status(), "unknown dtype ''");
}

TEST(LayoutDtype, EachTorchDtypeHasItsSafetensorsName) {
  const std::pair<const char*, const char*> expected[] = {
      {"float32", "F32"},         {"float64", "F64"},         {"float16", "F16"},
      {"bfloat16", "BF16"},       {"float8_e4m3fn", "F8_E4M3"}, {"float8_e5m2", "F8_E5M2"},
      {"float8_e4m3fnuz", "F8_E4M3FNUZ"}, {"float8_e5m2fnuz", "F8_E5M2FNUZ"},
      {"float8_e8m0fnu", "F8_E8M0"}, {"bool", "BOOL"},       {"uint8", "U8"},
      {"int8", "I8"},             {"int16", "I16"},           {"uint16", "U16"},
      {"int32", "I32"},           {"uint32", "U32"},          {"int64", "I64"},
      {"uint64", "U64"},          {"complex64", "C64"},
  };
  for (const auto& [torch, name] : expected) {
    auto got = DtypeOfTorch(torch);
    ASSERT_TRUE(got.ok()) << torch << ": " << got.status();
    EXPECT_EQ(*got, name) << torch;
  }
}

TEST(LayoutDtype, ATorchDtypeWithoutASafetensorsOneIsRefusedByName) {
  ExpectInvalid(DtypeOfTorch("complex128").status(), "dtype 'complex128' has no safetensors dtype");
  ExpectInvalid(DtypeOfTorch("F32").status(), "blockswap streams bool, uint8");
}

TEST(LayoutTensorBytes, CountsElementsTimesWidth) {
  EXPECT_EQ(*TensorBytes("F32", {2, 3}), 24u);
  EXPECT_EQ(*TensorBytes("BF16", {}), 2u);  // a scalar is one element
  EXPECT_EQ(*TensorBytes("C64", {3}), 24u);
  EXPECT_EQ(*TensorBytes("BOOL", {5}), 5u);
  EXPECT_EQ(*TensorBytes("U8", {0, 7}), 0u);
  // An empty dimension wins even where the rest would overflow.
  EXPECT_EQ(*TensorBytes("F64", {uint64_t{1} << 40, uint64_t{1} << 40, 0}), 0u);
}

TEST(LayoutTensorBytes, SubByteDtypesMustFillWholeBytes) {
  EXPECT_EQ(*TensorBytes("F4", {4}), 2u);
  EXPECT_EQ(*TensorBytes("F6_E2M3", {4}), 3u);
  EXPECT_EQ(*TensorBytes("F6_E3M2", {2, 8}), 12u);
  ExpectInvalid(TensorBytes("F4", {3}).status(), "12 bits, not a whole number of bytes");
  ExpectInvalid(TensorBytes("F6_E2M3", {3}).status(), "3 elements of 6 bits = 18 bits");
  ExpectInvalid(TensorBytes("F4", {}).status(), "4 bits");
}

TEST(LayoutTensorBytes, OverflowIsAnError) {
  ExpectInvalid(TensorBytes("U8", {uint64_t{1} << 32, uint64_t{1} << 32}).status(),
                "more than 2^64 elements");
  ExpectInvalid(TensorBytes("U64", {uint64_t{1} << 62}).status(), "more than 2^64 bits");
  ExpectInvalid(TensorBytes("U8", {kMax64, kMax64}).status(), "2^64");
}

TEST(LayoutPackBlock, AlignsEveryTensorTo256Bytes) {
  auto block =
      PackBlock({Tensor("a", "F32", {2, 3}), Tensor("b", "F16", {256}), Tensor("c", "U8", {1}),
                 Tensor("empty", "F32", {0}), Tensor("d", "F8_E4M3", {300})});
  ASSERT_TRUE(block.ok()) << block.status();
  const std::vector<std::pair<uint64_t, uint64_t>> expected = {
      {0, 24}, {256, 512}, {768, 1}, {1024, 0}, {1024, 300}};
  ASSERT_EQ(block->tensors.size(), expected.size());
  for (size_t t = 0; t < expected.size(); ++t) {
    EXPECT_EQ(block->tensors[t].offset, expected[t].first) << t;
    EXPECT_EQ(block->tensors[t].length, expected[t].second) << t;
    EXPECT_EQ(block->tensors[t].offset % kTensorAlignment, 0u);
  }
  EXPECT_EQ(block->bytes, 1536u);  // 1324 rounded up
  EXPECT_TRUE(ValidateLayout(ModelLayout{{*block}}).ok());
}

TEST(LayoutPackBlock, PackedBlockBytesIsThePackedBlocksSize) {
  EXPECT_EQ(PackedBlockBytes({24, 512, 1, 0, 300}).value(), 1536u);  // the block above
  EXPECT_EQ(PackedBlockBytes({256}).value(), 256u);
  EXPECT_EQ(PackedBlockBytes({}).value(), 0u);
  ExpectInvalid(PackedBlockBytes({uint64_t{1} << 50}).status(), "passes the model size limit");
}

TEST(LayoutPackBlock, IgnoresOffsetsAndLengthsPassedIn) {
  TensorSpec tensor = Tensor("a", "U8", {10});
  tensor.offset = 4096;
  tensor.length = 1;
  auto block = PackBlock({tensor});
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_EQ(block->tensors[0].offset, 0u);
  EXPECT_EQ(block->tensors[0].length, 10u);
  EXPECT_EQ(block->bytes, 256u);
}

TEST(LayoutPackBlock, RefusesNoTensorsDuplicatesAndBadTensors) {
  ExpectInvalid(PackBlock({}).status(), "the block has no tensors");
  ExpectInvalid(PackBlock({Tensor("a", "U8", {1}), Tensor("a", "U8", {2})}).status(),
                "tensor 'a' of the block appears twice (tensors 0 and 1)");
  ExpectInvalid(PackBlock({Tensor("q", "INT4", {2})}).status(), "tensor 'q': unknown dtype 'INT4'");
  ExpectInvalid(PackBlock({Tensor("q", "F4", {5})}).status(), "tensor 'q': F4 [5]");
  ExpectInvalid(PackBlock({Tensor("", "U8", {1})}).status(), "empty name");
  ExpectInvalid(PackBlock({Tensor("huge", "U8", {uint64_t{1} << 47})}).status(),
                "model size limit");
  ExpectInvalid(PackBlock({Tensor("empty", "U8", {0})}).status(), "0 bytes");
}

// A valid one-block layout for the validation cases to break.
ModelLayout ValidLayout() {
  ModelLayout layout;
  layout.blocks.push_back(*PackBlock({Tensor("a", "F32", {4}), Tensor("b", "U8", {300})}));
  return layout;
}

TEST(LayoutValidate, AcceptsPackedLayouts) {
  EXPECT_TRUE(ValidateLayout(ValidLayout()).ok());
  EXPECT_TRUE(ValidateLayout(SmallLayout()).ok());
}

TEST(LayoutValidate, AcceptsGapsBetweenTensors) {
  ModelLayout layout = ValidLayout();
  layout.blocks[0].tensors[1].offset = 1024;
  layout.blocks[0].bytes = 1536;
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
}

TEST(LayoutValidate, RefusesEmptyAndOversizedLayouts) {
  ExpectInvalid(ValidateLayout(ModelLayout{}), "layout has no blocks");
  ModelLayout layout = ValidLayout();
  layout.blocks.push_back(layout.blocks[0]);
  layout.blocks.push_back(layout.blocks[0]);
  ExpectInvalid(ValidateLayout(layout, LayoutLimits{.max_blocks = 2}),
                "layout has 3 blocks (limit 2)");
  ExpectInvalid(ValidateLayout(layout, LayoutLimits{.max_tensors_per_block = 1}),
                "block 0 has 2 tensors (limit 1)");
  ExpectInvalid(ValidateLayout(layout, LayoutLimits{.max_total_bytes = 1024}),
                "block 1 of 768 bytes takes the model past the limit of 1024 bytes (768 before "
                "it)");
}

TEST(LayoutValidate, RefusesABlockWithoutTensors) {
  ModelLayout layout = ValidLayout();
  layout.blocks.emplace_back();
  ExpectInvalid(ValidateLayout(layout), "block 1 has no tensors");
}

TEST(LayoutValidate, RefusesBadNames) {
  ModelLayout layout = ValidLayout();
  layout.blocks[0].tensors[1].name = "";
  ExpectInvalid(ValidateLayout(layout), "tensor 1 of block 0 has an empty name");
  layout.blocks[0].tensors[1].name = std::string(1025, 'x');
  ExpectInvalid(ValidateLayout(layout), "name of tensor 1 of block 0 has 1025 bytes (limit 1024)");
  layout.blocks[0].tensors[1].name = std::string("a\0b", 3);
  ExpectInvalid(ValidateLayout(layout), "name of tensor 1 of block 0 contains a NUL byte");
  for (const char* bad :
       {"\xff", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ab\xe2\x82"}) {
    layout.blocks[0].tensors[1].name = bad;
    ExpectInvalid(ValidateLayout(layout), "name of tensor 1 of block 0 is not valid UTF-8");
  }
  layout.blocks[0].tensors[1].name = "caf\xc3\xa9 \xf0\x9f\x98\x80 with space\nand newline";
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
  layout.blocks[0].tensors[1].name = "a";
  ExpectInvalid(ValidateLayout(layout), "tensor 'a' of block 0 appears twice (tensors 0 and 1)");
}

TEST(LayoutValidate, RefusesUnknownDtypesAndHighRanks) {
  ModelLayout layout = ValidLayout();
  layout.blocks[0].tensors[0].dtype = "FP4_E2M1";
  ExpectInvalid(ValidateLayout(layout), "tensor 'a' of block 0: unknown dtype 'FP4_E2M1'");
  layout = ValidLayout();
  layout.blocks[0].tensors[0].shape.assign(65, 1);
  ExpectInvalid(ValidateLayout(layout), "tensor 'a' of block 0 has 65 dimensions (limit 64)");
}

TEST(LayoutValidate, RefusesALengthThatDoesNotMatchTheShape) {
  ModelLayout layout = ValidLayout();
  layout.blocks[0].tensors[0].length = 15;
  ExpectInvalid(ValidateLayout(layout),
                "tensor 'a' of block 0: length 15 does not match F32 [4] (16 bytes)");
  layout = ValidLayout();
  layout.blocks[0].tensors[0].shape = {uint64_t{1} << 40, uint64_t{1} << 40};
  ExpectInvalid(ValidateLayout(layout), "tensor 'a' of block 0: shape");
}

TEST(LayoutValidate, RefusesUnalignedOffsets) {
  ModelLayout layout = ValidLayout();
  layout.blocks[0].tensors[1].offset = 100;
  ExpectInvalid(ValidateLayout(layout),
                "tensor 'b' of block 0: offset 100 is not 256-byte aligned");
}

TEST(LayoutValidate, RefusesOverlappingAndDescendingTensors) {
  ModelLayout layout;
  layout.blocks.push_back(*PackBlock({Tensor("a", "F32", {100}), Tensor("b", "U8", {1})}));
  layout.blocks[0].tensors[1].offset = 256;  // a is [0, 400)
  ExpectInvalid(ValidateLayout(layout),
                "tensor 'b' of block 0: offset 256 overlaps tensor 'a' of block 0, which ends at "
                "400");
  layout = ValidLayout();
  std::swap(layout.blocks[0].tensors[0], layout.blocks[0].tensors[1]);
  ExpectInvalid(ValidateLayout(layout), "tensor 'a' of block 0: offset 0 overlaps tensor 'b'");
}

TEST(LayoutValidate, RefusesBlockBytesThatDoNotMatchTheTensors) {
  ModelLayout layout = ValidLayout();  // b ends at 556
  layout.blocks[0].bytes = 1024;
  ExpectInvalid(ValidateLayout(layout),
                "block 0: bytes 1024 does not match its tensors (the last ends at 556, so 768 "
                "expected)");
  layout.blocks[0].bytes = 556;
  ExpectInvalid(ValidateLayout(layout), "block 0: bytes 556 does not match");
}

TEST(LayoutValidate, RefusesABlockOfZeroBytes) {
  ModelLayout layout;
  layout.blocks.push_back(BlockSpec{.tensors = {Tensor("e", "F32", {0})}, .bytes = 0});
  ExpectInvalid(ValidateLayout(layout), "block 0 has 0 bytes");
}

TEST(LayoutValidate, HugeOffsetsAndLengthsDoNotWrap) {
  ModelLayout layout = ValidLayout();
  layout.blocks[0].tensors[1].offset = kMax64 - 255;  // aligned, near 2^64
  layout.blocks[0].bytes = 0;
  ExpectInvalid(ValidateLayout(layout), "reach past the model size limit of 70368744177664 bytes");
  layout = ValidLayout();
  layout.blocks[0].tensors[1].offset = uint64_t{1} << 46;
  ExpectInvalid(ValidateLayout(layout), "reach past the model size limit");
  layout = ValidLayout();
  layout.blocks[0].tensors[1].shape = {uint64_t{1} << 50};
  layout.blocks[0].tensors[1].length = uint64_t{1} << 50;
  ExpectInvalid(ValidateLayout(layout), "reach past the model size limit");
}

TEST(LayoutValidate, HostileMutationsNeverCrash) {
  // A small in-test fuzzer: random fields from a set of edge values.
  const uint64_t values[] = {0,
                             1,
                             2,
                             3,
                             255,
                             256,
                             257,
                             4096,
                             uint64_t{1} << 32,
                             uint64_t{1} << 46,
                             (uint64_t{1} << 46) + 256,
                             kMax64 - 255,
                             kMax64};
  const char* dtypes[] = {"F32", "F4", "F6_E2M3", "BOOL", "C64", "", "X"};
  std::mt19937_64 rng(7);
  auto pick = [&](auto& array) { return array[rng() % std::size(array)]; };
  for (int i = 0; i < 20000; ++i) {
    ModelLayout layout = SmallLayout();
    for (int m = 0; m < 3; ++m) {
      BlockSpec& block = layout.blocks[rng() % layout.blocks.size()];
      TensorSpec& tensor = block.tensors[rng() % block.tensors.size()];
      switch (rng() % 5) {
        case 0:
          tensor.offset = pick(values);
          break;
        case 1:
          tensor.length = pick(values);
          break;
        case 2:
          tensor.shape.push_back(pick(values));
          break;
        case 3:
          tensor.dtype = pick(dtypes);
          break;
        default:
          block.bytes = pick(values);
          break;
      }
    }
    absl::Status status = ValidateLayout(layout);
    if (status.ok()) {
      // Anything accepted must be internally consistent.
      for (const BlockSpec& block : layout.blocks) {
        for (const TensorSpec& tensor : block.tensors) {
          ASSERT_LE(tensor.offset + tensor.length, block.bytes);
        }
      }
    }
  }
}

TEST(LayoutProto, RoundTripsEveryField) {
  ModelLayout layout = SmallLayout();
  v1::ModelLayout proto = LayoutToProto(layout);
  ASSERT_EQ(proto.blocks_size(), 2);
  EXPECT_EQ(proto.blocks(0).bytes(), 512u);
  EXPECT_EQ(proto.blocks(0).tensors(1).name(), "s");
  EXPECT_EQ(proto.blocks(0).tensors(1).offset(), 256u);
  EXPECT_EQ(proto.blocks(0).tensors(0).shape_size(), 2);
  auto back = LayoutFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(CanonicalLayoutEncoding(*back), CanonicalLayoutEncoding(layout));
}

TEST(LayoutProto, FromProtoValidates) {
  v1::ModelLayout proto = LayoutToProto(SmallLayout());
  proto.mutable_blocks(1)->mutable_tensors(0)->set_offset(8);
  ExpectInvalid(LayoutFromProto(proto).status(),
                "tensor 'attn.to_q.weight' of block 1: offset 8 is not 256-byte aligned");
  ExpectInvalid(LayoutFromProto(v1::ModelLayout()).status(), "layout has no blocks");
  ExpectInvalid(
      LayoutFromProto(LayoutToProto(SmallLayout()), LayoutLimits{.max_blocks = 1}).status(),
      "layout has 2 blocks (limit 1)");
  ExpectInvalid(
      LayoutFromProto(LayoutToProto(SmallLayout()), LayoutLimits{.max_tensors_per_block = 1})
          .status(),
      "block 0 has 2 tensors (limit 1)");
}

TEST(LayoutPadding, OnlyZeroPaddingIsAccepted) {
  BlockSpec block = SmallLayout().blocks[0];  // w [0,24), s [256,258), 512 bytes
  std::vector<uint8_t> bytes(block.bytes, 0);
  std::memset(bytes.data(), 0x5a, 24);
  bytes[256] = bytes[257] = 0xff;
  EXPECT_TRUE(CheckBlockPadding(block, bytes.data()).ok());
  bytes[100] = 1;
  ExpectInvalid(CheckBlockPadding(block, bytes.data()), "padding byte at offset 100 is 0x01");
  bytes[100] = 0;
  bytes[511] = 0x80;
  ExpectInvalid(CheckBlockPadding(block, bytes.data()), "padding byte at offset 511 is 0x80");
}

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(DigestHex(Sha256Of("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(DigestHex(Sha256Of(nullptr, 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, StreamingEqualsOneShotAndFinishStartsOver) {
  std::string text = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  Sha256 hash;
  for (char c : text) hash.Update(&c, 1);
  EXPECT_EQ(hash.Finish(), Sha256Of(text.data(), text.size()));
  EXPECT_EQ(DigestHex(Sha256Of(text.data(), text.size())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  hash.Update("abc");
  EXPECT_EQ(hash.Finish(), Sha256Of("abc", 3));
  Sha256 moved = std::move(hash);
  moved.Update("abc");
  EXPECT_EQ(moved.Finish(), Sha256Of("abc", 3));
}

TEST(Sha256, HexRoundTripsAndRefusesBadDigits) {
  Sha256Digest digest = Sha256Of("abc", 3);
  auto back = DigestFromHex(DigestHex(digest));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, digest);
  ExpectInvalid(DigestFromHex("abc").status(), "not a SHA-256 digest");
  ExpectInvalid(DigestFromHex(std::string(64, 'A')).status(), "64 lowercase hex digits");
  EXPECT_TRUE(IsModelId(std::string(64, 'f')));
  EXPECT_FALSE(IsModelId(std::string(64, 'g')));
  EXPECT_FALSE(IsModelId(std::string(63, '0')));
}

TEST(ModelId, CanonicalEncodingIsExactlyAsDocumented) {
  EXPECT_EQ(CanonicalLayoutEncoding(SmallLayout()),
            "blockswap-model-v1\n"
            "blocks 2\n"
            "block 0 bytes 512 tensors 2\n"
            "tensor 1:w F32 2,3 0 24\n"
            "tensor 1:s BF16  256 2\n"
            "block 1 bytes 256 tensors 1\n"
            "tensor 16:attn.to_q.weight F4 4 0 2\n");
}

// The content of SmallLayout(): w = bytes 0..23, s = 0x3f80 (1.0 in BF16),
// the F4 tensor = ab cd, zero padding.
std::vector<Sha256Digest> SmallLayoutHashes() {
  std::vector<uint8_t> block0(512, 0), block1(256, 0);
  for (int i = 0; i < 24; ++i) block0[i] = static_cast<uint8_t>(i);
  block0[256] = 0x3f;
  block0[257] = 0x80;
  block1[0] = 0xab;
  block1[1] = 0xcd;
  return {Sha256Of(block0.data(), block0.size()), Sha256Of(block1.data(), block1.size())};
}

TEST(ModelId, IsPinnedForAFixedLayoutAndContent) {
  // Computed independently with python3 hashlib over the encoding written out
  // by hand plus the two block digests. If this fails, the id of every model
  // changed: that needs a new encoding version, not a new constant.
  std::vector<Sha256Digest> hashes = SmallLayoutHashes();
  EXPECT_EQ(DigestHex(hashes[0]),
            "db68952c73c9c5180b777ca790053f165d67d3c0cf9c9421b29052d72584e231");
  EXPECT_EQ(DigestHex(hashes[1]),
            "96b16d25f7e78d93bbc667864f898d333e85735dba6884a2259d56efc96c3ac7");
  EXPECT_EQ(ModelId(SmallLayout(), hashes),
            "baf51893d19c51ac424be787a741e5b52f58c590a64555df7ef07206acea3fb5");
}

TEST(ModelId, ChangesWithEveryPartOfTheLayoutAndContent) {
  const std::vector<Sha256Digest> hashes = SmallLayoutHashes();
  const std::string base = ModelId(SmallLayout(), hashes);
  std::vector<ModelLayout> variants(5, SmallLayout());
  variants[0].blocks[0].tensors[0].name = "v";
  variants[1].blocks[0].tensors[1].dtype = "F16";
  variants[2].blocks[0].tensors[0].shape = {3, 2};
  variants[3].blocks[0].tensors[1].offset = 512;
  variants[4].blocks[0].bytes = 768;
  for (const ModelLayout& variant : variants) EXPECT_NE(ModelId(variant, hashes), base);
  std::vector<Sha256Digest> swapped = {hashes[1], hashes[0]};
  EXPECT_NE(ModelId(SmallLayout(), swapped), base);
  // A name cannot absorb the fields after it: "a 1" + "F32" differs from "a"
  // + "1 F32" because the name is length-prefixed.
  ModelLayout tricky = SmallLayout();
  tricky.blocks[0].tensors[0].name = "w F32 2,3 0 24\ntensor 1:w";
  EXPECT_NE(CanonicalLayoutEncoding(tricky), CanonicalLayoutEncoding(SmallLayout()));
}

}  // namespace
}  // namespace blockswap
