// The blocks the store holds, shared by the models that name them: per
// block its master, the sealed models naming it and the registrations in
// progress that will (claims); the blocks being written; and the room those
// registrations have reserved. A block's file goes when no model names it
// and no registration claims it; its mapping and pinning stay until the last
// Model holding its master is destroyed.
#ifndef BLOCKSWAP_DAEMON_STORE_BLOCK_TABLE_H_
#define BLOCKSWAP_DAEMON_STORE_BLOCK_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/store/block_master.h"

namespace blockswap::daemon {

// File bytes of a number of blocks.
struct BlockTotals {
  uint64_t bytes = 0;
  uint64_t blocks = 0;
};

// What a registration needs of the held blocks (BlockTable::Claim).
struct BlockClaim {
  // The held master of each position; null where it must be written.
  std::vector<std::shared_ptr<const BlockMaster>> held;
  std::vector<std::string> claimed;       // distinct ids to write, in first-position order
  std::vector<size_t> claimed_positions;  // the first position of each
  std::vector<std::string> held_ids;      // distinct ids in `held`, each claimed once
  uint64_t missing_bytes = 0;             // file bytes of `claimed`
};

// Not thread-safe: the store's mutex guards it, and the store waits on its
// own condition variable while Busy.
class BlockTable {
 public:
  // Whether a block of `ids` that is not held is being written by a
  // registration: a claim must wait for it (Claim takes all at once, so two
  // registrations never wait for each other).
  bool Busy(const std::vector<std::string>& ids) const;
  // Counts a claim on every held block of `ids` (once per distinct id) and
  // marks the missing ones as being written. `bytes`: each position's block
  // bytes. Requires !Busy(ids).
  BlockClaim Claim(const std::vector<std::string>& ids, const std::vector<uint64_t>& bytes);
  // Ends a claim: the blocks it wrote are no longer in progress, and its
  // claims on held blocks become one more model naming each (`published`)
  // or are dropped. The ids of the blocks whose files must go.
  std::vector<std::string> EndClaim(const BlockClaim& claim, bool published);

  // A block a published registration wrote, named by that one model.
  void AddWritten(std::shared_ptr<const BlockMaster> master);
  // One more model (adopted at Open) naming `master`, held from now if it
  // was not.
  void AddNamed(const std::shared_ptr<const BlockMaster>& master);
  // One model less naming `block_id`: whether its file must go now.
  bool ReleaseNamed(const std::string& block_id);
  // The held master of `block_id`, or null.
  std::shared_ptr<const BlockMaster> Find(const std::string& block_id) const;

  // Room promised to registrations in progress, returned when they end.
  void Reserve(uint64_t bytes, uint64_t blocks);
  void Unreserve(uint64_t bytes, uint64_t blocks);

  // What evicting every model no session holds would free: the blocks named
  // only by such models (`kept`: the masters of the models in use) and
  // claimed by no registration.
  BlockTotals FreeableBeside(const std::set<const BlockMaster*>& kept) const;
  // The held blocks that are staged, and their file bytes.
  BlockTotals Staged() const;

  size_t size() const { return held_.size(); }
  uint64_t bytes() const { return bytes_; }  // file bytes of the held blocks
  // Held and reserved together: what the budgets count.
  BlockTotals committed() const {
    return {.bytes = bytes_ + reserved_bytes_, .blocks = held_.size() + reserved_blocks_};
  }
  std::vector<std::string> ids() const;

 private:
  struct HeldBlock {
    std::shared_ptr<const BlockMaster> master;
    uint64_t models = 0;
    uint64_t claims = 0;
  };
  // Lowers a count of `block_id`: whether its file must go now.
  bool Release(const std::string& block_id, uint64_t HeldBlock::*count);

  std::map<std::string, HeldBlock, std::less<>> held_;
  std::set<std::string, std::less<>> in_progress_;  // claimed, not yet published
  uint64_t bytes_ = 0;
  uint64_t reserved_bytes_ = 0;
  uint64_t reserved_blocks_ = 0;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_BLOCK_TABLE_H_
