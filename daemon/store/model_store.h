// The daemon's masters: one pinned host copy of every distinct block of the
// registered models, as files on a tmpfs (docs/store.md).
//
// Directory (default /dev/shm/blockswap, mode 0700, owned by the daemon's
// euid, never loose in world-writable /dev/shm):
//   .lock             flock()ed exclusively while a store is open
//   <block id>.block  the bytes of one block (BlockId: its layout and the
//                     hash of its bytes), BlockFileBytes long; held once
//                     whatever models name it
//   <id>.manifest     JSON (manifest.h): id, name,
//                     registrants, layout, block hashes and the block id of
//                     each block; its first rename is the commit point. It is
//                     rewritten (a temporary file renamed over it) when
//                     another registrant is recorded.
//   *.tmp             a registration in progress (removed at Open)
// Files are mode 0600 while written; block files are 0400 once sealed.
// Clients never open them by name: they get read-only descriptors
// (BlockMaster::OpenReadOnly: the daemon opens the sealed file by name, as
// it keeps no descriptor of a sealed master) over SCM_RIGHTS.
//
// Sharing: a Model holds its blocks as std::shared_ptr<const BlockMaster>,
// and the store counts, per block, the sealed models that name it and the
// registrations that claimed it. A block's file goes when that count drops to
// zero (the last model naming it is evicted); its mapping and pinning stay
// until the last Model holding it is destroyed. The node's budgets count
// each distinct block once; a uid's (UidHolds) count in full each block its
// models name, whoever else names it too.
//
// Limits on what stays: every block costs its file's pages plus
// kBlockOverheadBytes of max_memory_bytes, and one mapping of the daemon's
// (max_blocks, from vm.max_map_count); a uid holds at most
// uid_limits.max_blocks blocks and max_bytes bytes through the models it
// registered. Sealed masters keep no descriptor.
//
// Pinning: whether a block's master is pinned or staged (copied through the
// device workers' staging buffers) is MasterPinning's decision per block file
// (master_pinning.h), by the `pinning` policy and max_pinned_bytes; a block
// keeps it for its life. A pinned block file is registered with
// Device::RegisterHostMemory on ONE device (cudaHostRegisterPortable makes it
// valid for every device). A block is at most kPinPieceBytes (MasterOffsets),
// so it is one piece. Under "always" max_pinned_bytes limits the masters;
// otherwise only max_memory_bytes and the tmpfs do.
//
// Trust: the content of a sealed block is not re-hashed at adoption. Only the
// daemon's euid can write into the 0700 directory, and the manifest's id is
// recomputed from its layout and block hashes and each block id from its
// block's layout and hash, so a manifest cannot name bytes under another id
// by mistake; whoever runs as the daemon's user can tamper with anything
// anyway.
#ifndef BLOCKSWAP_DAEMON_STORE_MODEL_STORE_H_
#define BLOCKSWAP_DAEMON_STORE_MODEL_STORE_H_

#include <sys/stat.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
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
#include "daemon/budget/memory_budget.h"
#include "daemon/store/block_master.h"
#include "daemon/store/block_placement.h"
#include "daemon/store/block_table.h"
#include "daemon/store/manifest.h"
#include "daemon/store/master_draft.h"
#include "daemon/store/master_files.h"
#include "daemon/store/master_pinning.h"
#include "daemon/store/master_room.h"
#include "daemon/store/model.h"
#include "daemon/store/registrants.h"
#include "daemon/store/uid_holds.h"
#include "shared/backend/backend.h"
#include "shared/base/cancellation.h"
#include "shared/base/unique_fd.h"
#include "shared/os/shared_memory.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

struct ModelStoreOptions {
  std::string directory = "/dev/shm/blockswap";
  // Bytes of block files held pinned; 0: no limit but the device's. Under
  // "always" every master is pinned, so it limits the masters; otherwise the
  // masters beyond it are staged.
  uint64_t max_pinned_bytes = 0;
  PinningPolicy pinning = PinningPolicy::kAlways;
  // The node's max_memory_bytes, charged for every master (nullptr: only
  // max_pinned_bytes limits them). Must outlive the store.
  MemoryBudget* memory_budget = nullptr;
  // Distinct blocks the store may hold (each is one mapping of the daemon's;
  // max_master_blocks); 0: no limit.
  uint64_t max_blocks = 0;
  // What the models of one uid may hold (max_master_blocks_per_uid,
  // max_master_bytes_per_uid).
  UidMasterLimits uid_limits = {};
  // Non-empty (the setting that asks it, "model_access = registrant-group"):
  // a capacity refusal names the limit and what was asked, never what the
  // store holds already, which moves with other users' models.
  std::string totals_withheld = {};
};

// Blocks of a registration the daemon holds already (ModelStore::Register):
// per position of the layout, the master (null: the block is uploaded) and
// the SHA-256 of the block's bytes (read only where the master is set).
struct KnownBlocks {
  std::vector<std::shared_ptr<const BlockMaster>> masters;
  std::vector<Sha256Digest> hashes;
};

struct RegisterResult {
  std::shared_ptr<const Model> model;
  // The same content was registered before (or by a concurrent call that
  // this one waited for): nothing was copied.
  bool already_present = false;
};

struct ModelStoreStats {
  uint64_t adopted = 0;  // sealed models taken over at Open
  uint64_t removed = 0;  // other directory entries removed at Open
  uint64_t copies = 0;   // registrations that copied content into a master
  uint64_t evicted = 0;  // models removed by Evict or to make room
  // Of `evicted`, by EvictionReason.
  std::array<uint64_t, kEvictionReasons> evicted_by = {};
  uint64_t kept_unknown = 0;  // manifests of a newer format left in place, not adopted
};

// The distinct blocks held staged, and their file bytes.
struct StagedBlocks {
  uint64_t blocks = 0;
  uint64_t bytes = 0;
};

// NOT_FOUND for a model id the caller may not use, worded the same whether
// the model does not exist or the caller may not see it (the Admin calls).
absl::Status NoSuchModelError(absl::string_view id);

// What `blockswapctl verify` reports.
struct VerifyResult {
  size_t blocks = 0;
  uint64_t bytes = 0;
};

// Thread-safe. Register may block (hashing, copying, waiting for a concurrent
// registration of the same content or of a shared block); the rest never
// blocks on I/O. Destroy it only once no call is running; the models it
// handed out stay valid after it (their blocks own their files, mappings and
// pinning), but the directory lock is gone.
class ModelStore {
  friend class MasterDraft;

 public:
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
  static absl::StatusOr<std::unique_ptr<ModelStore>> Open(ModelStoreOptions options,
                                                          Device* pin_device);
  ~ModelStore();
  ModelStore(const ModelStore&) = delete;
  ModelStore& operator=(const ModelStore&) = delete;

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
  absl::StatusOr<RegisterResult> Register(absl::string_view name, const ModelLayout& layout,
                                          const std::byte* content, size_t content_bytes,
                                          const Registrant& registrant = {},
                                          const KnownBlocks* known = nullptr,
                                          const Cancellation& cancellation = {});

  // The order of a registration's checks (docs/store.md, "Checks before
  // work"): this one, from the declared sizes; then hashing; then the exact
  // checks (the uid's limits over the blocks' ids, the content held
  // already); then eviction of models no session holds, for a registration
  // that will commit; then the write.
  //
  // Whether a model whose masters take `bytes` in `blocks` blocks could be
  // registered by `uid`, pessimistically (every block new to the node and
  // to the uid), counting as room what evicting every model no session
  // holds would free, but evicting nothing: RESOURCE_EXHAUSTED with
  // Register's messages otherwise. Reads nothing, so an impossible
  // registration is refused before it is read, hashed or makes anyone's
  // models go. Advisory (a concurrent registration may take the room
  // meanwhile); pessimistic for content held already, which needs no room.
  absl::Status CheckCapacity(uid_t uid, uint64_t bytes, uint64_t blocks);
  // CheckCapacity, then, when it passes, evicts models no session holds
  // until `bytes` in `blocks` blocks fit now (MakeRoomLocked): for an
  // upload's staging area, which the node's memory budget must hold before
  // the client fills it.
  absl::Status MakeRoom(uid_t uid, uint64_t bytes, uint64_t blocks);

  // A master file for `layout` (see MasterDraft): checks the capacity (making
  // room as Register does), reserves the budget and creates the temporary
  // file. `name` is informational; `registrant` is recorded as Register does.
  absl::StatusOr<std::unique_ptr<MasterDraft>> BeginDraft(const ModelLayout& layout,
                                                          absl::string_view name,
                                                          const Registrant& registrant);
  // Seals a filled draft whose block hashes are `hashes`: computes the id and
  // either returns the sealed model of that id (already_present; the draft
  // is dropped, its registrant added) or commits the draft under it as
  // Register does.
  absl::StatusOr<RegisterResult> CommitDraft(std::unique_ptr<MasterDraft> draft,
                                             std::vector<Sha256Digest> hashes);

  // Records another registration of `model`'s content: persisted in its
  // manifest before it is visible in model->registrants(), so that a
  // restarted daemon keeps it. A uid new to the model is charged its blocks
  // (uid_limits: RESOURCE_EXHAUSTED, worded as Register's). Nothing changes
  // for one recorded already (or over kMaxSourcesPerRegistrant); an error (a
  // full tmpfs) records nothing.
  // Blocks on writing the manifest; rewrites are serialized.
  absl::Status AddRegistrant(const std::shared_ptr<const Model>& model,
                             const Registrant& registrant) ABSL_LOCKS_EXCLUDED(manifest_mu_, mu_);

  // Removes a sealed model that no session holds: FAILED_PRECONDITION naming
  // how many references remain otherwise, NOT_FOUND for an unknown id.
  // Logged with `why` (who asked) and counted as EvictionReason::kOperator.
  absl::Status Evict(absl::string_view id, absl::string_view why = "an operator's evict")
      ABSL_LOCKS_EXCLUDED(mu_);
  // Removes `uid`'s registrations of the model (persisted in its manifest
  // first) and releases what they charged `uid`; the model and its blocks
  // stay for its other registrants. When they were its only registrations,
  // the model is evicted as Evict does, logged with `why`. PERMISSION_DENIED
  // when `uid` has none, NOT_FOUND for an unknown id. Blocks on writing the
  // manifest.
  absl::Status EvictRegistration(absl::string_view id, uid_t uid, absl::string_view why)
      ABSL_LOCKS_EXCLUDED(manifest_mu_, mu_);
  // Re-hashes every block of the master and compares it with the manifest's
  // hash: DATA_LOSS naming the blocks that differ. Asks `cancellation` before
  // each block and returns its error when it has one.
  absl::StatusOr<VerifyResult> Verify(absl::string_view id,
                                      const Cancellation& cancellation = {}) const;
  // References to `model` besides the store's own (sessions, loads in
  // flight): 0 means it is kept only until its room is needed.
  static uint64_t References(const std::shared_ptr<const Model>& model);

  // The sealed model with this id, or nullptr. Counts as a use for the LRU
  // order of eviction.
  std::shared_ptr<const Model> Find(absl::string_view id) const;
  // Every sealed model, by id.
  std::vector<std::shared_ptr<const Model>> List() const;
  // Bytes of the block files held, each distinct block once: the unique
  // master bytes; of them, those pinned, and the staged ones.
  uint64_t masters_bytes() const;
  uint64_t pinned_bytes() const;
  StagedBlocks staged_blocks() const;
  PinningPolicy pinning() const { return options_.pinning; }
  // Distinct blocks held.
  size_t block_count() const;
  // For each of `models`: the bytes of its distinct block files that another
  // of `models` names too. Given the models a caller may see, it says
  // nothing of the others.
  static std::vector<uint64_t> SharedBytes(const std::vector<std::shared_ptr<const Model>>& models);
  // What the models registered by `uid` hold (UidHolds).
  uint64_t uid_blocks(uid_t uid) const;
  uint64_t uid_bytes(uid_t uid) const;
  // The budget pinned_bytes is held to (0: only the tmpfs limits).
  uint64_t max_pinned_bytes() const { return options_.max_pinned_bytes; }
  uint64_t max_blocks() const { return options_.max_blocks; }
  ModelStoreStats stats() const;
  const std::string& directory() const { return options_.directory; }
  // The node's memory budget the store charges (nullptr: none).
  MemoryBudget* memory_budget() const { return options_.memory_budget; }

 private:
  ModelStore(ModelStoreOptions options, Device* pin_device, std::unique_ptr<MasterFiles> files);

  // The uids charged for `id` (its registrants'), charged or released.
  void ChargeUidLocked(const std::string& id, uid_t uid, const std::vector<BlockRef>& blocks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A new block's file under its temporary name, filled.
  struct WrittenBlock {
    std::unique_ptr<BlockMaster> master;
    std::string temp;
  };
  // Fills the file of block `block_id` at position b of a model.
  using BlockWriter =
      std::function<absl::StatusOr<WrittenBlock>(size_t b, const std::string& block_id)>;

  absl::Status AdoptAll();
  // A model of `manifest` (moved from), without its blocks.
  static std::unique_ptr<Model> ModelFromManifest(Manifest& manifest);
  // Fills model.blocks_ at Open: blocks held already are shared, the others
  // are loaded (LoadBlock), charged and pinned. An error says why the model
  // cannot be adopted; `fatal` is set when the daemon must not start (a
  // block that cannot be pinned).
  absl::Status AdoptBlocksLocked(Model& model, absl::Status* fatal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publishes a model adopted at Open and the blocks it brought.
  void PublishAdoptedLocked(std::unique_ptr<Model> model) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `claim` (BlockTable::EndClaim), removing the files of the blocks
  // that go.
  void EndClaimLocked(const BlockClaim& claim, bool published) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A registration of a model whose layout and block hashes are known, from
  // its claim to its publication (Register for an upload, CommitDraft).
  struct PendingRegistration {
    std::string id;
    uid_t uid = 0;                 // its one registrant's: charged every distinct block
    std::vector<std::string> ids;  // the block id of each position
    std::vector<uint64_t> bytes;   // the bytes of each position's block
    std::vector<BlockRef> refs;    // its distinct blocks
    BlockClaim claim;
    // Of the blocks' reservation, returned when it ends (an upload's; a
    // draft holds its own reservation).
    uint64_t reserved = 0;
    uint64_t reserved_blocks = 0;
  };
  // Sets `model`'s id (from its layout and block hashes) and describes its
  // registration.
  static PendingRegistration PendingFor(Model& model);
  // After the uid's limits allow it: the sealed model of pending.id, waiting
  // for a registration of it in progress; or nullptr, with the id and the
  // blocks the store does not hold claimed (ClaimBlocksLocked).
  absl::StatusOr<std::shared_ptr<const Model>> ClaimLocked(PendingRegistration& pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An upload's room (a draft reserved its own at BeginDraft): evicts until
  // the claimed blocks fit, charges each to the memory budget (into
  // `memory`, by block id) and reserves them. On error the claim is dropped.
  absl::Status ReserveClaimedLocked(PendingRegistration& pending, absl::string_view name,
                                    std::map<std::string, Reservation, std::less<>>& memory)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds what `pending` reserved and charges its uid, before any block is
  // written, so that concurrent registrations of one uid cannot together
  // pass its limits.
  void HoldClaimLocked(const PendingRegistration& pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a claim that registered nothing: its id and blocks are released.
  void DropClaimLocked(const PendingRegistration& pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The result of registering `model` when `existing` holds its content:
  // its registrants are added to `existing`'s.
  absl::StatusOr<RegisterResult> AddToExisting(std::shared_ptr<const Model> existing,
                                               const Model& model);
  // Writes the claimed blocks with `write`, seals them, commits the manifest
  // and publishes the model. On failure the blocks written go again and the
  // claim is dropped.
  absl::StatusOr<RegisterResult> WriteAndPublish(std::unique_ptr<Model> model,
                                                 PendingRegistration pending,
                                                 const BlockWriter& write);
  // Pins or stages a new block (MasterPinning): an error only under "always".
  absl::Status Pin(BlockMaster& block) const;
  // One log line for the `blocks` just added to `model` that the device
  // refused to pin (staged under "auto"), if any.
  void LogRefusedPins(const Model& model, const std::vector<const BlockMaster*>& blocks) const;
  // What evicting every model no session holds would free.
  using Evictable = BlockTotals;
  Evictable EvictableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CheckCapacity, under mu_.
  absl::Status CheckDeclaredLocked(uid_t uid, uint64_t bytes, uint64_t blocks) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts unreferenced models until `bytes` more in `blocks` more blocks
  // of a registration by `uid` fit (FitsLocked); the error of the check that
  // still fails otherwise. The victims: the models of the uid holding the
  // most of what is short (blocks or bytes) first, least recently used
  // first among them, so a flood's unused models go before anyone else's.
  // Called only once the registration passed its other checks: it will
  // commit unless a concurrent one took the room.
  absl::Status MakeRoomLocked(uint64_t bytes, uint64_t blocks, uid_t uid)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes model `id`, logging it (model, owners, reason: `why` says for
  // what) and counting it by `reason`.
  void EvictLocked(const std::string& id, EvictionReason reason, absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchLocked(const std::string& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sealed model `id`, once no registration of it is in progress
  // (waiting for one that is); nullptr when none is sealed, and then none is
  // in progress either: the caller may claim `id` in `in_progress_`.
  std::shared_ptr<const Model> FindOrAwaitLocked(const std::string& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseReservation(uint64_t bytes, uint64_t blocks);
  const ModelStoreOptions options_;
  Device* const pin_device_;
  const std::unique_ptr<MasterFiles> files_;
  const MasterRoom room_;
  mutable MasterPinning pinning_;  // thread-safe

  // Serializes manifest rewrites (AddRegistrant); taken before mu_, never
  // while holding it, so that writing a manifest does not block Find.
  absl::Mutex manifest_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  // Signalled when `in_progress_` or the blocks being written shrink.
  absl::CondVar registration_done_;
  std::map<std::string, std::shared_ptr<const Model>, std::less<>> models_ ABSL_GUARDED_BY(mu_);
  std::set<std::string, std::less<>> in_progress_ ABSL_GUARDED_BY(mu_);
  BlockTable blocks_ ABSL_GUARDED_BY(mu_);
  // What each uid's models hold, and the uids each model is charged to (its
  // registrants', each once).
  UidHolds uid_holds_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<uid_t>, std::less<>> charged_uids_ ABSL_GUARDED_BY(mu_);
  uint64_t next_draft_ ABSL_GUARDED_BY(mu_) = 0;
  // LRU order: the tick of each model's last use.
  mutable uint64_t use_clock_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::map<std::string, uint64_t, std::less<>> last_use_ ABSL_GUARDED_BY(mu_);
  ModelStoreStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MODEL_STORE_H_
