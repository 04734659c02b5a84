// The daemon's masters: one pinned host copy of every registered model, as
// files on a tmpfs (DESIGN §2, §6).
//
// Directory (default /dev/shm/blockswap, mode 0700, owned by the daemon's
// euid, never loose in world-writable /dev/shm):
//   .lock             flock()ed exclusively while a store is open
//   <id>.masters      the blocks of model <id>, at MasterOffsets(layout)
//   <id>.manifest     JSON: format, id, name, registrants, layout, block
//                     hashes, master offsets, masters_bytes; its first rename
//                     is the commit point. It is rewritten (a temporary file
//                     renamed over it) when another registrant is recorded.
//   *.tmp             a registration in progress (removed at Open)
// Both files of a model are mode 0600. Clients never open them by name: they
// get a read-only descriptor (Model::OpenReadOnly) over SCM_RIGHTS.
//
// Pinning: whether a model's masters are pinned or staged (copied through the
// device workers' staging buffers) is MasterPinning's decision
// (master_pinning.h), by the `pinning` policy and max_pinned_bytes. A pinned
// master file is registered at once with
// Device::RegisterHostMemory on ONE device (cudaHostRegisterPortable makes it
// valid for every device; registering a range twice fails). The cuda backend
// pins in pieces of kPinPieceBytes from the start of the range, so no block
// straddles a multiple of kPinPieceBytes in the file: one block copy never
// spans two registrations.
//
// Trust: the content of a sealed master is not re-hashed at adoption. Only the
// daemon's euid can write into the 0700 directory, and the manifest's id is
// recomputed from its layout and block hashes, so a manifest cannot name bytes
// under another model's id by mistake; whoever runs as the daemon's user can
// tamper with anything anyway.
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
#include "daemon/budget/memory_budget.h"
#include "daemon/store/block_placement.h"
#include "daemon/store/master_pinning.h"
#include "daemon/store/registrants.h"
#include "shared/backend/backend.h"
#include "shared/base/unique_fd.h"
#include "shared/os/shared_memory.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

struct ModelStoreOptions {
  std::string directory = "/dev/shm/blockswap";
  // Bytes of master files held pinned; 0: no limit. Under "always" every
  // master is pinned, so it limits the masters; otherwise the masters beyond
  // it are staged.
  uint64_t max_pinned_bytes = 0;
  PinningPolicy pinning = PinningPolicy::kAlways;
  // The node's max_memory_bytes, charged for every master (nullptr: only
  // max_pinned_bytes limits them). Must outlive the store.
  MemoryBudget* memory_budget = nullptr;
};

// One sealed model: immutable, shared by every session that opened it as
// std::shared_ptr<const Model>; thread-safe. Owns the master file's
// descriptor, its read-write shared mapping and its pinning. The device it was
// pinned on must outlive it.
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
  uint64_t master_offset(size_t b) const;
  const std::vector<uint64_t>& master_offsets() const { return master_offsets_; }
  uint64_t masters_bytes() const { return masters_bytes_; }
  // Pinned: a load is one DMA from the master. Staged: a load is copied
  // through the device worker's pinned staging buffers.
  bool pinned() const { return residency_.pinned(); }
  bool staged() const { return residency_.staged(); }

  // A NEW read-only descriptor of the master file for a client: a new open
  // file description (through /proc/self/fd), so it cannot be mapped
  // writable or turned writable with fcntl.
  absl::StatusOr<UniqueFd> OpenReadOnly() const;

 private:
  friend class ModelStore;
  friend class MasterDraft;
  Model() = default;

  std::string id_;
  std::string name_;
  std::string source_ = "upload";
  ModelLayout layout_;
  std::vector<Sha256Digest> block_hashes_;
  std::vector<uint64_t> master_offsets_;
  uint64_t masters_bytes_ = 0;
  // Grows while the model is shared (the store persists each change first):
  // the one part of a sealed model that is not immutable.
  mutable Registrants registrants_;
  // Declared in the order they are acquired, so that they are released in
  // reverse: unpin, unmap, close, and only then return the budget's charge.
  Reservation memory_;
  UniqueFd fd_;
  Mapping mapping_;
  MasterResidency residency_;  // pinned or staged (neither without a pin device)
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
};

class ModelStore;

// A master file being written for content whose id is not known yet (a model
// read from a file: the id needs the hashes of the bytes). Created by
// ModelStore::BeginDraft, which has checked the room and reserved the budget;
// the writer writes each block's bytes with Write (pwrite: the tmpfs pages
// are allocated by the copy itself, never zeroed first), hashes them, then
// hands the draft to CommitDraft, which reserves whatever is still a hole
// (padding) before sealing. Destroying an uncommitted draft removes its
// temporary file and returns the reservation, so a failed registration
// leaves nothing behind. Thread-safe for writes to different ranges.
class MasterDraft {
 public:
  ~MasterDraft();
  MasterDraft(const MasterDraft&) = delete;
  MasterDraft& operator=(const MasterDraft&) = delete;

  const ModelLayout& layout() const;
  // Writes `bytes` at `offset` of block b (pwrite into the master file). A
  // full tmpfs is RESOURCE_EXHAUSTED here (a write, never a SIGBUS).
  absl::Status Write(size_t b, uint64_t offset, const void* data, size_t bytes) const;

 private:
  friend class ModelStore;
  MasterDraft() = default;

  ModelStore* store_ = nullptr;
  std::unique_ptr<Model> model_;
  std::string temp_name_;
  uint64_t reserved_ = 0;  // bytes of the store's budget held until commit or destruction
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
// registration of the same content); the rest never blocks on I/O. Destroy it
// only once no call is running; the models it handed out stay valid after it
// (each owns its file, mapping and pinning), but the directory lock is gone.
class ModelStore {
  friend class MasterDraft;

 public:
  // Creates `options.directory` (mode 0700) or checks the existing one (a
  // directory, not a link, owned by geteuid(), no group/other permission),
  // locks it against a second daemon, adopts every sealed model that passes
  // its checks (owner, mode 0600, sizes, a layout that validates, the id
  // recomputed from layout and block hashes) and removes every other entry.
  // Adopted models are pinned on `pin_device` (nullptr: no pinning) and
  // count against max_pinned_bytes; one that does not fit is removed.
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
  // blocks into a new master file, commits it, pins it and publishes it.
  // RESOURCE_EXHAUSTED when the model would exceed max_pinned_bytes or the
  // directory's free space. On failure nothing is left behind.
  // `registrant` is recorded with the model, or added to the present one's.
  absl::StatusOr<RegisterResult> Register(absl::string_view name, const ModelLayout& layout,
                                          const std::byte* content, size_t content_bytes,
                                          const Registrant& registrant = {});

  // Capacity: when the model would exceed max_pinned_bytes or the directory's
  // free space, sealed models no session holds are evicted, least recently
  // used first, until it fits (or nothing more can go).
  //
  // Whether a model whose masters take `bytes` could be registered now, so
  // that an upload can be refused before the client fills a staging area:
  // RESOURCE_EXHAUSTED with Register's messages otherwise. Advisory (a
  // concurrent registration may take the room meanwhile) and pessimistic for
  // content that turns out to be registered already, which needs no room.
  absl::Status CheckCapacity(uint64_t bytes);

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
  // restarted daemon keeps it. Nothing changes for one recorded already (or
  // over kMaxSourcesPerRegistrant); an error (a full tmpfs) records nothing.
  // Blocks on writing the manifest; rewrites are serialized.
  absl::Status AddRegistrant(const std::shared_ptr<const Model>& model,
                             const Registrant& registrant) ABSL_LOCKS_EXCLUDED(manifest_mu_, mu_);

  // Removes a sealed model that no session holds: FAILED_PRECONDITION naming
  // how many references remain otherwise, NOT_FOUND for an unknown id.
  absl::Status Evict(absl::string_view id);
  // Re-hashes every block of the master and compares it with the manifest's
  // hash: DATA_LOSS naming the blocks that differ.
  absl::StatusOr<VerifyResult> Verify(absl::string_view id) const;
  // References to `model` besides the store's own (sessions, loads in
  // flight): 0 means it is kept only until its room is needed.
  static uint64_t References(const std::shared_ptr<const Model>& model);

  // The sealed model with this id, or nullptr. Counts as a use for the LRU
  // order of eviction.
  std::shared_ptr<const Model> Find(absl::string_view id) const;
  // Every sealed model, by id.
  std::vector<std::shared_ptr<const Model>> List() const;
  // Bytes of the master files of every sealed model, and of those pinned.
  uint64_t masters_bytes() const;
  uint64_t pinned_bytes() const;
  PinningPolicy pinning() const { return options_.pinning; }
  // The budget pinned_bytes is held to (0: only the tmpfs limits).
  uint64_t max_pinned_bytes() const { return options_.max_pinned_bytes; }
  ModelStoreStats stats() const;
  const std::string& directory() const { return options_.directory; }
  // The node's memory budget the store charges (nullptr: none).
  MemoryBudget* memory_budget() const { return options_.memory_budget; }

 private:
  ModelStore(ModelStoreOptions options, Device* pin_device, UniqueFd directory_fd,
             UniqueFd lock_fd);

  absl::Status AdoptAll();
  // The model of `id` from its manifest and master file, checked and mapped
  // but not pinned; an error says why it cannot be adopted.
  absl::StatusOr<std::unique_ptr<Model>> LoadSealed(const std::string& id) const;
  // Writes, commits and pins the master of a model whose id, hashes and
  // master placement are known. Removes what it wrote on failure.
  absl::StatusOr<std::unique_ptr<Model>> WriteMaster(std::unique_ptr<Model> model,
                                                     const std::byte* content,
                                                     const BlockPlacement& staging);
  absl::Status Pin(Model& model) const;
  // Creates `temp` (mode 0600) of model.masters_bytes_ in model.fd_ and maps
  // it read-write; `allocate`: reserves every page (posix_fallocate) and
  // populates the mapping.
  absl::Status CreateMasterFile(Model& model, const std::string& temp, bool allocate) const;
  // Writes model's manifest, listing `registrants`, into `temp` (mode 0600).
  absl::Status WriteManifestFile(const Model& model, const std::vector<Registrant>& registrants,
                                 const std::string& temp) const;
  // Writes the manifest, pins, and renames `masters_temp` and the manifest
  // into place (the commit point). Removes what it wrote on failure.
  absl::Status SealMaster(Model& model, const std::string& masters_temp) const;
  // Publishes a sealed model (mu_ held).
  std::shared_ptr<const Model> PublishLocked(std::unique_ptr<Model> model)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts unreferenced models, least recently used first, until `bytes` more
  // fit max_pinned_bytes, the node's memory budget and the free space; the
  // error of the check that still fails otherwise.
  absl::Status MakeRoomLocked(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchLocked(const std::string& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sealed model `id`, once no registration of it is in progress
  // (waiting for one that is); nullptr when none is sealed, and then none is
  // in progress either: the caller may claim `id` in `in_progress_`.
  std::shared_ptr<const Model> FindOrAwaitLocked(const std::string& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseReservation(uint64_t bytes);
  // The node budget's charge for a master of `bytes` (empty without a budget).
  absl::StatusOr<Reservation> ChargeMemory(uint64_t bytes, absl::string_view name) const;
  absl::Status CheckBudget(uint64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckFreeSpace(uint64_t bytes) const;
  void RemoveQuietly(const std::string& name) const;
  std::string PathOf(absl::string_view name) const;

  const ModelStoreOptions options_;
  Device* const pin_device_;
  const UniqueFd directory_fd_;    // every file is opened relative to it
  const UniqueFd lock_fd_;         // holds the flock for the store's lifetime
  mutable MasterPinning pinning_;  // thread-safe

  // Serializes manifest rewrites (AddRegistrant); taken before mu_, never
  // while holding it, so that writing a manifest does not block Find.
  absl::Mutex manifest_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  absl::CondVar registration_done_;  // signalled when `in_progress_` shrinks
  std::map<std::string, std::shared_ptr<const Model>, std::less<>> models_ ABSL_GUARDED_BY(mu_);
  std::set<std::string, std::less<>> in_progress_ ABSL_GUARDED_BY(mu_);
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(mu_) = 0;    // of every master, pinned or staged
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of registrations in progress
  uint64_t next_draft_ ABSL_GUARDED_BY(mu_) = 0;
  // LRU order: the tick of each model's last use.
  mutable uint64_t use_clock_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::map<std::string, uint64_t, std::less<>> last_use_ ABSL_GUARDED_BY(mu_);
  ModelStoreStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MODEL_STORE_H_
