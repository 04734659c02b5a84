// The master of one block: the sealed file <block id>.block in the masters
// directory, mapped and pinned (or staged: MasterPinning) by the daemon,
// shared by every model that names the block (ModelStore keeps them).
#ifndef BLOCKSWAP_DAEMON_STORE_BLOCK_MASTER_H_
#define BLOCKSWAP_DAEMON_STORE_BLOCK_MASTER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/budget/memory_budget.h"
#include "daemon/store/master_pinning.h"
#include "shared/backend/backend.h"
#include "shared/base/unique_fd.h"
#include "shared/os/shared_memory.h"

namespace blockswap::daemon {

// The size of the file that holds a block of `block_bytes`: whole pages, at
// least one (a mapping is never empty).
uint64_t BlockFileBytes(uint64_t block_bytes);

// What one block costs the node besides its file's pages: its inode and
// dentry on the tmpfs, the daemon's mapping of it (a VMA and its page
// tables) and the store's records, rounded up to a page. Charged to
// max_memory_bytes with every master, so that a flood of tiny blocks is
// paid for like one of large blocks.
inline constexpr uint64_t kBlockOverheadBytes = 4096;

// Immutable once sealed; thread-safe. Owns the file's read-write shared
// mapping (for pinning), its residency and its charge to the node's memory
// budget, released in reverse order of acquisition. A sealed master keeps no
// descriptor: the daemon's descriptors stay bounded however many blocks it
// holds, and a client's descriptor is opened by name when it opens a model.
class BlockMaster {
 public:
  BlockMaster(const BlockMaster&) = delete;
  BlockMaster& operator=(const BlockMaster&) = delete;
  ~BlockMaster();

  const std::string& id() const { return id_; }  // BlockId of its layout and bytes
  uint64_t bytes() const { return bytes_; }      // the block's bytes
  uint64_t file_bytes() const { return BlockFileBytes(bytes_); }
  const std::byte* data() const { return static_cast<const std::byte*>(mapping_.data()); }
  // Pinned: a load is one DMA from the master. Staged: a load is copied
  // through the device worker's pinned staging buffers. Neither in a store
  // without a pin device (in-process tests).
  bool pinned() const { return residency_.pinned(); }
  bool staged() const { return residency_.staged(); }

  // A NEW read-only descriptor of the block file for a client, opened by
  // name in the masters directory and checked to be this master's inode
  // (mode 0400, the daemon's): a read-only open file description, so it
  // cannot be mapped writable or turned writable with fcntl, and the 0400
  // mode refuses a writable reopen through /proc/PID/fd to anyone but root.
  // Block files are not memfds: F_SEAL_FUTURE_WRITE does not apply to them.
  absl::StatusOr<UniqueFd> OpenReadOnly() const;

 private:
  friend class ModelStore;
  friend class MasterDraft;
  friend class MasterFiles;
  BlockMaster() = default;

  std::string id_;
  uint64_t bytes_ = 0;
  // Declared in the order they are acquired, so that they are released in
  // reverse: unpin, unmap, close, and only then return the budget's charge.
  Reservation memory_;
  // Open only while the block is written and sealed; closed once sealed.
  UniqueFd fd_;
  Mapping mapping_;
  MasterResidency residency_;  // pinned or staged (neither without a pin device)
  // The masters directory (shared with the store: a master may outlive it)
  // and the sealed file's identity, for OpenReadOnly.
  std::shared_ptr<const UniqueFd> directory_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_BLOCK_MASTER_H_
