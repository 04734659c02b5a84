#include "daemon/store/block_table.h"

#include <utility>

#include "absl/strings/string_view.h"

namespace blockswap::daemon {

bool BlockTable::Busy(const std::vector<std::string>& ids) const {
  for (const std::string& block_id : ids) {
    if (!held_.contains(block_id) && in_progress_.contains(block_id)) return true;
  }
  return false;
}

BlockClaim BlockTable::Claim(const std::vector<std::string>& ids,
                             const std::vector<uint64_t>& bytes) {
  BlockClaim claim;
  claim.held.resize(ids.size());
  std::set<absl::string_view> seen;
  for (size_t b = 0; b < ids.size(); ++b) {
    const bool first = seen.insert(ids[b]).second;
    if (auto it = held_.find(ids[b]); it != held_.end()) {
      claim.held[b] = it->second.master;
      if (first) {
        ++it->second.claims;
        claim.held_ids.push_back(ids[b]);
      }
    } else if (first) {
      in_progress_.insert(ids[b]);
      claim.claimed.push_back(ids[b]);
      claim.claimed_positions.push_back(b);
      claim.missing_bytes += BlockFileBytes(bytes[b]);
    }
  }
  return claim;
}

std::vector<std::string> BlockTable::EndClaim(const BlockClaim& claim, bool published) {
  for (const std::string& block_id : claim.claimed) in_progress_.erase(block_id);
  std::vector<std::string> gone;
  for (const std::string& block_id : claim.held_ids) {
    if (published) ++held_.at(block_id).models;
    if (Release(block_id, &HeldBlock::claims)) gone.push_back(block_id);
  }
  return gone;
}

void BlockTable::AddWritten(std::shared_ptr<const BlockMaster> master) {
  bytes_ += master->file_bytes();
  const std::string block_id = master->id();
  held_[block_id] = HeldBlock{.master = std::move(master), .models = 1, .claims = 0};
}

void BlockTable::AddNamed(const std::shared_ptr<const BlockMaster>& master) {
  auto [it, inserted] = held_.try_emplace(master->id());
  if (inserted) {
    it->second.master = master;
    bytes_ += master->file_bytes();
  }
  ++it->second.models;
}

bool BlockTable::ReleaseNamed(const std::string& block_id) {
  return Release(block_id, &HeldBlock::models);
}

bool BlockTable::Release(const std::string& block_id, uint64_t HeldBlock::*count) {
  auto it = held_.find(block_id);
  if (it == held_.end()) return false;
  --(it->second.*count);
  if (it->second.models != 0 || it->second.claims != 0) return false;
  bytes_ -= it->second.master->file_bytes();
  held_.erase(it);  // unpins and unmaps once no Model holds it
  return true;
}

std::shared_ptr<const BlockMaster> BlockTable::Find(const std::string& block_id) const {
  auto it = held_.find(block_id);
  return it == held_.end() ? nullptr : it->second.master;
}

void BlockTable::Reserve(uint64_t bytes, uint64_t blocks) {
  reserved_bytes_ += bytes;
  reserved_blocks_ += blocks;
}

void BlockTable::Unreserve(uint64_t bytes, uint64_t blocks) {
  reserved_bytes_ -= bytes;
  reserved_blocks_ -= blocks;
}

BlockTotals BlockTable::FreeableBeside(const std::set<const BlockMaster*>& kept) const {
  BlockTotals freeable;
  for (const auto& [id, held] : held_) {
    if (held.claims != 0 || held.models == 0 || kept.contains(held.master.get())) continue;
    freeable.bytes += held.master->file_bytes();
    ++freeable.blocks;
  }
  return freeable;
}

BlockTotals BlockTable::Staged() const {
  BlockTotals staged;
  for (const auto& [id, held] : held_) {
    if (!held.master->staged()) continue;
    staged.bytes += held.master->file_bytes();
    ++staged.blocks;
  }
  return staged;
}

std::vector<std::string> BlockTable::ids() const {
  std::vector<std::string> ids;
  ids.reserve(held_.size());
  for (const auto& [id, held] : held_) ids.push_back(id);
  return ids;
}

}  // namespace blockswap::daemon
