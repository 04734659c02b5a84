// ModelStore's adoption at Open: the sealed models a daemon left in its
// directory are checked and taken over, manifests of a format it does not
// know left in place, the rest removed.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/runtime/logging.h"
#include "daemon/store/manifest.h"
#include "daemon/store/model_store.h"
#include "daemon/store/model_store_internal.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
// A model of `manifest` (moved from), without its blocks.
std::unique_ptr<Model> ModelStore::ModelFromManifest(Manifest& manifest) {
  auto model = std::unique_ptr<Model>(new Model());
  model->id_ = manifest.id;
  model->name_ = std::move(manifest.name);
  model->source_ = std::move(manifest.source);
  model->registrants_.Replace(std::move(manifest.registrants));
  model->layout_ = std::move(manifest.layout);
  model->block_hashes_ = std::move(manifest.block_hashes);
  return model;
}

// Fills model.blocks_ at Open: blocks held already are shared, the others
// are loaded (LoadBlock), charged and pinned. An error says why the model
// cannot be adopted; `fatal` is set when the daemon must not start (a
// block that cannot be pinned).
absl::Status ModelStore::AdoptBlocksLocked(Model& model, absl::Status* fatal) {
  const size_t count = model.block_count();
  model.blocks_.assign(count, nullptr);
  std::map<std::string, std::shared_ptr<const BlockMaster>, std::less<>> fresh;
  uint64_t new_bytes = 0;
  std::vector<const BlockMaster*> adopted;
  for (size_t b = 0; b < count; ++b) {
    const std::string block_id = BlockId(model.layout_.blocks[b], model.block_hashes_[b]);
    if (auto held = blocks_.Find(block_id); held != nullptr) {
      model.blocks_[b] = std::move(held);
      continue;
    }
    if (auto it = fresh.find(block_id); it != fresh.end()) {
      model.blocks_[b] = it->second;
      continue;
    }
    const uint64_t file_bytes = BlockFileBytes(model.layout_.blocks[b].bytes);
    if (options_.pinning == PinningPolicy::kAlways && options_.max_pinned_bytes != 0 &&
        new_bytes + file_bytes >
            options_.max_pinned_bytes - std::min(blocks_.bytes(), options_.max_pinned_bytes)) {
      // A lowered --max-pinned-bytes.
      return absl::ResourceExhaustedError(
          absl::StrCat("its blocks would exceed --max-pinned-bytes=", options_.max_pinned_bytes));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<BlockMaster> block,
                               files_->LoadBlock(block_id, model.layout_.blocks[b].bytes));
    // A lowered max_memory_bytes: the model goes.
    BLOCKSWAP_ASSIGN_OR_RETURN(block->memory_, room_.Charge(file_bytes, model.name_));
    // A block that cannot be pinned under "always" is not the directory's
    // fault (the device or the memlock limit is): the daemon must not start
    // half-working. Under "auto" it is staged.
    if (absl::Status pinned = Pin(*block); !pinned.ok()) {
      *fatal = pinned;
      return pinned;
    }
    new_bytes += file_bytes;
    adopted.push_back(block.get());
    std::shared_ptr<const BlockMaster> shared = std::move(block);
    fresh.emplace(block_id, shared);
    model.blocks_[b] = std::move(shared);
  }
  model.masters_bytes_ = DistinctFileBytes(model.blocks_);
  LogRefusedPins(model, adopted);
  return absl::OkStatus();
}

// Publishes a model adopted at Open and the blocks it brought.
void ModelStore::PublishAdoptedLocked(std::unique_ptr<Model> model) {
  for (const auto& block : DistinctBlocks(model->blocks_)) blocks_.AddNamed(block);
  // Charged without a check: a restarted daemon keeps what its uids held.
  const std::vector<BlockRef> refs = BlockRefs(model->blocks_);
  for (const Registrant& registrant : model->registrants_.List()) {
    ChargeUidLocked(model->id_, registrant.uid, refs);
  }
  ++stats_.adopted;
  std::string id = model->id_;
  models_.emplace(std::move(id), std::shared_ptr<const Model>(std::move(model)));
}

absl::Status ModelStore::AdoptAll() {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<std::string> names, files_->List());
  absl::MutexLock lock(&mu_);
  std::set<std::string, std::less<>> keep = {std::string(kLockName)};
  // Prefixes of the manifests this daemon cannot read (a newer format):
  // they and every file beside them stay where they are.
  std::vector<std::string> unknown;
  for (const std::string& name : names) {
    if (!absl::EndsWith(name, kManifestSuffix)) continue;
    std::string id = name.substr(0, name.size() - kManifestSuffix.size());
    if (!IsModelId(id)) continue;
    absl::StatusOr<Manifest> manifest = files_->ReadManifest(id);
    if (absl::IsUnimplemented(manifest.status())) {
      Log(LogLevel::kWarning,
          absl::StrCat(manifest.status().message(), ". Model ", id,
                       " is left in place with every file in ", options_.directory,
                       " and not counted; run the blockswapd that wrote it, or remove ",
                       files_->PathOf(absl::StrCat(id, ".*")),
                       " (and its block files) once it is not needed"));
      unknown.push_back(id);
      ++stats_.kept_unknown;
      continue;
    }
    if (!manifest.ok()) {
      Log(LogLevel::kWarning,
          absl::StrCat("removing model ", id, ": ", manifest.status().message()));
      continue;  // removed below with everything else
    }
    std::unique_ptr<Model> model = ModelFromManifest(*manifest);
    absl::Status fatal;
    absl::Status adopted = AdoptBlocksLocked(*model, &fatal);
    BLOCKSWAP_RETURN_IF_ERROR(fatal);
    if (!adopted.ok()) {
      Log(LogLevel::kWarning, absl::StrCat("removing model ", id, ": ", adopted.message()));
      continue;
    }
    keep.insert(name);
    PublishAdoptedLocked(std::move(model));
  }
  for (const std::string& block_id : blocks_.ids()) keep.insert(BlockFileName(block_id));
  for (const std::string& name : names) {
    if (keep.contains(name)) continue;
    const bool temporary = absl::EndsWith(name, kTempSuffix);
    // Any file may belong to a manifest of a newer format: only our
    // temporary files go while one is here.
    if (!unknown.empty() && !temporary) continue;
    BLOCKSWAP_RETURN_IF_ERROR(files_->RemoveStray(name));
    ++stats_.removed;
  }
  return absl::OkStatus();
}

}  // namespace blockswap::daemon
