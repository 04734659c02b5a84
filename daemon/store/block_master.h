// The master of one block: the sealed file <block id>.block in the masters
// directory, mapped and pinned (or staged: MasterPinning) by the daemon,
// shared by every model that names the block (ModelStore keeps them).
#ifndef BLOCKSWAP_DAEMON_STORE_BLOCK_MASTER_H_
#define BLOCKSWAP_DAEMON_STORE_BLOCK_MASTER_H_

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

// Immutable once sealed; thread-safe. Owns the file's descriptor, its
// read-write shared mapping (for pinning), its residency and its charge to the
// node's memory budget, released in reverse order of acquisition.
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

  // A NEW read-only descriptor of the block file for a client: a new open
  // file description (through /proc/self/fd), so it cannot be mapped
  // writable or turned writable with fcntl.
  absl::StatusOr<UniqueFd> OpenReadOnly() const;

 private:
  friend class ModelStore;
  friend class MasterDraft;
  BlockMaster() = default;

  std::string id_;
  uint64_t bytes_ = 0;
  // Declared in the order they are acquired, so that they are released in
  // reverse: unpin, unmap, close, and only then return the budget's charge.
  Reservation memory_;
  UniqueFd fd_;
  Mapping mapping_;
  MasterResidency residency_;  // pinned or staged (neither without a pin device)
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_BLOCK_MASTER_H_
