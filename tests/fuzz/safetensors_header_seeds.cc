// Writes the seed corpus of safetensors_header_fuzzer into the directory given
// as the only argument: valid files of every dtype (small data sections), a
// sharded index, and one instance of each kind of bad input the parser
// refuses.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/safetensors_writer.h"

using blockswap::testing::SafetensorsFileBytes;
using blockswap::testing::SafetensorsFileBytesRaw;
using blockswap::testing::TransformerTensors;
using blockswap::testing::WriteFileBytes;
using blockswap::testing::WriterTensor;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  int written = 0;
  bool failed = false;
  auto put = [&](const std::string& name, const std::string& bytes) {
    auto status = WriteFileBytes(absl::StrCat(dir, "/", name), bytes);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      failed = true;
    }
    ++written;
  };
  auto put_file = [&](const std::string& name, const std::vector<WriterTensor>& tensors) {
    auto bytes = SafetensorsFileBytes(tensors, 7);
    if (!bytes.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), bytes.status().ToString().c_str());
      failed = true;
      return;
    }
    put(name, *bytes);
  };
  put_file("transformer", TransformerTensors(3, 2, 2));
  const char* dtypes[] = {"F64",     "F32",         "F16",         "BF16", "F8_E4M3", "F8_E5M2",
                          "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4",   "F6_E2M3", "F6_E3M2",
                          "I64",     "I32",         "I16",         "I8",   "U64",     "U32",
                          "U16",     "U8",          "C64",         "BOOL"};
  for (const char* dtype : dtypes) {
    put_file(absl::StrCat("dtype-", dtype), {{"a", dtype, {2, 4}}, {"s", dtype, {4}}});
  }
  put_file("empty-tensor", {{"z", "F32", {0, 3}}, {"w", "U8", {5}}});
  put("metadata",
      SafetensorsFileBytesRaw(R"({"__metadata__":{"format":"pt"},"w":{"dtype":"U8","shape":[2],)"
                              R"("data_offsets":[0,2]}})",
                              "ab"));
  put("index", R"({"metadata":{"total_size":8},"weight_map":{"a":"m-1.safetensors",)"
               R"("b":"m-2.safetensors"}})");
  // Bad inputs, one of each kind the parser refuses.
  put("truncated", "\x10\0\0\0");
  put("length-past-end", std::string("\xff\xff\0\0\0\0\0\0{}", 10));
  put("invalid-json", SafetensorsFileBytesRaw(R"({"w":{"dtype":)", ""));
  put("not-object", SafetensorsFileBytesRaw("[1,2]", ""));
  put("unknown-dtype",
      SafetensorsFileBytesRaw(R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,2]}})", "ab"));
  put("size-mismatch",
      SafetensorsFileBytesRaw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
                              "abcd"));
  put("overlap", SafetensorsFileBytesRaw(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                         R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                                         "abcd"));
  put("out-of-range",
      SafetensorsFileBytesRaw(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", "ab"));
  put("duplicate", SafetensorsFileBytesRaw(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                           R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                           "ab"));
  put("non-utf8", SafetensorsFileBytesRaw("{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[1],"
                                          "\"data_offsets\":[0,1]}}",
                                          "a"));
  put("negative-dim",
      SafetensorsFileBytesRaw(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "a"));
  put("f4-odd", SafetensorsFileBytesRaw(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})",
                                        "a"));
  std::printf("wrote %d seeds into %s\n", written, dir.c_str());
  return failed ? 1 : 0;
}
