#include "daemon/store/block_placement.h"

#include "absl/strings/str_cat.h"
#include "shared/os/shared_memory.h"

namespace blockswap::daemon {
namespace {

// Bounds placement arithmetic far below 2^64 (ValidateLayout caps a model at
// 2^46 bytes; padding adds at most one piece per block).
constexpr uint64_t kMaxAreaBytes = uint64_t{1} << 62;

absl::StatusOr<BlockPlacement> Place(const ModelLayout& layout, bool avoid_piece_boundaries) {
  BlockPlacement placement;
  placement.offsets.reserve(layout.blocks.size());
  uint64_t end = 0;
  for (size_t b = 0; b < layout.blocks.size(); ++b) {
    uint64_t bytes = layout.blocks[b].bytes;
    if (bytes > kMaxAreaBytes || end > kMaxAreaBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "block ", b, " of ", bytes, " bytes at offset ", end, " does not fit in 2^62 bytes"));
    }
    if (avoid_piece_boundaries && bytes > kPinPieceBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("block ", b, " has ", bytes, " bytes, more than the ", kPinPieceBytes,
                       " bytes of one pinned piece (a block copy must stay inside one)"));
    }
    uint64_t offset = RoundUp(end, kBlockPlacementAlignment);
    if (avoid_piece_boundaries && bytes > 0 &&
        offset / kPinPieceBytes != (offset + bytes - 1) / kPinPieceBytes) {
      offset = RoundUp(offset, kPinPieceBytes);
    }
    placement.offsets.push_back(offset);
    end = offset + bytes;
  }
  placement.total_bytes = RoundUp(end, kBlockPlacementAlignment);
  return placement;
}

}  // namespace

absl::StatusOr<BlockPlacement> StagingOffsets(const ModelLayout& layout) {
  return Place(layout, /*avoid_piece_boundaries=*/false);
}

absl::StatusOr<BlockPlacement> MasterOffsets(const ModelLayout& layout) {
  return Place(layout, /*avoid_piece_boundaries=*/true);
}

}  // namespace blockswap::daemon
