// One sealed model of the store: its layout, the hashes of its blocks and
// their masters, and who registered it.
#ifndef BLOCKSWAP_DAEMON_STORE_MODEL_H_
#define BLOCKSWAP_DAEMON_STORE_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/store/block_master.h"
#include "daemon/store/registrants.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

// One sealed model: immutable, shared by every session that opened it as
// std::shared_ptr<const Model>; thread-safe. Holds the masters of its blocks
// (shared with every other model naming the same blocks). The device they
// were pinned on must outlive it.
class Model {
 public:
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model();

  const std::string& id() const { return id_; }
  const std::string& name() const { return name_; }  // informational
  // Where the content came from first: "upload", or "file <path>[, <path>...]"
  // (the daemon's view of the registered descriptors). Informational; the
  // manifests written before registrants were recorded have only this.
  const std::string& source() const { return source_; }
  // Every registration of this content (ModelStore::AddRegistrant).
  const Registrants& registrants() const { return registrants_; }
  const ModelLayout& layout() const { return layout_; }
  const std::vector<Sha256Digest>& block_hashes() const { return block_hashes_; }
  size_t block_count() const { return layout_.blocks.size(); }
  // The master bytes of block `b` (block_bytes(b) of them), in the daemon's
  // mapping; nullptr / 0 for a block out of range.
  const std::byte* block(size_t b) const;
  uint64_t block_bytes(size_t b) const;
  // The master of block `b` (one per position; positions with equal blocks
  // share one). Never null for b < block_count().
  const std::shared_ptr<const BlockMaster>& block_master(size_t b) const { return blocks_[b]; }
  // Bytes of the distinct block files it names (each counted once).
  uint64_t masters_bytes() const { return masters_bytes_; }
  // Whether every block is pinned, and the positions whose block is staged
  // (BlockMaster::pinned, staged).
  bool pinned() const;
  size_t staged_blocks() const;

 private:
  friend class ModelStore;
  friend class MasterDraft;
  Model() = default;

  std::string id_;
  std::string name_;
  std::string source_ = "upload";
  ModelLayout layout_;
  std::vector<Sha256Digest> block_hashes_;
  std::vector<std::shared_ptr<const BlockMaster>> blocks_;
  uint64_t masters_bytes_ = 0;
  // Grows while the model is shared (the store persists each change first):
  // the one part of a sealed model that is not immutable.
  mutable Registrants registrants_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MODEL_H_
