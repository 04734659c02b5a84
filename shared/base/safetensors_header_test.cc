#include "shared/base/safetensors_header.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

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

TEST(SafetensorsHeaderTest, ListsTheShardsOfAnIndex) {
  auto shards = ParseSafetensorsIndex(
      R"({"metadata":{},"weight_map":{"a":"m-2.safetensors","b":"m-1.safetensors",)"
      R"("c":"m-2.safetensors"}})");
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(*shards, (std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"}));
  EXPECT_THAT(std::string(ParseSafetensorsIndex(R"({"weight_map":{"a":"../x"}})")
                              .status()
                              .message()),
              HasSubstr("not a plain file name"));
  EXPECT_FALSE(ParseSafetensorsIndex(R"({"metadata":{}})").ok());
}

}  // namespace
}  // namespace blockswap
