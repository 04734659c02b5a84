// libFuzzer target for the safetensors header parser (shared/
// safetensors_header.h): the input is the start of a file whose size is the
// input's size. Links blockswap_base only (no gRPC, no protobuf).
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "shared/base/safetensors_header.h"
#include "shared/base/safetensors_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto header = blockswap::ParseSafetensorsPrefix(bytes, size);
  if (header.ok()) {
    // What the parser promises about an accepted header.
    uint64_t covered = 0;
    for (const auto& tensor : header->tensors) {
      if (tensor.begin != covered || tensor.end < tensor.begin ||
          tensor.end > header->data_bytes) {
        __builtin_trap();
      }
      covered = tensor.end;
    }
    if (covered != header->data_bytes || header->data_offset + header->data_bytes != size) {
      __builtin_trap();
    }
  }
  // An index is JSON too: the same bytes exercise its parser.
  (void)blockswap::ParseSafetensorsIndex(bytes);
  return 0;
}
