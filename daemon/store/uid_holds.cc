#include "daemon/store/uid_holds.h"

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {
namespace {

absl::Status Refusal(uid_t uid, absl::string_view what, uint64_t held, uint64_t added,
                     absl::string_view key, uint64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "uid ", uid, " would hold ", held + added, " ", what, " of masters (", held, " held + ",
      added, " of this model), over ", key, " = ", limit,
      " (a block counts for every uid whose models name it); evict models of yours that no "
      "session needs (blockswapctl evict ID) or raise ",
      key));
}

}  // namespace

absl::Status UidHolds::Check(uid_t uid, const std::vector<BlockRef>& blocks,
                             const UidMasterLimits& limits) const {
  if (limits.max_blocks == 0 && limits.max_bytes == 0) return absl::OkStatus();
  const Hold* hold = nullptr;
  if (auto it = holds_.find(uid); it != holds_.end()) hold = &it->second;
  uint64_t new_blocks = 0;
  uint64_t new_bytes = 0;
  for (const BlockRef& block : blocks) {
    if (hold != nullptr && hold->models_naming.contains(block.id)) continue;
    ++new_blocks;
    new_bytes += block.file_bytes;
  }
  return CheckDeclared(uid, new_blocks, new_bytes, limits);
}

absl::Status UidHolds::CheckDeclared(uid_t uid, uint64_t new_blocks, uint64_t new_bytes,
                                     const UidMasterLimits& limits) const {
  const uint64_t held_blocks = blocks(uid);
  const uint64_t held_bytes = bytes(uid);
  if (limits.max_blocks != 0 && held_blocks + new_blocks > limits.max_blocks) {
    return Refusal(uid, "blocks", held_blocks, new_blocks, "max_master_blocks_per_uid",
                   limits.max_blocks);
  }
  if (limits.max_bytes != 0 && held_bytes + new_bytes > limits.max_bytes) {
    return Refusal(uid, "bytes", held_bytes, new_bytes, "max_master_bytes_per_uid",
                   limits.max_bytes);
  }
  return absl::OkStatus();
}

void UidHolds::Add(uid_t uid, const std::vector<BlockRef>& blocks) {
  Hold& hold = holds_[uid];
  for (const BlockRef& block : blocks) {
    if (hold.models_naming[block.id]++ == 0) hold.bytes += block.file_bytes;
  }
}

void UidHolds::Remove(uid_t uid, const std::vector<BlockRef>& blocks) {
  auto it = holds_.find(uid);
  if (it == holds_.end()) return;
  Hold& hold = it->second;
  for (const BlockRef& block : blocks) {
    auto named = hold.models_naming.find(block.id);
    if (named == hold.models_naming.end()) continue;
    if (--named->second == 0) {
      hold.bytes -= block.file_bytes;
      hold.models_naming.erase(named);
    }
  }
  if (hold.models_naming.empty()) holds_.erase(it);
}

uint64_t UidHolds::blocks(uid_t uid) const {
  auto it = holds_.find(uid);
  return it == holds_.end() ? 0 : it->second.models_naming.size();
}

uint64_t UidHolds::bytes(uid_t uid) const {
  auto it = holds_.find(uid);
  return it == holds_.end() ? 0 : it->second.bytes;
}

}  // namespace blockswap::daemon
