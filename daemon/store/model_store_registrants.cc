// ModelStore's registrants (another registration of a model recorded, one
// removed, each persisted in its manifest first), and a new block's pinning.
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/runtime/logging.h"
#include "daemon/store/model_store.h"
#include "daemon/store/model_store_internal.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

// The temporary name of a rewrite of a model's registrants (AddRegistrant,
// EvictRegistration; both run under manifest_mu_). Not CommitManifest's: a
// registration of the same id after an eviction may be sealing meanwhile.
std::string RegistrantsTempName(absl::string_view model_id) {
  return absl::StrCat(ManifestFileName(model_id), ".registrants", kTempSuffix);
}

}  // namespace

// Pins or stages a new block (MasterPinning): an error only under "always".
absl::Status ModelStore::Pin(BlockMaster& block) const {
  BLOCKSWAP_ASSIGN_OR_RETURN(block.residency_,
                             pinning_.PinOrStage(block.mapping_.data(), block.file_bytes(),
                                                 absl::StrCat("block ", block.id_)));
  return absl::OkStatus();
}

// One log line for the `blocks` just added to `model` that the device
// refused to pin (staged under "auto"), if any.
void ModelStore::LogRefusedPins(const Model& model,
                                const std::vector<const BlockMaster*>& blocks) const {
  size_t refused = 0;
  const absl::Status* first = nullptr;
  for (const BlockMaster* block : blocks) {
    if (block->residency_.refusal().ok()) continue;
    if (first == nullptr) first = &block->residency_.refusal();
    ++refused;
  }
  if (first == nullptr) return;
  Log(LogLevel::kWarning,
      absl::StrCat("model ", model.id_, " ('", model.name_, "'): ", refused, " of its ",
                   blocks.size(), " new blocks could not be pinned (", first->message(),
                   "); their loads are staged through pinned buffers (pinning = \"auto\")"));
}

// Records another registration of `model`'s content: persisted in its
// manifest before it is visible in model->registrants(), so that a
// restarted daemon keeps it. A uid new to the model is charged its blocks
// (uid_limits: RESOURCE_EXHAUSTED, worded as Register's). Nothing changes
// for one recorded already (or over kMaxSourcesPerRegistrant); an error (a
// full tmpfs) records nothing.
// Blocks on writing the manifest; rewrites are serialized.
absl::Status ModelStore::AddRegistrant(const std::shared_ptr<const Model>& model,
                                       const Registrant& registrant) {
  absl::MutexLock manifest_lock(&manifest_mu_);
  std::vector<Registrant> with = model->registrants_.With(registrant);
  if (with.empty()) return absl::OkStatus();
  const std::string manifest_name = ManifestFileName(model->id_);
  const std::string temp = RegistrantsTempName(model->id_);
  // Worded as Register's own refusal, never annotated with this model: a
  // uid over its limit learns nothing of who holds the content.
  absl::Status over_limit;
  auto record = [&]() -> absl::Status {
    BLOCKSWAP_RETURN_IF_ERROR(files_->WriteManifest(*model, with, temp));
    // Under mu_, so that an eviction (which removes the manifest under it)
    // cannot be undone by this rename.
    absl::MutexLock lock(&mu_);
    auto it = models_.find(model->id_);
    if (it == models_.end() || it->second != model) {
      files_->RemoveQuietly(temp);
      return absl::OkStatus();  // evicted: no manifest to keep it in
    }
    const bool new_uid = !charged_uids_[model->id_].contains(registrant.uid);
    const std::vector<BlockRef> refs = BlockRefs(model->blocks_);
    if (new_uid) {
      over_limit = uid_holds_.Check(registrant.uid, refs, options_.uid_limits);
      if (!over_limit.ok()) return over_limit;
    }
    if (absl::Status error = files_->Rename(temp, manifest_name); !error.ok()) {
      files_->RemoveQuietly(temp);
      return error;
    }
    ChargeUidLocked(model->id_, registrant.uid, refs);
    return absl::OkStatus();
  };
  if (absl::Status recorded = record(); !recorded.ok()) {
    files_->RemoveQuietly(temp);
    if (!over_limit.ok()) return over_limit;
    return Annotate(recorded, absl::StrCat("recording uid ", registrant.uid,
                                           " as a registrant of model ", model->id_));
  }
  model->registrants_.Replace(std::move(with));
  return absl::OkStatus();
}

// Removes `uid`'s registrations of the model (persisted in its manifest
// first) and releases what they charged `uid`; the model and its blocks
// stay for its other registrants. When they were its only registrations,
// the model is evicted as Evict does, logged with `why`. PERMISSION_DENIED
// when `uid` has none, NOT_FOUND for an unknown id. Blocks on writing the
// manifest.
absl::Status ModelStore::EvictRegistration(absl::string_view id, uid_t uid, absl::string_view why) {
  absl::MutexLock manifest_lock(&manifest_mu_);
  std::shared_ptr<const Model> model;
  {
    absl::MutexLock lock(&mu_);  // not Find: an eviction is no use for the LRU order
    auto it = models_.find(id);
    if (it == models_.end()) return NoSuchModelError(id);
    model = it->second;
  }
  std::vector<Registrant> without = model->registrants_.Without(uid);
  if (without.size() == model->registrants_.List().size()) {
    return absl::PermissionDeniedError(
        absl::StrCat("uid ", uid, " has no registration of model ", id, " to evict"));
  }
  if (without.empty()) {
    model.reset();  // Evict counts references besides the store's own
    return Evict(id, why);
  }
  const std::string manifest_name = ManifestFileName(model->id_);
  const std::string temp = RegistrantsTempName(model->id_);
  BLOCKSWAP_RETURN_IF_ERROR(files_->WriteManifest(*model, without, temp));
  {
    // Under mu_, so that an eviction (which removes the manifest under it)
    // cannot be undone by this rename.
    absl::MutexLock lock(&mu_);
    auto it = models_.find(model->id_);
    if (it == models_.end() || it->second != model) {
      files_->RemoveQuietly(temp);
      return absl::OkStatus();  // evicted meanwhile: the registration went with it
    }
    if (absl::Status error = files_->Rename(temp, manifest_name); !error.ok()) {
      files_->RemoveQuietly(temp);
      return Annotate(error, absl::StrCat("removing uid ", uid, "'s registration of model ", id));
    }
    if (auto charged = charged_uids_.find(model->id_);
        charged != charged_uids_.end() && charged->second.erase(uid) > 0) {
      uid_holds_.Remove(uid, BlockRefs(model->blocks_));
    }
  }
  model->registrants_.Replace(std::move(without));
  return absl::OkStatus();
}

}  // namespace blockswap::daemon
