// A registration's parts: the blocks its client says the daemon holds, its
// result, and, once its content's hashes are known, what it claims of the
// held blocks, the room it reserved and how its new blocks are written (from
// an upload's staging area, or a draft's files).
#ifndef BLOCKSWAP_DAEMON_STORE_PENDING_REGISTRATION_H_
#define BLOCKSWAP_DAEMON_STORE_PENDING_REGISTRATION_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/store/block_master.h"
#include "daemon/store/block_table.h"
#include "daemon/store/model.h"
#include "daemon/store/uid_holds.h"

namespace blockswap::daemon {

// Blocks of a registration the daemon holds already (ModelStore::Register):
// per position of the layout, the master (null: the block is uploaded) and
// the SHA-256 of the block's bytes (read only where the master is set).
struct KnownBlocks {
  std::vector<std::shared_ptr<const BlockMaster>> masters;
  std::vector<Sha256Digest> hashes;
};

struct RegisterResult {
  std::shared_ptr<const Model> model;
  // The same content was registered before (or by a concurrent call that
  // this one waited for): nothing was copied.
  bool already_present = false;
};

// A registration of a model whose layout and block hashes are known, from
// its claim to its publication (Register for an upload, CommitDraft).
struct PendingRegistration {
  std::string id;
  uid_t uid = 0;                 // its one registrant's: charged every distinct block
  std::vector<std::string> ids;  // the block id of each position
  std::vector<uint64_t> bytes;   // the bytes of each position's block
  std::vector<BlockRef> refs;    // its distinct blocks
  BlockClaim claim;
  // Of the blocks' reservation, returned when it ends (an upload's; a
  // draft holds its own reservation).
  uint64_t reserved = 0;
  uint64_t reserved_blocks = 0;
};

// A new block's file under its temporary name, filled.
struct WrittenBlock {
  std::unique_ptr<BlockMaster> master;
  std::string temp;
};
// Fills the file of block `block_id` at position b of a model.
using BlockWriter =
    std::function<absl::StatusOr<WrittenBlock>(size_t b, const std::string& block_id)>;

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_PENDING_REGISTRATION_H_
