// A model read from a file, written block by block before its id is known.
#ifndef BLOCKSWAP_DAEMON_STORE_MASTER_DRAFT_H_
#define BLOCKSWAP_DAEMON_STORE_MASTER_DRAFT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/store/block_master.h"
#include "daemon/store/model.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

class ModelStore;

// The block files of a model being written whose id is not known yet (a
// model read from a file: the ids need the hashes of the bytes). Created by
// ModelStore::BeginDraft, which has checked the room and reserved the budget
// for every block; the writer writes each block's bytes with Write (pwrite:
// the tmpfs pages are allocated by the copy itself, never zeroed first),
// hashes them, then hands the draft to CommitDraft, which keeps the blocks
// the store does not hold yet (reserving whatever is still a hole, padding)
// and drops the others. Destroying an uncommitted draft removes its
// temporary files and returns the reservation, so a failed registration
// leaves nothing behind. Thread-safe for writes to different ranges.
class MasterDraft {
 public:
  ~MasterDraft();
  MasterDraft(const MasterDraft&) = delete;
  MasterDraft& operator=(const MasterDraft&) = delete;

  const ModelLayout& layout() const;
  // Writes `bytes` at `offset` of block b (pwrite into its block file,
  // opened for the write: a draft of any size keeps no descriptor). A full
  // tmpfs is RESOURCE_EXHAUSTED here (a write, never a SIGBUS).
  absl::Status Write(size_t b, uint64_t offset, const void* data, size_t bytes) const;

 private:
  friend class ModelStore;
  MasterDraft() = default;

  ModelStore* store_ = nullptr;
  std::unique_ptr<Model> model_;
  // One per block, in block order: its file under its temporary name.
  std::vector<std::unique_ptr<BlockMaster>> blocks_;
  std::vector<std::string> temp_names_;  // "" once renamed or removed
  uint64_t reserved_ = 0;         // bytes of the store's budget held until commit or destruction
  uint64_t reserved_blocks_ = 0;  // and blocks of max_blocks
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MASTER_DRAFT_H_
