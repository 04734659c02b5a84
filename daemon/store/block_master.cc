#include "daemon/store/block_master.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/store/block_placement.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

uint64_t BlockFileBytes(uint64_t block_bytes) {
  return std::max(RoundUp(block_bytes, kBlockPlacementAlignment), kBlockPlacementAlignment);
}

BlockMaster::~BlockMaster() = default;

absl::StatusOr<UniqueFd> BlockMaster::OpenReadOnly() const {
  auto fd = fd_.ReopenReadOnly();
  if (!fd.ok()) return Annotate(fd.status(), absl::StrCat("master of block ", id_));
  return fd;
}

}  // namespace blockswap::daemon
