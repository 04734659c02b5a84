// Synthetic blocks for the protocol peers and the GPU test clients: block b's
// size and content follow from (seed, b), so a producer and a consumer in
// different processes agree on every byte without exchanging the data. Sizes
// differ per block (and tails are not word-aligned) to catch length bugs.
#ifndef BLOCKSWAP_TESTS_SUPPORT_BLOCK_CONTENT_H_
#define BLOCKSWAP_TESTS_SUPPORT_BLOCK_CONTENT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace blockswap::testing {

// Between max_bytes / 2 and max_bytes.
inline size_t BlockBytes(uint64_t max_bytes, uint32_t block) {
  return static_cast<size_t>(max_bytes - (block * 4099ull) % (max_bytes / 2));
}

inline std::vector<std::byte> BlockContent(uint64_t seed, uint64_t max_bytes, uint32_t block) {
  std::vector<std::byte> bytes(BlockBytes(max_bytes, block));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + block + 1;  // xorshift64 from (seed, block)
  for (size_t i = 0; i < bytes.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(bytes.data() + i, &x, std::min<size_t>(8, bytes.size() - i));
  }
  return bytes;
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_BLOCK_CONTENT_H_
