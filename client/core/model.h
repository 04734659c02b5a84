// A model as a client sees it: its id and layout, and read-only mappings of
// the daemon's block masters (the one copy of each distinct block on the
// node).
#ifndef BLOCKSWAP_CLIENT_CORE_MODEL_H_
#define BLOCKSWAP_CLIENT_CORE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/core/connection.h"
#include "client/core/master_view.h"
#include "shared/protocol/model_layout.h"
#include "shared/os/shared_memory.h"

namespace blockswap::client {

// One tensor to upload: its place in the layout and where its bytes are.
struct TensorUpload {
  TensorSpec spec;  // name, dtype, shape (offset/length are computed)
  const void* data = nullptr;
};

// Immutable after creation; thread-safe.
class Model {
 public:
  // Packs `blocks` into the flat layout, uploads them through a staging area
  // and opens the registered model.
  static absl::StatusOr<std::unique_ptr<Model>> Register(
      Connection& connection, absl::string_view name,
      const std::vector<std::vector<TensorUpload>>& blocks);
  // Opens a model registered before (by this or any process).
  static absl::StatusOr<std::unique_ptr<Model>> Open(Connection& connection,
                                                     absl::string_view model_id);

  const std::string& id() const { return id_; }
  const ModelLayout& layout() const { return layout_; }
  uint32_t block_count() const { return static_cast<uint32_t>(layout_.blocks.size()); }
  // The master bytes of a block (read-only).
  const std::byte* master(uint32_t block) const;
  // The view that holds them (null for a block out of range): a copy from it
  // keeps it mapped for as long as the copy may run, whatever happens to
  // this Model meanwhile.
  std::shared_ptr<MasterView> master_view(uint32_t block) const;
  // How the session that opened the model names it in request rings
  // and that session's token.
  uint32_t handle() const { return handle_; }
  const std::string& session_token() const { return session_token_; }

  // The model a daemon reply names (maps its masters read-only).
  static absl::StatusOr<std::unique_ptr<Model>> FromReply(Connection& connection,
                                                          const v1::ModelReply& reply);

 private:
  Model() = default;

  std::string id_;
  ModelLayout layout_;
  // Read-only mappings of the daemon's block masters, one per distinct
  // block, and which one each block position reads.
  std::vector<std::shared_ptr<MasterView>> masters_;
  std::vector<size_t> block_mapping_;
  uint32_t handle_ = 0;
  std::string session_token_;
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_MODEL_H_
