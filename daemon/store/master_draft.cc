// MasterDraft, and the store's calls that begin and commit one.
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/store/model_store.h"
#include "daemon/store/model_store_internal.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

MasterDraft::~MasterDraft() {
  blocks_.clear();  // unmaps and closes
  if (store_ == nullptr) return;
  for (const std::string& temp : temp_names_) {
    if (!temp.empty()) store_->files_->RemoveQuietly(temp);
  }
  if (reserved_ != 0 || reserved_blocks_ != 0)
    store_->ReleaseReservation(reserved_, reserved_blocks_);
}

const ModelLayout& MasterDraft::layout() const { return model_->layout_; }

absl::Status MasterDraft::Write(size_t b, uint64_t offset, const void* data, size_t bytes) const {
  return store_->files_->WriteInto(temp_names_[b], offset, data, bytes, absl::StrCat("block ", b));
}

absl::StatusOr<std::unique_ptr<MasterDraft>> ModelStore::BeginDraft(const ModelLayout& layout,
                                                                    absl::string_view name,
                                                                    const Registrant& registrant) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateNewModel(layout, name));
  BLOCKSWAP_RETURN_IF_ERROR(MasterOffsets(layout).status());  // every block fits one pinned piece
  // Pessimistic: blocks the store turns out to hold are dropped at commit.
  uint64_t total = 0;
  for (const BlockSpec& block : layout.blocks) total += BlockFileBytes(block.bytes);
  auto draft = std::unique_ptr<MasterDraft>(new MasterDraft());
  std::vector<Reservation> memory;
  uint64_t number = 0;
  {
    absl::MutexLock lock(&mu_);
    // Nothing goes for a draft that could never commit. The draft is
    // written as it is read, so its room is made now, before its exact checks
    // (CommitDraft).
    BLOCKSWAP_RETURN_IF_ERROR(CheckDeclaredLocked(registrant.uid, total, layout.blocks.size()));
    BLOCKSWAP_RETURN_IF_ERROR(MakeRoomLocked(total, layout.blocks.size(), registrant.uid));
    for (const BlockSpec& block : layout.blocks) {
      BLOCKSWAP_ASSIGN_OR_RETURN(memory.emplace_back(),
                                 room_.Charge(BlockFileBytes(block.bytes), name));
    }
    blocks_.Reserve(total, layout.blocks.size());
    draft->store_ = this;
    draft->reserved_ = total;
    draft->reserved_blocks_ = layout.blocks.size();
    number = next_draft_++;
  }
  draft->model_ = std::unique_ptr<Model>(new Model());
  Model& model = *draft->model_;
  model.name_ = std::string(name);
  model.source_ = registrant.source;
  model.registrants_.Replace({Named(registrant, name)});
  model.layout_ = layout;
  for (size_t b = 0; b < layout.blocks.size(); ++b) {
    draft->temp_names_.push_back(absl::StrCat("draft-", number, "-", b, kBlockSuffix, kTempSuffix));
    BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<BlockMaster> block,
                               files_->CreateBlock("", layout.blocks[b].bytes,
                                                   draft->temp_names_.back(), /*allocate=*/false));
    block->memory_ = std::move(memory[b]);
    draft->blocks_.push_back(std::move(block));
  }
  return draft;
}

absl::StatusOr<RegisterResult> ModelStore::CommitDraft(std::unique_ptr<MasterDraft> draft,
                                                       std::vector<Sha256Digest> hashes) {
  if (hashes.size() != draft->blocks_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(hashes.size(), " block hashes for ", draft->blocks_.size(), " blocks"));
  }
  std::unique_ptr<Model> model = std::move(draft->model_);
  model->block_hashes_ = std::move(hashes);
  PendingRegistration pending = PendingFor(*model);
  std::shared_ptr<const Model> existing;
  {
    absl::MutexLock lock(&mu_);
    BLOCKSWAP_ASSIGN_OR_RETURN(existing, ClaimLocked(pending));
    if (existing == nullptr) HoldClaimLocked(pending);
  }
  // The draft's reservation covers every block it wrote; those the store
  // holds already are dropped with the draft.
  absl::StatusOr<RegisterResult> result =
      existing != nullptr
          ? AddToExisting(std::move(existing), *model)
          : WriteAndPublish(
                std::move(model), std::move(pending),
                [&](size_t b, const std::string& block_id) -> absl::StatusOr<WrittenBlock> {
                  WrittenBlock block{std::move(draft->blocks_[b]),
                                     std::move(draft->temp_names_[b])};
                  draft->temp_names_[b].clear();
                  block.master->id_ = block_id;
                  return block;
                });
  draft.reset();  // outside the lock: it takes it to return its reservation
  return result;
}

}  // namespace blockswap::daemon
