// The header of a safetensors file, parsed and checked.
//
// A safetensors file is: 8 bytes, the little-endian length N of a JSON
// header; N bytes of JSON (an object: tensor name -> {"dtype", "shape",
// "data_offsets": [begin, end]}, plus an optional "__metadata__" object of
// strings); then the data section, to the end of the file, in which each
// tensor occupies [begin, end).
//
// Part of blockswap_base (no gRPC, no protobuf): it runs on untrusted input
// in the daemon and under libFuzzer (tests/fuzz/). Every function here is
// pure and thread-safe, never crashes on any input, allocates in proportion
// to the input only, and takes time linear in it: a header is parsed as a
// stream of JSON events, each tensor's entry checked as soon as it ends.
#ifndef BLOCKSWAP_SHARED_BASE_SAFETENSORS_HEADER_H_
#define BLOCKSWAP_SHARED_BASE_SAFETENSORS_HEADER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "shared/base/cancellation.h"

namespace blockswap {

// The length prefix.
inline constexpr uint64_t kSafetensorsPrefixBytes = 8;
// The safetensors library refuses larger headers; so does blockswap.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = uint64_t{100} << 20;
// Tensors in one header. Real checkpoints have up to tens of thousands in a
// file (a mixture of experts: layers x experts x weights and their scales);
// this bounds what one registration makes the daemon hold and work through.
inline constexpr uint64_t kSafetensorsMaxTensors = uint64_t{1} << 18;  // 262,144

struct SafetensorsTensor {
  std::string name;             // as in the file, e.g. "transformer_blocks.3.attn.to_q.weight"
  std::string dtype;            // a known safetensors dtype
  std::vector<uint64_t> shape;  // empty for a scalar
  uint64_t begin = 0;           // [begin, end) in the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // N
  uint64_t data_offset = 0;   // where the data section starts in the file: 8 + N
  uint64_t data_bytes = 0;    // file size - data_offset
  // By ascending begin (ties: the empty tensor first, then by name): the
  // order of the bytes in the file.
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// N from the file's first 8 bytes (`prefix` holds at least those). Checks
// that the file of `file_size` bytes is long enough for the prefix and the
// header and that N is within kSafetensorsMaxHeaderBytes; INVALID_ARGUMENT
// naming the numbers otherwise.
absl::StatusOr<uint64_t> SafetensorsHeaderBytes(absl::string_view prefix, uint64_t file_size);

// Parses the N bytes of JSON `header` of a file of `file_size` bytes. Refuses
// (INVALID_ARGUMENT, naming the tensor and the rule): a header over
// kSafetensorsMaxHeaderBytes (before parsing), invalid JSON (including
// strings that are not UTF-8), anything but an object at the top, more than
// kSafetensorsMaxTensors tensors (at the first one too many), a name that
// appears twice, an empty name or one with a NUL byte, a tensor entry that is
// not {"dtype": string, "shape": [unsigned...], "data_offsets": [begin, end]},
// an unknown dtype, begin > end, end past the data section, end - begin !=
// shape x dtype size, tensors that overlap, and bytes of the data section that
// no tensor covers (the format has no holes). "__metadata__" must be an
// object of strings. The first error found ends the parse.
//
// Asks `cancellation` every few thousand JSON events and returns its error
// when it has one.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view header,
                                                         uint64_t file_size,
                                                         const Cancellation& cancellation = {});

// Both steps on the start of a file: `bytes` holds at least its first
// 8 + N bytes (a whole small file, or what a fuzzer gives).
absl::StatusOr<SafetensorsHeader> ParseSafetensorsPrefix(absl::string_view bytes,
                                                         uint64_t file_size);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_SAFETENSORS_HEADER_H_
