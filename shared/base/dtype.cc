#include "shared/base/dtype.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {

struct DtypeInfo {
  absl::string_view name;
  uint32_t bits;
  absl::string_view torch;  // the PyTorch dtype ("torch.<torch>"); empty: none
};

// The dtypes of the safetensors format (safetensors' Dtype enum).
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 8, "bool"},
    {"F4", 4, ""},
    {"F6_E2M3", 6, ""},
    {"F6_E3M2", 6, ""},
    {"U8", 8, "uint8"},
    {"I8", 8, "int8"},
    {"F8_E5M2", 8, "float8_e5m2"},
    {"F8_E4M3", 8, "float8_e4m3fn"},
    {"F8_E8M0", 8, "float8_e8m0fnu"},
    {"F8_E4M3FNUZ", 8, "float8_e4m3fnuz"},
    {"F8_E5M2FNUZ", 8, "float8_e5m2fnuz"},
    {"I16", 16, "int16"},
    {"U16", 16, "uint16"},
    {"F16", 16, "float16"},
    {"BF16", 16, "bfloat16"},
    {"I32", 32, "int32"},
    {"U32", 32, "uint32"},
    {"F32", 32, "float32"},
    {"C64", 64, "complex64"},
    {"F64", 64, "float64"},
    {"I64", 64, "int64"},
    {"U64", 64, "uint64"},
};

}  // namespace

absl::StatusOr<uint32_t> DtypeBits(absl::string_view dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == dtype) return info.bits;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype ", Quoted(dtype), " (not a safetensors dtype)"));
}

absl::StatusOr<absl::string_view> DtypeOfTorch(absl::string_view torch_name) {
  std::string streamable;
  for (const DtypeInfo& info : kDtypes) {
    if (info.torch.empty()) continue;
    if (info.torch == torch_name) return info.name;
    absl::StrAppend(&streamable, streamable.empty() ? "" : ", ", info.torch);
  }
  return absl::InvalidArgumentError(absl::StrCat("dtype ", Quoted(torch_name),
                                                 " has no safetensors dtype (blockswap streams ",
                                                 streamable, ")"));
}

absl::StatusOr<uint64_t> TensorBytes(absl::string_view dtype, absl::Span<const uint64_t> shape) {
  BLOCKSWAP_ASSIGN_OR_RETURN(uint32_t bits, DtypeBits(dtype));
  // An empty dimension makes an empty tensor even where the other dimensions'
  // product would overflow.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  uint64_t elements = 1;
  for (uint64_t dim : shape) {
    if (__builtin_mul_overflow(elements, dim, &elements)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", FormatShape(shape), " has more than 2^64 elements"));
    }
  }
  uint64_t total_bits;
  if (__builtin_mul_overflow(elements, uint64_t{bits}, &total_bits)) {
    return absl::InvalidArgumentError(absl::StrCat(dtype, " ", FormatShape(shape), " has ",
                                                   elements, " elements of ", bits,
                                                   " bits: more than 2^64 bits"));
  }
  if (total_bits % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dtype, " ", FormatShape(shape), " has ", elements, " elements of ", bits,
                     " bits = ", total_bits, " bits, not a whole number of bytes"));
  }
  return total_bits / 8;
}

}  // namespace blockswap
