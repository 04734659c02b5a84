#include "shared/base/safetensors_header.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "shared/base/cancellation.h"
#include "tests/support/safetensors_writer.h"

namespace blockswap {
namespace {

using ::testing::HasSubstr;
using testing::SafetensorsFileBytes;
using testing::SafetensorsFileBytesRaw;

absl::StatusOr<SafetensorsHeader> Parse(const std::string& file) {
  return ParseSafetensorsPrefix(file, file.size());
}

// The message of a refused file (INVALID_ARGUMENT expected).
std::string Refusal(const std::string& file) {
  auto parsed = Parse(file);
  EXPECT_FALSE(parsed.ok());
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  return std::string(parsed.status().message());
}

TEST(SafetensorsHeaderTest, ParsesEveryDtypeInFileOrder) {
  const char* dtypes[] = {"F64",     "F32",         "F16",         "BF16", "F8_E4M3", "F8_E5M2",
                          "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4",   "F6_E2M3", "F6_E3M2",
                          "I64",     "I32",         "I16",         "I8",   "U64",     "U32",
                          "U16",     "U8",          "C64",         "BOOL"};
  std::vector<testing::WriterTensor> tensors;
  for (const char* dtype : dtypes) tensors.push_back({std::string("t_") + dtype, dtype, {3, 4}});
  auto file = SafetensorsFileBytes(tensors, 1);
  ASSERT_TRUE(file.ok()) << file.status();
  auto header = Parse(*file);
  ASSERT_TRUE(header.ok()) << header.status();
  ASSERT_EQ(header->tensors.size(), tensors.size());
  uint64_t at = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensor& got = header->tensors[i];
    EXPECT_EQ(got.name, tensors[i].name);
    EXPECT_EQ(got.dtype, tensors[i].dtype);
    EXPECT_EQ(got.shape, tensors[i].shape);
    EXPECT_EQ(got.begin, at);
    at = got.end;
  }
  EXPECT_EQ(header->tensors[9].end - header->tensors[9].begin, 6u);    // F4: 12 x 4 bits
  EXPECT_EQ(header->tensors[10].end - header->tensors[10].begin, 9u);  // F6: 12 x 6 bits
  EXPECT_EQ(header->data_offset + header->data_bytes, file->size());
  EXPECT_EQ(at, header->data_bytes);
}

TEST(SafetensorsHeaderTest, ReadsMetadataAndScalars) {
  auto header = Parse(SafetensorsFileBytesRaw(
      R"({"__metadata__":{"format":"pt"},"s":{"dtype":"F16","shape":[],"data_offsets":[0,2]}})",
      "ab"));
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->metadata.at("format"), "pt");
  ASSERT_EQ(header->tensors.size(), 1u);
  EXPECT_TRUE(header->tensors[0].shape.empty());
}

TEST(SafetensorsHeaderTest, RefusesATruncatedFile) {
  EXPECT_THAT(Refusal(std::string("\x10\0\0", 3)), HasSubstr("too short"));
}

TEST(SafetensorsHeaderTest, RefusesAHeaderLengthPastTheEnd) {
  EXPECT_THAT(Refusal(std::string("\xff\0\0\0\0\0\0\0{}", 10)),
              HasSubstr("header length 255 reaches past the end of the file (10 bytes"));
}

TEST(SafetensorsHeaderTest, RefusesInvalidJson) {
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(R"({"w":{"dtype":)", "")),
              HasSubstr("is not valid JSON"));
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw("[1]", "")), HasSubstr("array, not an object"));
}

TEST(SafetensorsHeaderTest, RefusesOverlappingOffsets) {
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                  R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                  "abcd")),
              HasSubstr("tensor 'b' at [2, 4) overlaps tensor 'a' at [0, 4)"));
}

TEST(SafetensorsHeaderTest, RefusesOutOfRangeOffsetsAndHoles) {
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", "ab")),
              HasSubstr("data_offsets [0, 8] reach past the data section of 2 bytes"));
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", "ab")),
              HasSubstr("bytes [0, 1) of the data section belong to no tensor"));
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "ab")),
              HasSubstr("has 2 bytes but its tensors cover 1"));
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}})", "ab")),
              HasSubstr("end before they begin"));
}

TEST(SafetensorsHeaderTest, RefusesAnUnknownDtype) {
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,2]}})", "ab")),
              HasSubstr("tensor 'w': unknown dtype 'F12'"));
}

TEST(SafetensorsHeaderTest, RefusesShapeTimesDtypeNotMatchingTheBytes) {
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd")),
              HasSubstr("tensor 'w': F32 [2] is 8 bytes but data_offsets [0, 4] hold 4"));
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", "a")),
              HasSubstr("12 bits, not a whole number of bytes"));
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "a")),
              HasSubstr("dimension 0 is number '-1', not an unsigned integer"));
}

TEST(SafetensorsHeaderTest, RefusesDuplicateNames) {
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                  R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                  "ab")),
              HasSubstr("names tensor 'w' twice"));
}

TEST(SafetensorsHeaderTest, RefusesNonUtf8AndNulNames) {
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  "{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "a")),
              HasSubstr("must be valid UTF-8"));
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w\u0000":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "a")),
              HasSubstr("contains a NUL byte"));
}

TEST(SafetensorsHeaderTest, RefusesMalformedEntries) {
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(R"({"w":{"dtype":"U8","shape":[1]}})", "")),
              HasSubstr("tensor 'w' lacks data_offsets"));
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(
                  R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", "a")),
              HasSubstr("unknown field 'x'"));
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(R"({"__metadata__":{"a":1}})", "")),
              HasSubstr("__metadata__ entry 'a' is number, not a string"));
}

TEST(SafetensorsHeaderTest, RefusesAHeaderLengthOverTheLimitBeforeReadingIt) {
  const uint64_t length = kSafetensorsMaxHeaderBytes + 1;
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(length >> (8 * i));
  auto bytes = SafetensorsHeaderBytes(prefix, uint64_t{1} << 30);
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(std::string(bytes.status().message()),
              HasSubstr("header length 104857601 exceeds the limit of 104857600 bytes"));
}

// The limit is reached by a header of exactly kSafetensorsMaxTensors tensors
// and broken, by name, by one more.
TEST(SafetensorsHeaderTest, TakesAsManyTensorsAsTheLimitAndRefusesOneMore) {
  static_assert(kSafetensorsMaxTensors >= 200000, "real checkpoints have tens of thousands");
  auto header =
      testing::SafetensorsHeaderJson(testing::ManyTinyTensors(kSafetensorsMaxTensors, 100));
  ASSERT_TRUE(header.ok()) << header.status();
  const uint64_t data_bytes = kSafetensorsMaxTensors;  // one byte each
  auto parsed = ParseSafetensorsHeader(*header, 8 + header->size() + data_bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tensors.size(), kSafetensorsMaxTensors);

  const std::string one_more =
      absl::StrCat(header->substr(0, header->size() - 1),
                   R"(,"one.more":{"dtype":"U8","shape":[1],"data_offsets":[)", data_bytes, ",",
                   data_bytes + 1, "]}}");
  auto refused = ParseSafetensorsHeader(one_more, 8 + one_more.size() + data_bytes + 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("names more than 262144 tensors (the limit)"));
}

TEST(SafetensorsHeaderTest, ACancellationEndsTheParseWithItsStatus) {
  auto file = SafetensorsFileBytes(testing::ManyTinyTensors(20000, 100), 1);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string header = file->substr(8, file->size() - 8 - 20000);
  int asked = 0;
  Cancellation wanted([&] {
    ++asked;
    return absl::OkStatus();
  });
  ASSERT_TRUE(ParseSafetensorsHeader(header, file->size(), wanted).ok());
  EXPECT_GT(asked, 0) << "a parse of 20,000 tensors never asked whether it was still wanted";

  int asked_before_leaving = 0;
  Cancellation left([&] {
    return ++asked_before_leaving < 2 ? absl::OkStatus() : absl::CancelledError("the client left");
  });
  auto parsed = ParseSafetensorsHeader(header, file->size(), left);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status(), absl::CancelledError("the client left"));
  EXPECT_EQ(asked_before_leaving, 2) << "the parse went on after its cancellation";
}

// No tensor's entry nests deeper than two levels; a value nested a million
// deep is refused before it is built, not formatted into a message.
TEST(SafetensorsHeaderTest, RefusesAnEntryNestedDeeperThanAnyTensors) {
  constexpr int kDepth = 1000000;
  const std::string header = absl::StrCat(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":)",
                                          std::string(kDepth, '['), std::string(kDepth, ']'), "}}");
  EXPECT_THAT(Refusal(SafetensorsFileBytesRaw(header, "a")),
              HasSubstr("tensor 'w' nests deeper than 8 levels"));
}

}  // namespace
}  // namespace blockswap
