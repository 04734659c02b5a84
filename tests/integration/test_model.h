// The model the integration tests stream: `blocks` blocks of two tensors
// (an F32 weight and a BF16 bias, sizes varying per block), content derived
// from `seed`, so that clients with the same seed register the same model
// (one model id) without talking to each other. Header-only and free of
// blockswap types, so that the C ABI client program can use it too.
#ifndef BLOCKSWAP_TESTS_INTEGRATION_TEST_MODEL_H_
#define BLOCKSWAP_TESTS_INTEGRATION_TEST_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace blockswap::testing {

inline constexpr int kTensorsPerBlock = 2;
inline constexpr const char* kTensorNames[kTensorsPerBlock] = {"proj.weight", "proj.bias"};
inline constexpr const char* kTensorDtypes[kTensorsPerBlock] = {"F32", "BF16"};
inline constexpr uint64_t kTensorElementBytes[kTensorsPerBlock] = {4, 2};

// data[b * 2 + t] holds tensor t of block b; it has one dimension of
// data.size() / kTensorElementBytes[t] elements.
inline std::vector<std::vector<uint8_t>> ModelTensorData(uint64_t seed, uint32_t blocks,
                                                         uint64_t elements) {
  std::vector<std::vector<uint8_t>> data;
  for (uint32_t b = 0; b < blocks; ++b) {
    for (int t = 0; t < kTensorsPerBlock; ++t) {
      uint64_t count = elements + b * 64 + t * 7;
      std::vector<uint8_t> bytes(count * kTensorElementBytes[t]);
      uint64_t x = seed * 0x9e3779b97f4a7c15ull + b * 131 + t + 1;
      for (uint8_t& byte : bytes) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        byte = static_cast<uint8_t>(x);
      }
      data.push_back(std::move(bytes));
    }
  }
  return data;
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_INTEGRATION_TEST_MODEL_H_
