// ModelStore's files: block files created, filled and sealed (pinned or
// staged), and manifests written and committed.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/runtime/logging.h"
#include "daemon/store/manifest.h"
#include "daemon/store/model_store.h"
#include "daemon/store/model_store_internal.h"
#include "shared/base/file_io.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

absl::Status ModelStore::Pin(BlockMaster& block) const {
  BLOCKSWAP_ASSIGN_OR_RETURN(block.residency_,
                             pinning_.PinOrStage(block.mapping_.data(), block.file_bytes(),
                                                 absl::StrCat("block ", block.id_)));
  return absl::OkStatus();
}

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

absl::Status ModelStore::FinishSealed(BlockMaster& block) const {
  struct stat st {};
  if (::fstat(block.fd_.get(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fstat of the master of block ", block.id_));
  }
  block.directory_ = directory_fd_;
  block.device_ = st.st_dev;
  block.inode_ = st.st_ino;
  block.fd_.Reset();
  return absl::OkStatus();
}

absl::Status ModelStore::CreateBlockFile(BlockMaster& block, const std::string& temp,
                                         bool allocate) const {
  const uint64_t size = block.file_bytes();
  int raw = ::openat(directory_fd_->get(), temp.c_str(),
                     O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("creating ", PathOf(temp)));
  block.fd_ = UniqueFd(raw);
  // The adoption check wants exactly 0600, whatever the umask.
  if (::fchmod(block.fd_.get(), 0600) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chmod 0600 ", PathOf(temp)));
  }
  if (!allocate) {
    if (::ftruncate(block.fd_.get(), static_cast<off_t>(size)) != 0) {
      return ErrnoStatus(errno, absl::StrCat("sizing ", PathOf(temp), " to ", size, " bytes"));
    }
    return absl::OkStatus();
  }
  // Reserves the tmpfs pages now: a full /dev/shm is this error, not a
  // SIGBUS in the middle of the copy.
  if (int rc = ::posix_fallocate(block.fd_.get(), 0, static_cast<off_t>(size)); rc != 0) {
    return ErrnoStatus(rc, absl::StrCat("reserving ", size, " bytes for ", PathOf(temp)));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(block.mapping_,
                             Mapping::Map(block.fd_, size, Access::kReadWrite, /*populate=*/true));
  return absl::OkStatus();
}

absl::Status ModelStore::SealBlock(BlockMaster& block, const std::string& temp, bool pin) const {
  const std::string final_name = BlockFileName(block.id_);
  const int dir = directory_fd_->get();
  auto seal = [&]() -> absl::Status {
    if (!block.fd_.valid()) {  // a draft's: it keeps no descriptor while written
      int raw = ::openat(dir, temp.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
      if (raw < 0) return ErrnoStatus(errno, absl::StrCat("opening ", PathOf(temp)));
      block.fd_ = UniqueFd(raw);
    }
    if (block.mapping_.data() == nullptr) {
      // A draft's padding was left as holes: reserved now, before anyone
      // maps the master, so a full tmpfs is this error, never a SIGBUS.
      if (int rc = ::posix_fallocate(block.fd_.get(), 0, static_cast<off_t>(block.file_bytes()));
          rc != 0) {
        absl::Status status = ErrnoStatus(
            rc, absl::StrCat("reserving ", block.file_bytes(), " bytes for ", PathOf(temp)));
        if (rc == ENOSPC) return absl::ResourceExhaustedError(status.message());
        return status;
      }
      BLOCKSWAP_ASSIGN_OR_RETURN(
          block.mapping_, Mapping::Map(block.fd_, block.file_bytes(), Access::kReadWrite, true));
    }
    if (::fsync(block.fd_.get()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("fsync of ", PathOf(temp)));
    }
    // From here nobody opens it for writing again (the daemon's own mapping
    // stays writable, for pinning).
    if (::fchmod(block.fd_.get(), kSealedMastersMode) != 0) {
      return ErrnoStatus(errno, absl::StrCat("chmod 0400 ", PathOf(temp)));
    }
    // Pinned before the rename, so that a block that cannot be pinned leaves
    // only a temporary file to remove.
    if (pin) BLOCKSWAP_RETURN_IF_ERROR(Pin(block));
    BLOCKSWAP_RETURN_IF_ERROR(FinishSealed(block));  // the inode is the same after the rename
    if (::renameat(dir, temp.c_str(), dir, final_name.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("renaming ", PathOf(temp)));
    }
    return absl::OkStatus();
  };
  absl::Status status = seal();
  if (!status.ok()) {
    block.residency_ = MasterResidency();
    RemoveQuietly(temp);
  }
  return status;
}

absl::Status ModelStore::WriteManifestFile(const Model& model,
                                           const std::vector<Registrant>& registrants,
                                           const std::string& temp) const {
  int raw = ::openat(directory_fd_->get(), temp.c_str(),
                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, kManifestMode);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("creating ", PathOf(temp)));
  UniqueFd manifest(raw);
  if (::fchmod(manifest.get(), kManifestMode) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chmod 0600 ", PathOf(temp)));
  }
  Manifest contents;
  contents.id = model.id_;
  contents.name = model.name_;
  contents.source = model.source_;
  contents.registrants = registrants;
  contents.layout = model.layout_;
  contents.block_hashes = model.block_hashes_;
  for (const auto& block : model.blocks_) contents.block_ids.push_back(block->id());
  const std::string json = EncodeManifest(contents);
  BLOCKSWAP_RETURN_IF_ERROR(WriteFully(manifest.get(), 0, json.data(), json.size(), PathOf(temp)));
  if (::fsync(manifest.get()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fsync of ", PathOf(temp)));
  }
  return absl::OkStatus();
}

absl::Status ModelStore::CommitManifest(const Model& model) const {
  const std::string manifest_name = absl::StrCat(model.id_, kManifestSuffix);
  const std::string manifest_temp = absl::StrCat(manifest_name, kTempSuffix);
  const int dir = directory_fd_->get();
  absl::Status written = WriteManifestFile(model, model.registrants_.List(), manifest_temp);
  if (written.ok() && ::renameat(dir, manifest_temp.c_str(), dir, manifest_name.c_str()) != 0) {
    written = ErrnoStatus(errno, absl::StrCat("renaming ", PathOf(manifest_temp)));
  }
  if (!written.ok()) {
    RemoveQuietly(manifest_temp);
    return written;
  }
  // The commit point is behind us: from here a restarted daemon adopts the
  // model. On tmpfs this is a no-op.
  ::fsync(dir);
  return absl::OkStatus();
}

absl::Status ModelStore::AddRegistrant(const std::shared_ptr<const Model>& model,
                                       const Registrant& registrant) {
  absl::MutexLock manifest_lock(&manifest_mu_);
  std::vector<Registrant> with = model->registrants_.With(registrant);
  if (with.empty()) return absl::OkStatus();
  const std::string manifest_name = absl::StrCat(model->id_, kManifestSuffix);
  // Not CommitManifest's temporary name: a registration of the same id after an
  // eviction may be sealing meanwhile.
  const std::string temp = absl::StrCat(manifest_name, ".registrants", kTempSuffix);
  // Worded as Register's own refusal, never annotated with this model: a
  // uid over its limit learns nothing of who holds the content.
  absl::Status over_limit;
  auto record = [&]() -> absl::Status {
    BLOCKSWAP_RETURN_IF_ERROR(WriteManifestFile(*model, with, temp));
    // Under mu_, so that an eviction (which removes the manifest under it)
    // cannot be undone by this rename.
    absl::MutexLock lock(&mu_);
    auto it = models_.find(model->id_);
    if (it == models_.end() || it->second != model) {
      RemoveQuietly(temp);
      return absl::OkStatus();  // evicted: no manifest to keep it in
    }
    const bool new_uid = !charged_uids_[model->id_].contains(registrant.uid);
    const std::vector<BlockRef> refs = BlockRefs(model->blocks_);
    if (new_uid) {
      over_limit = uid_holds_.Check(registrant.uid, refs, options_.uid_limits);
      if (!over_limit.ok()) return over_limit;
    }
    if (::renameat(directory_fd_->get(), temp.c_str(), directory_fd_->get(),
                   manifest_name.c_str()) != 0) {
      absl::Status error = ErrnoStatus(errno, absl::StrCat("renaming ", PathOf(temp)));
      RemoveQuietly(temp);
      return error;
    }
    ChargeUidLocked(model->id_, registrant.uid, refs);
    return absl::OkStatus();
  };
  if (absl::Status recorded = record(); !recorded.ok()) {
    if (!over_limit.ok()) {
      RemoveQuietly(temp);
      return over_limit;
    }
    RemoveQuietly(temp);
    return Annotate(recorded, absl::StrCat("recording uid ", registrant.uid,
                                           " as a registrant of model ", model->id_));
  }
  model->registrants_.Replace(std::move(with));
  return absl::OkStatus();
}

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
  const std::string manifest_name = absl::StrCat(model->id_, kManifestSuffix);
  // AddRegistrant's temporary name: both run under manifest_mu_.
  const std::string temp = absl::StrCat(manifest_name, ".registrants", kTempSuffix);
  BLOCKSWAP_RETURN_IF_ERROR(WriteManifestFile(*model, without, temp));
  {
    // Under mu_, so that an eviction (which removes the manifest under it)
    // cannot be undone by this rename.
    absl::MutexLock lock(&mu_);
    auto it = models_.find(model->id_);
    if (it == models_.end() || it->second != model) {
      RemoveQuietly(temp);
      return absl::OkStatus();  // evicted meanwhile: the registration went with it
    }
    if (::renameat(directory_fd_->get(), temp.c_str(), directory_fd_->get(),
                   manifest_name.c_str()) != 0) {
      absl::Status error = ErrnoStatus(errno, absl::StrCat("renaming ", PathOf(temp)));
      RemoveQuietly(temp);
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
