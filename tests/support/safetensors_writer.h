// Writes safetensors files for tests, the fuzzer's seed corpus and the
// benchmark: a header built with the same JSON library the parser uses (so a
// test can also write headers the parser must refuse) and deterministic
// pseudo-random tensor bytes.
#ifndef BLOCKSWAP_TESTS_SUPPORT_SAFETENSORS_WRITER_H_
#define BLOCKSWAP_TESTS_SUPPORT_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blockswap::testing {

struct WriterTensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
};

// The bytes the writer gives tensor `name`: `bytes` pseudo-random bytes that
// depend only on the name and `seed`.
std::string TensorContent(absl::string_view name, uint64_t bytes, uint64_t seed);

// The JSON header of `tensors`, laid out back to back in the given order
// (data_offsets from TensorBytes), plus `metadata` when not empty.
absl::StatusOr<std::string> SafetensorsHeaderJson(const std::vector<WriterTensor>& tensors,
                                                  const std::string& metadata_json = "");

// A whole file: 8-byte length, `header` padded with spaces to a multiple of 8
// (as the safetensors library does), then the tensors' TensorContent.
absl::StatusOr<std::string> SafetensorsFileBytes(const std::vector<WriterTensor>& tensors,
                                                 uint64_t seed);
// The same bytes for an arbitrary header and data section (bad-input tests).
std::string SafetensorsFileBytesRaw(absl::string_view header, absl::string_view data);

// Streams the file to `path` (any size: tensors are written a chunk at a
// time). Mode 0644.
absl::Status WriteSafetensorsFile(const std::string& path,
                                  const std::vector<WriterTensor>& tensors, uint64_t seed);
absl::Status WriteFileBytes(const std::string& path, absl::string_view bytes);

// A transformer-like model: `blocks` blocks named "transformer_blocks.<b>."
// with `per_block` F32 tensors "<b>.attn.w<i>.weight" of [rows, 64] plus a
// bias each ("...bias", [rows]), and two extras outside every block
// ("embed.weight" BF16 [rows, 64], "norm_out.scale" F16 scalar).
std::vector<WriterTensor> TransformerTensors(int blocks, int per_block, uint64_t rows);

// `count` one-byte tensors (U8 [1]) "layers.<b>.experts.<e>.weight",
// `per_block` of them in each block b: the header of a checkpoint with very
// many tensors (a mixture of experts) and almost no data.
std::vector<WriterTensor> ManyTinyTensors(size_t count, size_t per_block);

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_SAFETENSORS_WRITER_H_
