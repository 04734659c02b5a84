// The daemon's masters: one pinned host copy of every distinct block of the
// registered models, as files on a tmpfs (docs/store.md). A Model holds its
// blocks' masters, shared with every model naming the same blocks; the store
// keeps the sealed models, coalesces concurrent registrations of one
// content, checks each against the uid's limits (UidHolds) and the node's
// (MasterRoom), and evicts models no session holds to make room. Its parts:
// the files (MasterFiles), the blocks' counts (BlockTable), each block's
// pinning (MasterPinning). The node's budgets count each distinct block once;
// a uid's count each block its models name, whoever else names it too.
#ifndef BLOCKSWAP_DAEMON_STORE_MODEL_STORE_H_
#define BLOCKSWAP_DAEMON_STORE_MODEL_STORE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/store/block_master.h"
#include "daemon/store/block_placement.h"
#include "daemon/store/block_table.h"
#include "daemon/store/eviction_order.h"
#include "daemon/store/master_draft.h"
#include "daemon/store/master_files.h"
#include "daemon/store/master_pinning.h"
#include "daemon/store/master_room.h"
#include "daemon/store/model.h"
#include "daemon/store/pending_registration.h"
#include "daemon/store/store_options.h"
#include "shared/backend/backend.h"
#include "shared/base/cancellation.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

// NOT_FOUND for a model id the caller may not use, worded the same whether
// the model does not exist or the caller may not see it (the Admin calls).
absl::Status NoSuchModelError(absl::string_view id);

// What `blockswapctl verify` reports.
struct VerifyResult {
  size_t blocks = 0;
  uint64_t bytes = 0;
};

// Thread-safe. Register may block (hashing, copying, waiting for a concurrent
// registration of the same content); the rest never blocks on I/O. The
// models it handed out stay valid after it; its directory lock does not.
class ModelStore {
  friend class MasterDraft;

 public:
  // Opens the masters directory (MasterFiles), adopts every sealed model
  // that passes its checks and removes every other entry; blocks adopted are
  // pinned or staged on `pin_device` (nullptr: neither).
  static absl::StatusOr<std::unique_ptr<ModelStore>> Open(ModelStoreOptions options,
                                                          Device* pin_device);
  ~ModelStore();
  ModelStore(const ModelStore&) = delete;
  ModelStore& operator=(const ModelStore&) = delete;

  // Registers the model whose blocks lie in `content` at
  // StagingOffsets(layout) (those of `known` aside), in the order of
  // docs/store.md's "Checks before work": the sealed model of its id if
  // there is one (already_present), else a new one. On failure nothing is
  // left behind.
  absl::StatusOr<RegisterResult> Register(absl::string_view name, const ModelLayout& layout,
                                          const std::byte* content, size_t content_bytes,
                                          const Registrant& registrant = {},
                                          const KnownBlocks* known = nullptr,
                                          const Cancellation& cancellation = {});

  // Whether `uid` could register a model of `bytes` in `blocks` blocks,
  // pessimistically and evicting nothing: the first of Register's checks.
  absl::Status CheckCapacity(uid_t uid, uint64_t bytes, uint64_t blocks);
  // CheckCapacity, then evicts idle models until the room is there now: for
  // an upload's staging area, which the budget holds before it is filled.
  absl::Status MakeRoom(uid_t uid, uint64_t bytes, uint64_t blocks);

  // A draft of `layout` (MasterDraft), its room made and reserved as
  // Register's would be.
  absl::StatusOr<std::unique_ptr<MasterDraft>> BeginDraft(const ModelLayout& layout,
                                                          absl::string_view name,
                                                          const Registrant& registrant);
  // Seals a filled draft whose block hashes are `hashes`, as Register does.
  absl::StatusOr<RegisterResult> CommitDraft(std::unique_ptr<MasterDraft> draft,
                                             std::vector<Sha256Digest> hashes);

  // Records another registration of `model`'s content, persisted in its
  // manifest first; a uid new to it is charged its blocks.
  absl::Status AddRegistrant(const std::shared_ptr<const Model>& model,
                             const Registrant& registrant) ABSL_LOCKS_EXCLUDED(manifest_mu_, mu_);

  // Removes a sealed model that no session holds (FAILED_PRECONDITION
  // otherwise), logged with `why`, counted as EvictionReason::kOperator.
  absl::Status Evict(absl::string_view id, absl::string_view why = "an operator's evict")
      ABSL_LOCKS_EXCLUDED(mu_);
  // Removes `uid`'s registrations of the model, evicting it when they were
  // its only ones.
  absl::Status EvictRegistration(absl::string_view id, uid_t uid, absl::string_view why)
      ABSL_LOCKS_EXCLUDED(manifest_mu_, mu_);
  // Re-hashes every block: DATA_LOSS naming those that differ.
  absl::StatusOr<VerifyResult> Verify(absl::string_view id,
                                      const Cancellation& cancellation = {}) const;
  // References to `model` besides the store's own: 0 means it is idle.
  static uint64_t References(const std::shared_ptr<const Model>& model);

  // The sealed model with this id, or nullptr. Counts as a use for the LRU
  // order of eviction.
  std::shared_ptr<const Model> Find(absl::string_view id) const;
  std::vector<std::shared_ptr<const Model>> List() const;  // every sealed model, by id
  // Bytes of the block files held, each distinct block once: the unique
  // master bytes; of them, those pinned, and the staged ones.
  uint64_t masters_bytes() const;
  uint64_t pinned_bytes() const;
  BlockTotals staged_blocks() const;
  PinningPolicy pinning() const { return options_.pinning; }
  size_t block_count() const;  // distinct blocks held
  // For each of `models`: the bytes of its blocks another of `models` names.
  static std::vector<uint64_t> SharedBytes(const std::vector<std::shared_ptr<const Model>>& models);
  uint64_t uid_blocks(uid_t uid) const;  // what the models `uid` registered hold
  uint64_t uid_bytes(uid_t uid) const;
  uint64_t max_pinned_bytes() const { return options_.max_pinned_bytes; }  // 0: no limit
  uint64_t max_blocks() const { return options_.max_blocks; }
  ModelStoreStats stats() const;
  const std::string& directory() const { return options_.directory; }
  MemoryBudget* memory_budget() const { return options_.memory_budget; }  // nullptr: none

 private:
  ModelStore(ModelStoreOptions options, Device* pin_device, std::unique_ptr<MasterFiles> files);

  void ChargeUidLocked(const std::string& id, uid_t uid, const std::vector<BlockRef>& blocks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AdoptAll();
  static std::unique_ptr<Model> ModelFromManifest(Manifest& manifest);
  absl::Status AdoptBlocksLocked(Model& model, absl::Status* fatal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishAdoptedLocked(std::unique_ptr<Model> model) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndClaimLocked(const BlockClaim& claim, bool published) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static PendingRegistration PendingFor(Model& model);
  absl::StatusOr<std::shared_ptr<const Model>> ClaimLocked(PendingRegistration& pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReserveClaimedLocked(PendingRegistration& pending, absl::string_view name,
                                    std::map<std::string, Reservation, std::less<>>& memory)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HoldClaimLocked(const PendingRegistration& pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropClaimLocked(const PendingRegistration& pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<RegisterResult> AddToExisting(std::shared_ptr<const Model> existing,
                                               const Model& model);
  absl::StatusOr<RegisterResult> WriteAndPublish(std::unique_ptr<Model> model,
                                                 PendingRegistration pending,
                                                 const BlockWriter& write);
  absl::Status Pin(BlockMaster& block) const;
  void LogRefusedPins(const Model& model, const std::vector<const BlockMaster*>& blocks) const;
  BlockTotals EvictableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckDeclaredLocked(uid_t uid, uint64_t bytes, uint64_t blocks) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MakeRoomLocked(uint64_t bytes, uint64_t blocks, uid_t uid)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked(const std::string& id, EvictionReason reason, absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchLocked(const std::string& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<const Model> FindOrAwaitLocked(const std::string& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseReservation(uint64_t bytes, uint64_t blocks);
  const ModelStoreOptions options_;
  Device* const pin_device_;
  const std::unique_ptr<MasterFiles> files_;
  const MasterRoom room_;
  mutable MasterPinning pinning_;  // thread-safe

  // Serializes manifest rewrites; never taken under mu_ (Find never waits
  // for a manifest written).
  absl::Mutex manifest_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  // Signalled when `in_progress_` or the blocks being written shrink.
  absl::CondVar registration_done_;
  std::map<std::string, std::shared_ptr<const Model>, std::less<>> models_ ABSL_GUARDED_BY(mu_);
  std::set<std::string, std::less<>> in_progress_ ABSL_GUARDED_BY(mu_);
  BlockTable blocks_ ABSL_GUARDED_BY(mu_);
  // What each uid's models hold; the uids each model is charged to.
  UidHolds uid_holds_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<uid_t>, std::less<>> charged_uids_ ABSL_GUARDED_BY(mu_);
  uint64_t next_draft_ ABSL_GUARDED_BY(mu_) = 0;
  mutable EvictionOrder eviction_order_ ABSL_GUARDED_BY(mu_);  // Find counts as a use
  ModelStoreStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MODEL_STORE_H_
