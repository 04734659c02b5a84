// ModelStore's registrations: an upload's blocks hashed, concurrent
// registrations of one id coalesced, the missing blocks written and the
// model published.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/budget/master_limits.h"
#include "daemon/store/model_store.h"
#include "daemon/store/model_store_internal.h"
#include "daemon/store/parallel_for.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

constexpr size_t kModelNameLimitBytes = 1024;

}  // namespace

absl::Status ValidateNewModel(const ModelLayout& layout, absl::string_view name) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateLayout(layout));
  if (name.size() > kModelNameLimitBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name has ", name.size(), " bytes (limit ", kModelNameLimitBytes, ")"));
  }
  return absl::OkStatus();
}

// The sealed model `id`, once no registration of it is in progress
// (waiting for one that is); nullptr when none is sealed, and then none is
// in progress either: the caller may claim `id` in `in_progress_`.
std::shared_ptr<const Model> ModelStore::FindOrAwaitLocked(const std::string& id) {
  while (true) {
    if (auto it = models_.find(id); it != models_.end()) {
      TouchLocked(id);
      return it->second;
    }
    // A registration of the same content elsewhere: its result is ours. If
    // it fails, the caller registers it itself.
    if (!in_progress_.contains(id)) return nullptr;
    registration_done_.Wait(&mu_);
  }
}

// Sets `model`'s id (from its layout and block hashes) and describes its
// registration.
PendingRegistration ModelStore::PendingFor(Model& model) {
  const size_t count = model.block_count();
  PendingRegistration pending;
  pending.ids.resize(count);
  pending.bytes.resize(count);
  for (size_t b = 0; b < count; ++b) {
    pending.ids[b] = BlockId(model.layout_.blocks[b], model.block_hashes_[b]);
    pending.bytes[b] = model.layout_.blocks[b].bytes;
  }
  model.id_ = ModelId(model.layout_, model.block_hashes_);
  pending.id = model.id_;
  // A registration has one registrant; the uid is charged every distinct
  // block, held or not.
  pending.uid = model.registrants_.List().front().uid;
  std::set<absl::string_view> seen;
  for (size_t b = 0; b < count; ++b) {
    if (seen.insert(pending.ids[b]).second) {
      pending.refs.push_back({pending.ids[b], BlockFileBytes(pending.bytes[b])});
    }
  }
  return pending;
}

// After the uid's limits allow it: the sealed model of pending.id, waiting
// for a registration of it in progress; or nullptr, with the id and the
// blocks the store does not hold claimed (BlockTable::Claim).
absl::StatusOr<std::shared_ptr<const Model>> ModelStore::ClaimLocked(PendingRegistration& pending) {
  // First, and from the uid's own holds alone: the same answer whether or
  // not anyone holds this content.
  BLOCKSWAP_RETURN_IF_ERROR(uid_holds_.Check(pending.uid, pending.refs, options_.uid_limits));
  std::shared_ptr<const Model> existing = FindOrAwaitLocked(pending.id);
  if (existing != nullptr) return existing;
  // Again: the wait may have let another registration of the uid in.
  BLOCKSWAP_RETURN_IF_ERROR(uid_holds_.Check(pending.uid, pending.refs, options_.uid_limits));
  in_progress_.insert(pending.id);
  // All or nothing: a registration that waited holding claims could wait for
  // one that waits for it.
  while (blocks_.Busy(pending.ids)) registration_done_.Wait(&mu_);
  pending.claim = blocks_.Claim(pending.ids, pending.bytes);
  return nullptr;
}

// An upload's room (a draft reserved its own at BeginDraft): evicts until
// the claimed blocks fit, charges each to the memory budget (into
// `memory`, by block id) and reserves them. On error the claim is dropped.
absl::Status ModelStore::ReserveClaimedLocked(
    PendingRegistration& pending, absl::string_view name,
    std::map<std::string, Reservation, std::less<>>& memory) {
  const BlockClaim& claim = pending.claim;
  absl::Status room = MakeRoomLocked(claim.missing_bytes, claim.claimed.size(), pending.uid);
  for (size_t i = 0; room.ok() && i < claim.claimed.size(); ++i) {
    absl::StatusOr<Reservation> charge =
        room_.Charge(BlockFileBytes(pending.bytes[claim.claimed_positions[i]]), name);
    room = charge.status();
    if (charge.ok()) memory.emplace(claim.claimed[i], *std::move(charge));
  }
  if (!room.ok()) {
    memory.clear();
    DropClaimLocked(pending);
    return room;
  }
  pending.reserved = claim.missing_bytes;
  pending.reserved_blocks = claim.claimed.size();
  return absl::OkStatus();
}

// Holds what `pending` reserved and charges its uid, before any block is
// written, so that concurrent registrations of one uid cannot together
// pass its limits.
void ModelStore::HoldClaimLocked(const PendingRegistration& pending) {
  blocks_.Reserve(pending.reserved, pending.reserved_blocks);
  uid_holds_.Add(pending.uid, pending.refs);
}

// Ends a claim that registered nothing: its id and blocks are released.
void ModelStore::DropClaimLocked(const PendingRegistration& pending) {
  EndClaimLocked(pending.claim, /*published=*/false);
  in_progress_.erase(pending.id);
  registration_done_.SignalAll();
}

// The result of registering `model` when `existing` holds its content:
// its registrants are added to `existing`'s.
absl::StatusOr<RegisterResult> ModelStore::AddToExisting(std::shared_ptr<const Model> existing,
                                                         const Model& model) {
  for (const Registrant& registrant : model.registrants_.List()) {
    BLOCKSWAP_RETURN_IF_ERROR(AddRegistrant(existing, registrant));
  }
  return RegisterResult{.model = std::move(existing), .already_present = true};
}

// Writes the claimed blocks with `write`, seals them, commits the manifest
// and publishes the model. On failure the blocks written go again and the
// claim is dropped.
absl::StatusOr<RegisterResult> ModelStore::WriteAndPublish(std::unique_ptr<Model> model,
                                                           PendingRegistration pending,
                                                           const BlockWriter& write) {
  const BlockClaim& claim = pending.claim;
  const std::string& id = pending.id;
  // Each new block sealed under its final name, then the manifest (the
  // commit point); on failure the blocks written go again. ParallelFor's
  // threads each hold one block file open, and the manifest one more.
  std::vector<std::unique_ptr<BlockMaster>> written(claim.claimed.size());
  absl::Status status =
      CheckDescriptorHeadroom(std::min<uint64_t>(claim.claimed.size(), kMaxWorkerThreads) + 1,
                              absl::StrCat("registering model ", id.substr(0, 16)));
  if (status.ok())
    status = ParallelFor(claim.claimed.size(), [&](size_t i) -> absl::Status {
      BLOCKSWAP_ASSIGN_OR_RETURN(WrittenBlock block,
                                 write(claim.claimed_positions[i], claim.claimed[i]));
      BLOCKSWAP_RETURN_IF_ERROR(files_->SealBlock(
          *block.master, block.temp, [this](BlockMaster& block) { return Pin(block); }));
      written[i] = std::move(block.master);
      return absl::OkStatus();
    });
  std::vector<std::shared_ptr<const BlockMaster>> fresh(claim.claimed.size());
  for (size_t i = 0; i < written.size(); ++i) fresh[i] = std::move(written[i]);
  if (status.ok()) {
    model->blocks_ = claim.held;
    for (size_t b = 0; b < model->block_count(); ++b) {
      if (model->blocks_[b] != nullptr) continue;
      auto it = std::find(claim.claimed.begin(), claim.claimed.end(), pending.ids[b]);
      model->blocks_[b] = fresh[it - claim.claimed.begin()];
    }
    model->masters_bytes_ = DistinctFileBytes(model->blocks_);
    status = files_->CommitManifest(*model);
  }
  if (status.ok()) {
    std::vector<const BlockMaster*> sealed;
    for (const auto& block : fresh) sealed.push_back(block.get());
    LogRefusedPins(*model, sealed);
  }
  if (!status.ok()) {
    for (size_t i = 0; i < fresh.size(); ++i) {
      if (fresh[i] != nullptr) files_->RemoveQuietly(BlockFileName(claim.claimed[i]));
    }
  }

  absl::MutexLock lock(&mu_);
  blocks_.Unreserve(pending.reserved, pending.reserved_blocks);
  if (!status.ok()) {
    uid_holds_.Remove(pending.uid, pending.refs);
    DropClaimLocked(pending);
    return status;
  }
  in_progress_.erase(id);
  registration_done_.SignalAll();
  charged_uids_[id].insert(pending.uid);
  for (std::shared_ptr<const BlockMaster>& block : fresh) blocks_.AddWritten(std::move(block));
  EndClaimLocked(claim, /*published=*/true);
  std::shared_ptr<const Model> sealed = std::move(model);
  models_.emplace(sealed->id(), sealed);
  TouchLocked(sealed->id());
  ++stats_.copies;
  return RegisterResult{.model = std::move(sealed), .already_present = false};
}

// Registers the model whose blocks lie in `content` at
// StagingOffsets(layout). The caller keeps `content` immutable during the
// call (the daemon seals the staging memfd first). Validates the layout
// and the blocks' zero padding, hashes every block and computes the id;
// returns the sealed model of that id if there is one (already_present),
// waits for a registration of the same id in progress, else copies the
// blocks the store does not hold yet into new block files, pins them,
// commits the manifest and publishes the model.
// RESOURCE_EXHAUSTED when the model would exceed max_pinned_bytes (under
// "always"), max_memory_bytes, max_blocks or the directory's free space,
// or its registrant's uid_limits (checked first, from the uid's own holds
// alone, so the answer is the same whether anyone holds the content). The
// uploaded blocks are checked from their declared sizes before they are
// hashed (CheckCapacity), exactly after; models are evicted only then. On
// failure nothing is left behind.
// `registrant` is recorded with the model, or added to the present one's.
//
// With `known`, the blocks it names (a master where the caller found the
// block held, in a model the client may see) are not in `content`: it holds
// only the other blocks, at StagingOffsets of the layout of those alone.
// A known block is not re-hashed: its hash must give its master's block id
// (INVALID_ARGUMENT otherwise). One evicted meanwhile is written again from
// its master, which the caller's reference keeps mapped.
//
// Asks `cancellation` before hashing each block and returns its error when
// it has one (nothing is claimed or written yet then).
absl::StatusOr<RegisterResult> ModelStore::Register(absl::string_view name,
                                                    const ModelLayout& layout,
                                                    const std::byte* content, size_t content_bytes,
                                                    const Registrant& registrant,
                                                    const KnownBlocks* known,
                                                    const Cancellation& cancellation) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateNewModel(layout, name));
  BLOCKSWAP_RETURN_IF_ERROR(MasterOffsets(layout).status());  // every block fits one pinned piece
  const size_t count = layout.blocks.size();
  if (known != nullptr && (known->masters.size() != count || known->hashes.size() != count)) {
    return absl::InvalidArgumentError(
        absl::StrCat("known blocks for ", known->masters.size(), " blocks of a layout of ", count));
  }
  auto is_known = [&](size_t b) { return known != nullptr && known->masters[b] != nullptr; };
  // The uploaded blocks, back to back in the staging area.
  ModelLayout uploaded;
  std::vector<size_t> staged_at(count, 0);  // index into `uploaded` of each uploaded block
  for (size_t b = 0; b < count; ++b) {
    if (is_known(b)) continue;
    staged_at[b] = uploaded.blocks.size();
    uploaded.blocks.push_back(layout.blocks[b]);
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(BlockPlacement staging, StagingOffsets(uploaded));
  if ((content == nullptr && staging.total_bytes != 0) || content_bytes < staging.total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("content has ", content_bytes,
                                                   " bytes; the layout's staging area needs ",
                                                   staging.total_bytes));
  }
  auto staged = [&](size_t b) { return content + staging.offsets[staged_at[b]]; };
  // Before hashing: what can only be refused costs no hashing (the known
  // blocks are not counted: they need no reading, and the exact check after
  // hashing counts them).
  uint64_t declared_bytes = 0;
  for (const BlockSpec& block : uploaded.blocks) declared_bytes += BlockFileBytes(block.bytes);
  BLOCKSWAP_RETURN_IF_ERROR(
      CheckCapacity(registrant.uid, declared_bytes, uploaded.blocks.size()));

  std::vector<Sha256Digest> hashes(count);
  BLOCKSWAP_RETURN_IF_ERROR(ParallelFor(count, [&](size_t b) {
    BLOCKSWAP_RETURN_IF_ERROR(cancellation.Check());
    if (is_known(b)) {
      hashes[b] = known->hashes[b];
      if (BlockId(layout.blocks[b], hashes[b]) != known->masters[b]->id()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "block ", b, ": its layout and hash do not give the id of the held block it names"));
      }
      return absl::OkStatus();
    }
    absl::Status padding = CheckBlockPadding(layout.blocks[b], staged(b));
    if (!padding.ok()) return Annotate(padding, absl::StrCat("block ", b));
    hashes[b] = Sha256Of(staged(b), layout.blocks[b].bytes);
    return absl::OkStatus();
  }));

  auto model = std::unique_ptr<Model>(new Model());
  model->name_ = std::string(name);
  model->source_ = registrant.source;
  model->registrants_.Replace({Named(registrant, name)});
  model->layout_ = layout;
  model->block_hashes_ = std::move(hashes);
  PendingRegistration pending = PendingFor(*model);
  std::map<std::string, Reservation, std::less<>> memory;  // of each claimed block
  std::shared_ptr<const Model> existing;
  {
    absl::MutexLock lock(&mu_);
    BLOCKSWAP_ASSIGN_OR_RETURN(existing, ClaimLocked(pending));
    if (existing == nullptr) {
      BLOCKSWAP_RETURN_IF_ERROR(ReserveClaimedLocked(pending, model->name_, memory));
      HoldClaimLocked(pending);
    }
  }
  if (existing != nullptr) return AddToExisting(std::move(existing), *model);
  return WriteAndPublish(
      std::move(model), std::move(pending),
      [&](size_t b, const std::string& block_id) -> absl::StatusOr<WrittenBlock> {
        const std::string temp = absl::StrCat(BlockFileName(block_id), kTempSuffix);
        BLOCKSWAP_RETURN_IF_ERROR(room_.CheckFreeSpace(BlockFileBytes(layout.blocks[b].bytes)));
        BLOCKSWAP_ASSIGN_OR_RETURN(
            std::unique_ptr<BlockMaster> master,
            files_->CreateBlock(block_id, layout.blocks[b].bytes, temp, /*allocate=*/true));
        WrittenBlock block{std::move(master), temp};
        // A known block is claimed only when it was evicted since the caller
        // found it: its old master still holds the bytes.
        std::memcpy(block.master->mapping_.data(),
                    is_known(b) ? known->masters[b]->data() : staged(b), layout.blocks[b].bytes);
        // Distinct keys: the writers of different blocks take different entries.
        block.master->memory_ = std::move(memory.find(block_id)->second);
        return block;
      });
}

}  // namespace blockswap::daemon
