// The flat block layout of a model and its canonical id (docs/protocol.md, "Objects").
//
// A model is a list of blocks; a block is a list of tensors packed into one
// flat byte buffer, each tensor at a kTensorAlignment-aligned offset, so that
// one copy moves a whole block and any dtype view of a tensor is aligned.
//
// The model id is the lowercase hex SHA-256 of CanonicalLayoutEncoding(layout)
// followed by the raw 32-byte SHA-256 of each block's flat bytes, in block
// order. It depends only on the layout and the bytes, never on where they came
// from: blocks uploaded by a client and the same blocks read from a
// safetensors file (packed with PackBlock, as every reader in this project
// does) have the same id. The daemon always computes the id itself, so no
// client can make an id name different bytes.
//
// Everything here is pure and thread-safe (Sha256 objects are
// thread-compatible). ValidateLayout and LayoutFromProto run on untrusted
// client input: they never crash, allocate in proportion to the input only,
// and overflow-check every size.
#ifndef BLOCKSWAP_SHARED_PROTOCOL_MODEL_LAYOUT_H_
#define BLOCKSWAP_SHARED_PROTOCOL_MODEL_LAYOUT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "blockswap/v1/blockswap.pb.h"
#include "shared/base/dtype.h"

// OpenSSL's digest context, owned by Sha256 (kept out of this header).
struct evp_md_ctx_st;

namespace blockswap {

// Every tensor of a block starts at a multiple of this; a block's size is
// rounded up to it.
inline constexpr uint64_t kTensorAlignment = 256;

struct TensorSpec {
  std::string name;             // relative to the block, e.g. "attn.to_q.weight"
  std::string dtype;            // safetensors spelling, e.g. "BF16"
  std::vector<uint64_t> shape;  // empty for a scalar
  uint64_t offset = 0;          // in the block's flat buffer
  uint64_t length = 0;          // bytes
};

struct BlockSpec {
  std::vector<TensorSpec> tensors;  // in ascending offset order
  uint64_t bytes = 0;               // flat size: the last tensor's end rounded up
};

struct ModelLayout {
  std::vector<BlockSpec> blocks;
};

// Bounds on a layout, so that a hostile request cannot make the daemon
// allocate or hash without limit.
struct LayoutLimits {
  uint64_t max_blocks = uint64_t{1} << 20;
  uint64_t max_tensors_per_block = uint64_t{1} << 16;
  uint64_t max_name_bytes = 1024;
  uint64_t max_rank = 64;                        // dimensions of one tensor
  uint64_t max_total_bytes = uint64_t{1} << 46;  // sum of block sizes
};

// Packs `tensors` (name, dtype and shape set; offset and length ignored) in
// the given order: each at the next kTensorAlignment-aligned offset after the
// previous one's end, with its length from TensorBytes. The block's size is
// the last end rounded up to kTensorAlignment. Refuses an empty list,
// duplicate names and anything ValidateLayout would refuse.
absl::StatusOr<BlockSpec> PackBlock(std::vector<TensorSpec> tensors);

// The bytes PackBlock gives a block of tensors of these `lengths` (in bytes,
// in order): what a ring slot holding the block needs. 0 for no tensors;
// INVALID_ARGUMENT past the model size limit (LayoutLimits).
absl::StatusOr<uint64_t> PackedBlockBytes(absl::Span<const uint64_t> lengths);

// Checks a layout that came from a client: at least one block, within
// `limits`; per block at least one tensor, names non-empty, without NUL,
// valid UTF-8 and unique, known dtypes, length == TensorBytes, offsets
// kTensorAlignment-aligned, tensors in ascending order without overlap, and
// bytes == RoundUp(last end, kTensorAlignment) > 0. The message names the
// block, the tensor and the limit broken.
absl::Status ValidateLayout(const ModelLayout& layout, const LayoutLimits& limits = {});

v1::ModelLayout LayoutToProto(const ModelLayout& layout);
// Converts and validates (ValidateLayout with `limits`).
absl::StatusOr<ModelLayout> LayoutFromProto(const v1::ModelLayout& proto,
                                            const LayoutLimits& limits = {});

// Checks that every byte of `block_data` (block.bytes of them) outside the
// block's tensors is zero. Padding is hashed with the block, so zero padding
// is what makes an upload and a safetensors file of the same tensors one
// model; non-zero padding is refused (INVALID_ARGUMENT naming the offset).
absl::Status CheckBlockPadding(const BlockSpec& block, const void* block_data);

using Sha256Digest = std::array<uint8_t, 32>;

// A streaming SHA-256 (OpenSSL EVP). Move-only; thread-compatible. OpenSSL
// fails here only when memory runs out, which is handled like a failing
// operator new (std::bad_alloc).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&& other) noexcept;
  Sha256& operator=(Sha256&& other) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t bytes);
  void Update(absl::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // The digest of everything passed to Update; the object then starts over.
  Sha256Digest Finish();

 private:
  struct Free {
    void operator()(evp_md_ctx_st* context) const;
  };
  std::unique_ptr<evp_md_ctx_st, Free> context_;
};

Sha256Digest Sha256Of(const void* data, size_t bytes);
// 64 lowercase hex digits.
std::string DigestHex(const Sha256Digest& digest);
// The inverse of DigestHex: exactly 64 lowercase hex digits.
absl::StatusOr<Sha256Digest> DigestFromHex(absl::string_view hex);
// True for exactly 64 lowercase hex digits, the form of every model id.
bool IsModelId(absl::string_view id);

// The bytes the model id covers, for a layout that passed ValidateLayout.
// ASCII lines, each ending in "\n", numbers in decimal without leading zeros:
//   blockswap-model-v1
//   blocks <N>
// then for each block b in order:
//   block <b> bytes <block bytes> tensors <T>
// then for each of its tensors in order:
//   tensor <name length in bytes>:<name> <dtype> <dims> <offset> <length>
// where <dims> is the shape joined by "," (empty for a scalar, so two spaces
// follow the dtype). The name is length-prefixed, so any byte in it (space,
// newline) cannot be mistaken for a separator, and no other field contains a
// space: two layouts have the same encoding only if they are equal.
// Example, one block with an F32 [2,3] tensor "w" and a BF16 scalar "s":
//   "blockswap-model-v1\nblocks 1\nblock 0 bytes 512 tensors 2\n"
//   "tensor 1:w F32 2,3 0 24\ntensor 1:s BF16  256 2\n"
std::string CanonicalLayoutEncoding(const ModelLayout& layout);

// Lowercase hex SHA-256 of CanonicalLayoutEncoding(layout) followed by the 32
// raw bytes of each of `block_hashes` (the SHA-256 of each block's `bytes`
// flat bytes, padding included), in block order. Expects one hash per block.
std::string ModelId(const ModelLayout& layout, absl::Span<const Sha256Digest> block_hashes);

// The id of one block's master, for a block of a layout that passed
// ValidateLayout: lowercase hex SHA-256 of
//   blockswap-block-v1
//   bytes <block bytes> tensors <T>
// then the block's tensor lines as in CanonicalLayoutEncoding, followed by
// the 32 raw bytes of `bytes_hash` (the SHA-256 of the block's flat bytes).
// Two blocks have the same id only if their layout and bytes are equal,
// whichever models (and whichever position in them) they belong to.
std::string BlockId(const BlockSpec& block, const Sha256Digest& bytes_hash);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_PROTOCOL_MODEL_LAYOUT_H_
