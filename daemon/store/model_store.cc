// ModelStore: opening the store, the models and counts it reports, Verify.
// The rest of its implementation: model_store_adoption.cc (Open's
// adoption), model_store_registration.cc (registering, coalescing concurrent
// registrations of one id), model_store_claims.cc (claims ended, uids
// charged), model_store_registrants.cc (registrants recorded and removed,
// pinning), model_store_capacity.cc (checks and eviction), master_draft.cc.
#include "daemon/store/model_store.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/store/model_store_internal.h"
#include "daemon/store/parallel_for.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

BlockMasters DistinctBlocks(const BlockMasters& blocks) {
  BlockMasters distinct;
  std::set<absl::string_view> seen;
  for (const auto& block : blocks) {
    if (seen.insert(block->id()).second) distinct.push_back(block);
  }
  return distinct;
}

std::vector<BlockRef> BlockRefs(const BlockMasters& blocks) {
  std::vector<BlockRef> refs;
  for (const auto& block : DistinctBlocks(blocks)) refs.push_back({block->id(), block->file_bytes()});
  return refs;
}

uint64_t DistinctFileBytes(const BlockMasters& blocks) {
  uint64_t bytes = 0;
  for (const auto& block : DistinctBlocks(blocks)) bytes += block->file_bytes();
  return bytes;
}

ModelStore::ModelStore(ModelStoreOptions options, Device* pin_device,
                       std::unique_ptr<MasterFiles> files)
    : options_(std::move(options)),
      pin_device_(pin_device),
      files_(std::move(files)),
      room_(MasterRoomLimits{.pinning = options_.pinning,
                             .max_pinned_bytes = options_.max_pinned_bytes,
                             .memory_budget = options_.memory_budget,
                             .max_blocks = options_.max_blocks,
                             .totals_withheld = options_.totals_withheld},
            files_.get()),
      pinning_(options_.pinning, options_.max_pinned_bytes, pin_device) {}

ModelStore::~ModelStore() = default;

// Creates `options.directory` (mode 0700) or checks the existing one (a
// directory, not a link, owned by geteuid(), no group/other permission),
// locks it against a second daemon, adopts every sealed model that passes
// its checks (owner, modes, sizes, a layout that validates, the id
// recomputed from layout and block hashes, each block id from its block)
// and removes every other entry, saying so in the log. While a manifest of an unknown version is
// present only temporary files are removed: it and its files stay, not
// counted. Adopted blocks are pinned or staged (Pin) on `pin_device`
// (nullptr: neither) and count once each; under "always" a model whose
// blocks do not fit max_pinned_bytes is removed.
absl::StatusOr<std::unique_ptr<ModelStore>> ModelStore::Open(ModelStoreOptions options,
                                                             Device* pin_device) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<MasterFiles> files,
                             MasterFiles::Open(options.directory));
  std::unique_ptr<ModelStore> store(
      new ModelStore(std::move(options), pin_device, std::move(files)));
  BLOCKSWAP_RETURN_IF_ERROR(store->AdoptAll());
  return store;
}

std::shared_ptr<const Model> ModelStore::Find(absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(id);
  if (it == models_.end()) return nullptr;
  TouchLocked(it->first);
  return it->second;
}

std::vector<std::shared_ptr<const Model>> ModelStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const Model>> models;
  models.reserve(models_.size());
  for (const auto& [id, model] : models_) models.push_back(model);
  return models;
}

uint64_t ModelStore::masters_bytes() const {
  absl::MutexLock lock(&mu_);
  return blocks_.bytes();
}

uint64_t ModelStore::pinned_bytes() const { return pinning_.pinned_bytes(); }

BlockTotals ModelStore::staged_blocks() const {
  absl::MutexLock lock(&mu_);
  return blocks_.Staged();
}

size_t ModelStore::block_count() const {
  absl::MutexLock lock(&mu_);
  return blocks_.size();
}

std::vector<uint64_t> ModelStore::SharedBytes(
    const std::vector<std::shared_ptr<const Model>>& models) {
  std::map<absl::string_view, uint64_t> naming;  // by block id: the models of `models` naming it
  for (const auto& model : models) {
    for (const auto& block : DistinctBlocks(model->blocks_)) ++naming[block->id()];
  }
  std::vector<uint64_t> shared;
  shared.reserve(models.size());
  for (const auto& model : models) {
    uint64_t bytes = 0;
    for (const auto& block : DistinctBlocks(model->blocks_)) {
      if (naming[block->id()] > 1) bytes += block->file_bytes();
    }
    shared.push_back(bytes);
  }
  return shared;
}

uint64_t ModelStore::uid_blocks(uid_t uid) const {
  absl::MutexLock lock(&mu_);
  return uid_holds_.blocks(uid);
}

uint64_t ModelStore::uid_bytes(uid_t uid) const {
  absl::MutexLock lock(&mu_);
  return uid_holds_.bytes(uid);
}

ModelStoreStats ModelStore::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

uint64_t ModelStore::References(const std::shared_ptr<const Model>& model) {
  long count = model.use_count();
  return count > 1 ? static_cast<uint64_t>(count - 1) : 0;
}

void ModelStore::TouchLocked(const std::string& id) const { eviction_order_.Touch(id); }

absl::Status NoSuchModelError(absl::string_view id) {
  return absl::NotFoundError(absl::StrCat("no model ", id.substr(0, 80), " in this blockswapd"));
}

absl::StatusOr<VerifyResult> ModelStore::Verify(absl::string_view id,
                                                const Cancellation& cancellation) const {
  std::shared_ptr<const Model> model = Find(id);
  if (model == nullptr) return NoSuchModelError(id);
  std::vector<char> bad(model->block_count(), 0);
  BLOCKSWAP_RETURN_IF_ERROR(ParallelFor(model->block_count(), [&](size_t b) {
    BLOCKSWAP_RETURN_IF_ERROR(cancellation.Check());
    bad[b] = Sha256Of(model->block(b), model->block_bytes(b)) != model->block_hashes()[b];
    return absl::OkStatus();
  }));
  std::string listed;
  for (size_t b = 0; b < bad.size(); ++b) {
    if (bad[b]) absl::StrAppend(&listed, listed.empty() ? "" : ", ", b);
  }
  if (!listed.empty()) {
    return absl::DataLossError(absl::StrCat("model ", model->id(), ": block(s) ", listed, " of ",
                                            bad.size(), " no longer match their hashes"));
  }
  VerifyResult result;
  result.blocks = model->block_count();
  for (size_t b = 0; b < model->block_count(); ++b) result.bytes += model->block_bytes(b);
  return result;
}

}  // namespace blockswap::daemon
