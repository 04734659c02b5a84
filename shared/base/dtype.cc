#include "shared/base/dtype.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {

struct DtypeInfo {
  absl::string_view name;
  uint32_t bits;
};

// The dtypes of the safetensors format (safetensors' Dtype enum).
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 8},        {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
    {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
    {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16},    {"BF16", 16},
    {"I32", 32},        {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},
    {"I64", 64},        {"U64", 64},
};

}  // namespace

absl::StatusOr<uint32_t> DtypeBits(absl::string_view dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == dtype) return info.bits;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype ", Quoted(dtype), " (not a safetensors dtype)"));
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
