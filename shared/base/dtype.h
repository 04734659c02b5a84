// The element types of the safetensors format, their sizes and the PyTorch
// dtypes they hold: the one table of dtype names (the C ABI's
// bs_dtype_of_torch gives it to the torch layer and Python).
//
// Part of blockswap_safetensors (no gRPC, no protobuf): the header parser,
// its fuzzer and the model layout all use it.
#ifndef BLOCKSWAP_SHARED_BASE_DTYPE_H_
#define BLOCKSWAP_SHARED_BASE_DTYPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace blockswap {

// Bits per element of a safetensors dtype: F64 F32 F16 BF16, F8_E4M3 F8_E5M2
// F8_E8M0 F8_E4M3FNUZ F8_E5M2FNUZ, F6_E2M3 F6_E3M2 (6), F4 (4), I64 I32 I16
// I8, U64 U32 U16 U8, C64 (64), BOOL (8). Spelling is exact (upper case).
// INVALID_ARGUMENT naming any other.
absl::StatusOr<uint32_t> DtypeBits(absl::string_view dtype);

// Bytes of a dense tensor: elements (1 for a scalar) x bits / 8. Sub-byte
// dtypes are packed, so the bit count must be a whole number of bytes (an F4
// tensor needs an even element count); INVALID_ARGUMENT otherwise or on
// overflow.
absl::StatusOr<uint64_t> TensorBytes(absl::string_view dtype, absl::Span<const uint64_t> shape);

// The safetensors dtype of the PyTorch dtype named `torch_name` as Python
// spells it after "torch." ("float32", "bfloat16", "float8_e4m3fn", ...).
// INVALID_ARGUMENT naming it and listing the ones that have a safetensors
// dtype for any other (the sub-byte F4 and F6 dtypes have no torch dtype).
absl::StatusOr<absl::string_view> DtypeOfTorch(absl::string_view torch_name);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_DTYPE_H_
