// Where the blocks of a model sit in a flat area (a staging area or a master
// file): aligned offsets, and in a master file never across a pinned piece.
#ifndef BLOCKSWAP_DAEMON_STORE_BLOCK_PLACEMENT_H_
#define BLOCKSWAP_DAEMON_STORE_BLOCK_PLACEMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "shared/backend/backend.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

// Blocks of a staging area or a master file start at multiples of this.
inline constexpr uint64_t kBlockPlacementAlignment = 4096;
// The backend's pinning piece, the one place it is defined.
inline constexpr uint64_t kPinPieceBytes = kHostPinPieceBytes;

// Where each block of a model sits in a flat area.
struct BlockPlacement {
  std::vector<uint64_t> offsets;  // one per block
  uint64_t total_bytes = 0;       // size of the area (the last block's end, rounded up)
};

// A staging area: blocks back to back, each at a kBlockPlacementAlignment-
// aligned offset. INVALID_ARGUMENT for a layout that would overflow (any
// layout that passed ValidateLayout fits).
absl::StatusOr<BlockPlacement> StagingOffsets(const ModelLayout& layout);

// A master file: as StagingOffsets, and a block that would straddle a multiple
// of kPinPieceBytes starts at that multiple instead. INVALID_ARGUMENT for a
// block larger than kPinPieceBytes (no pinned piece could hold it).
absl::StatusOr<BlockPlacement> MasterOffsets(const ModelLayout& layout);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_BLOCK_PLACEMENT_H_
