#include "daemon/store/model_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/store/manifest.h"
#include "daemon/store/masters_directory.h"
#include "daemon/store/parallel_for.h"
#include "shared/base/file_io.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

constexpr absl::string_view kLockName = ".lock";
constexpr absl::string_view kMastersSuffix = ".masters";
constexpr absl::string_view kManifestSuffix = ".manifest";
constexpr absl::string_view kTempSuffix = ".tmp";
// A manifest is a few hundred bytes per tensor; anything larger than this
// was not written by blockswapd.
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
constexpr size_t kModelNameLimitBytes = 1024;

// What every new model must satisfy, whichever way it comes in.
absl::Status ValidateNewModel(const ModelLayout& layout, absl::string_view name) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateLayout(layout));
  if (name.size() > kModelNameLimitBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name has ", name.size(), " bytes (limit ", kModelNameLimitBytes, ")"));
  }
  return absl::OkStatus();
}

// Sealed master files are read-only even for their owner: a client of the
// daemon's own uid holding the read-only descriptor OpenModel gave it cannot
// reopen it writable through /proc/self/fd (root can; root is trusted).
constexpr mode_t kSealedMastersMode = 0400;
constexpr mode_t kManifestMode = 0600;

// Checks that an open file is a regular file of ours with mode `mode`.
absl::Status CheckOwnFile(int fd, absl::string_view path, mode_t mode, struct stat* st) {
  if (::fstat(fd, st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat of ", path));
  if (!S_ISREG(st->st_mode) || st->st_uid != ::geteuid() || (st->st_mode & 07777) != mode) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a regular file of uid ", ::geteuid(), " with mode ", OctalMode(mode),
        " (uid ", st->st_uid, ", mode ", OctalMode(st->st_mode), ")"));
  }
  return absl::OkStatus();
}

// A read-write descriptor of a sealed master file of ours, opened read-only
// as `read_only`: pinning needs a writable mapping. The mode is lifted only
// for this open, in a directory nobody else may enter.
absl::StatusOr<UniqueFd> ReopenSealedMastersReadWrite(const UniqueFd& read_only,
                                                      absl::string_view path) {
  if (::fchmod(read_only.get(), 0600) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chmod 0600 ", path, " to map it"));
  }
  std::string self = absl::StrCat("/proc/self/fd/", read_only.get());
  UniqueFd writable(::open(self.c_str(), O_RDWR | O_CLOEXEC));
  int open_error = errno;
  if (::fchmod(read_only.get(), kSealedMastersMode) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chmod 0400 ", path));
  }
  if (!writable.valid()) return ErrnoStatus(open_error, absl::StrCat("opening ", path));
  return writable;
}

absl::StatusOr<std::string> ReadAll(int fd, size_t size, absl::string_view path) {
  std::string data(size, '\0');
  BLOCKSWAP_RETURN_IF_ERROR(ReadFully(fd, 0, data.data(), size, path));
  return data;
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const UniqueFd& directory,
                                                       absl::string_view path) {
  int copy = ::fcntl(directory.get(), F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return ErrnoStatus(errno, absl::StrCat("duplicating the descriptor of ", path));
  DIR* raw = ::fdopendir(copy);
  if (raw == nullptr) {
    int error = errno;
    ::close(copy);
    return ErrnoStatus(error, absl::StrCat("listing ", path));
  }
  std::unique_ptr<DIR, int (*)(DIR*)> dir(raw, &::closedir);
  ::rewinddir(dir.get());  // the duplicate shares the original's position
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(dir.get())) {
    absl::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
    errno = 0;
  }
  if (errno != 0) return ErrnoStatus(errno, absl::StrCat("listing ", path));
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

Model::~Model() = default;

const std::byte* Model::block(size_t b) const {
  if (b >= master_offsets_.size()) return nullptr;
  return static_cast<const std::byte*>(mapping_.data()) + master_offsets_[b];
}

uint64_t Model::block_bytes(size_t b) const {
  return b < layout_.blocks.size() ? layout_.blocks[b].bytes : 0;
}

uint64_t Model::master_offset(size_t b) const {
  return b < master_offsets_.size() ? master_offsets_[b] : 0;
}

absl::StatusOr<UniqueFd> Model::OpenReadOnly() const {
  auto fd = fd_.ReopenReadOnly();
  if (!fd.ok()) return Annotate(fd.status(), absl::StrCat("masters of model ", id_));
  return fd;
}

ModelStore::ModelStore(ModelStoreOptions options, Device* pin_device, UniqueFd directory_fd,
                       UniqueFd lock_fd)
    : options_(std::move(options)),
      pin_device_(pin_device),
      directory_fd_(std::move(directory_fd)),
      lock_fd_(std::move(lock_fd)),
      pinning_(options_.pinning, options_.max_pinned_bytes, pin_device) {}

ModelStore::~ModelStore() = default;

absl::StatusOr<std::unique_ptr<ModelStore>> ModelStore::Open(ModelStoreOptions options,
                                                             Device* pin_device) {
  const std::string& path = options.directory;
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd directory, OpenMastersDirectory(path));

  std::string lock_name(kLockName);
  int raw =
      ::openat(directory.get(), lock_name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("opening ", path, "/", kLockName));
  UniqueFd lock(raw);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat("another blockswapd is using ", path,
                                                        " (it holds the lock on ", path, "/",
                                                        kLockName, ")"));
    }
    return ErrnoStatus(errno, absl::StrCat("locking ", path, "/", kLockName));
  }

  std::unique_ptr<ModelStore> store(
      new ModelStore(std::move(options), pin_device, std::move(directory), std::move(lock)));
  BLOCKSWAP_RETURN_IF_ERROR(store->AdoptAll());
  return store;
}

std::string ModelStore::PathOf(absl::string_view name) const {
  return absl::StrCat(options_.directory, "/", name);
}

void ModelStore::RemoveQuietly(const std::string& name) const {
  ::unlinkat(directory_fd_.get(), name.c_str(), 0);
}

absl::Status ModelStore::Pin(Model& model) const {
  BLOCKSWAP_ASSIGN_OR_RETURN(
      model.residency_,
      pinning_.PinOrStage(model.mapping_.data(), model.masters_bytes_,
                          absl::StrCat("model ", model.id_, " ('", model.name_, "')")));
  return absl::OkStatus();
}

absl::Status ModelStore::CheckBudget(uint64_t bytes) const {
  // Otherwise what max_pinned_bytes cannot take is staged (Pin).
  if (options_.pinning != PinningPolicy::kAlways) return absl::OkStatus();
  // Registrations in progress count: their reservations are promises.
  uint64_t committed = pinned_bytes_ + reserved_bytes_;
  uint64_t limit = options_.max_pinned_bytes;
  if (limit != 0 && (bytes > limit || committed > limit - bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model of ", bytes, " bytes would exceed --max-pinned-bytes=", limit, " (",
                     committed, " already pinned)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Reservation> ModelStore::ChargeMemory(uint64_t bytes, absl::string_view name) const {
  if (options_.memory_budget == nullptr) return Reservation();
  return options_.memory_budget->Reserve(
      MemoryUse::kMasters, bytes,
      absl::StrCat("the masters of model '", name, "' (", bytes, " bytes)"));
}

absl::Status ModelStore::CheckFreeSpace(uint64_t bytes) const {
  struct statvfs fs {};
  if (::fstatvfs(directory_fd_.get(), &fs) != 0) {
    return ErrnoStatus(errno, absl::StrCat("statvfs of ", options_.directory));
  }
  uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes < bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("model of ", bytes,
                                                     " bytes does not fit: ", options_.directory,
                                                     " has ", free_bytes, " bytes free"));
  }
  return absl::OkStatus();
}

absl::Status ModelStore::CheckCapacity(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  return MakeRoomLocked(bytes);
}

absl::StatusOr<std::unique_ptr<Model>> ModelStore::LoadSealed(const std::string& id) const {
  std::string manifest_name = absl::StrCat(id, kManifestSuffix);
  std::string manifest_path = PathOf(manifest_name);
  int raw = ::openat(directory_fd_.get(), manifest_name.c_str(),
                     O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("opening ", manifest_path));
  UniqueFd manifest_fd(raw);
  struct stat st {};
  BLOCKSWAP_RETURN_IF_ERROR(CheckOwnFile(manifest_fd.get(), manifest_path, kManifestMode, &st));
  if (static_cast<uint64_t>(st.st_size) > kMaxManifestBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(manifest_path, " has ", st.st_size, " bytes (limit ", kMaxManifestBytes, ")"));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(std::string text,
                             ReadAll(manifest_fd.get(), st.st_size, manifest_path));
  auto parsed = ParseManifest(text);
  if (!parsed.ok()) return Annotate(parsed.status(), manifest_path);
  Manifest& manifest = *parsed;
  if (manifest.id != id) {
    return absl::FailedPreconditionError(
        absl::StrCat(manifest_path, " names model ", manifest.id.substr(0, 80)));
  }
  absl::Status valid = ValidateLayout(manifest.layout);
  if (!valid.ok()) return Annotate(valid, manifest_path);
  BLOCKSWAP_ASSIGN_OR_RETURN(BlockPlacement placement, MasterOffsets(manifest.layout));
  if (manifest.block_hashes.size() != manifest.layout.blocks.size() ||
      manifest.master_offsets != placement.offsets ||
      manifest.masters_bytes != placement.total_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(manifest_path,
                     ": block hashes, master offsets or masters_bytes do not "
                     "match its layout"));
  }
  std::string recomputed = ModelId(manifest.layout, manifest.block_hashes);
  if (recomputed != id) {
    return absl::FailedPreconditionError(
        absl::StrCat(manifest_path, ": its layout and block hashes give id ", recomputed));
  }

  std::string masters_name = absl::StrCat(id, kMastersSuffix);
  std::string masters_path = PathOf(masters_name);
  raw = ::openat(directory_fd_.get(), masters_name.c_str(),
                 O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("opening ", masters_path));
  UniqueFd read_only(raw);
  BLOCKSWAP_RETURN_IF_ERROR(CheckOwnFile(read_only.get(), masters_path, kSealedMastersMode, &st));
  auto model = std::unique_ptr<Model>(new Model());
  BLOCKSWAP_ASSIGN_OR_RETURN(model->fd_, ReopenSealedMastersReadWrite(read_only, masters_path));
  if (static_cast<uint64_t>(st.st_size) != manifest.masters_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        masters_path, " has ", st.st_size, " bytes, its manifest says ", manifest.masters_bytes));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(model->mapping_, Mapping::Map(model->fd_, manifest.masters_bytes,
                                                           Access::kReadWrite, /*populate=*/true));
  model->id_ = id;
  model->name_ = std::move(manifest.name);
  model->source_ = std::move(manifest.source);
  model->registrants_.Replace(std::move(manifest.registrants));
  model->layout_ = std::move(manifest.layout);
  model->block_hashes_ = std::move(manifest.block_hashes);
  model->master_offsets_ = std::move(manifest.master_offsets);
  model->masters_bytes_ = manifest.masters_bytes;
  return model;
}

absl::Status ModelStore::AdoptAll() {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<std::string> names,
                             ListDirectory(directory_fd_, options_.directory));
  absl::MutexLock lock(&mu_);
  std::set<std::string, std::less<>> keep = {std::string(kLockName)};
  for (const std::string& name : names) {
    if (!absl::EndsWith(name, kManifestSuffix)) continue;
    std::string id = name.substr(0, name.size() - kManifestSuffix.size());
    if (!IsModelId(id)) continue;
    auto model = LoadSealed(id);
    if (!model.ok()) continue;  // removed below with everything else
    uint64_t bytes = (*model)->masters_bytes();
    if (options_.pinning == PinningPolicy::kAlways && options_.max_pinned_bytes != 0 &&
        bytes > options_.max_pinned_bytes - pinned_bytes_) {
      continue;  // a lowered --max-pinned-bytes: the model goes
    }
    absl::StatusOr<Reservation> memory = ChargeMemory(bytes, (*model)->name());
    if (!memory.ok()) continue;  // a lowered max_memory_bytes: the model goes
    (*model)->memory_ = *std::move(memory);
    // A model that cannot be pinned is not the directory's fault (the device
    // or the memlock limit is): the daemon must not start half-working.
    BLOCKSWAP_RETURN_IF_ERROR(Pin(**model));
    keep.insert(name);
    keep.insert(absl::StrCat(id, kMastersSuffix));
    pinned_bytes_ += bytes;
    ++stats_.adopted;
    models_.emplace(id, std::shared_ptr<const Model>(std::move(model).value()));
  }
  for (const std::string& name : names) {
    if (keep.contains(name)) continue;
    if (::unlinkat(directory_fd_.get(), name.c_str(), 0) != 0 &&
        (errno != EISDIR || ::unlinkat(directory_fd_.get(), name.c_str(), AT_REMOVEDIR) != 0)) {
      return ErrnoStatus(errno, absl::StrCat("removing the stray entry ", PathOf(name)));
    }
    ++stats_.removed;
  }
  return absl::OkStatus();
}

absl::Status ModelStore::CreateMasterFile(Model& model, const std::string& temp,
                                          bool allocate) const {
  const uint64_t size = model.masters_bytes_;
  int raw = ::openat(directory_fd_.get(), temp.c_str(),
                     O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("creating ", PathOf(temp)));
  model.fd_ = UniqueFd(raw);
  // The adoption check wants exactly 0600, whatever the umask.
  if (::fchmod(model.fd_.get(), 0600) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chmod 0600 ", PathOf(temp)));
  }
  if (allocate) {
    // Reserves the tmpfs pages now: a full /dev/shm is this error, not a
    // SIGBUS in the middle of the copy.
    int rc = ::posix_fallocate(model.fd_.get(), 0, static_cast<off_t>(size));
    if (rc != 0) {
      return ErrnoStatus(rc, absl::StrCat("reserving ", size, " bytes for ", PathOf(temp)));
    }
  } else if (::ftruncate(model.fd_.get(), static_cast<off_t>(size)) != 0) {
    return ErrnoStatus(errno, absl::StrCat("sizing ", PathOf(temp), " to ", size, " bytes"));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(model.mapping_,
                             Mapping::Map(model.fd_, size, Access::kReadWrite, allocate));
  return absl::OkStatus();
}

absl::Status ModelStore::WriteManifestFile(const Model& model,
                                           const std::vector<Registrant>& registrants,
                                           const std::string& temp) const {
  int raw = ::openat(directory_fd_.get(), temp.c_str(),
                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, kManifestMode);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("creating ", PathOf(temp)));
  UniqueFd manifest(raw);
  if (::fchmod(manifest.get(), kManifestMode) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chmod 0600 ", PathOf(temp)));
  }
  const std::string json =
      EncodeManifest({model.id_, model.name_, model.source_, registrants, model.layout_,
                      model.block_hashes_, model.master_offsets_, model.masters_bytes_});
  BLOCKSWAP_RETURN_IF_ERROR(WriteFully(manifest.get(), 0, json.data(), json.size(), PathOf(temp)));
  if (::fsync(manifest.get()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fsync of ", PathOf(temp)));
  }
  return absl::OkStatus();
}

absl::Status ModelStore::AddRegistrant(const std::shared_ptr<const Model>& model,
                                       const Registrant& registrant) {
  absl::MutexLock manifest_lock(&manifest_mu_);
  std::vector<Registrant> with = model->registrants_.With(registrant);
  if (with.empty()) return absl::OkStatus();
  const std::string manifest_name = absl::StrCat(model->id_, kManifestSuffix);
  // Not SealMaster's temporary name: a registration of the same id after an
  // eviction may be sealing meanwhile.
  const std::string temp = absl::StrCat(manifest_name, ".registrants", kTempSuffix);
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
    if (::renameat(directory_fd_.get(), temp.c_str(), directory_fd_.get(), manifest_name.c_str()) !=
        0) {
      absl::Status error = ErrnoStatus(errno, absl::StrCat("renaming ", PathOf(temp)));
      RemoveQuietly(temp);
      return error;
    }
    return absl::OkStatus();
  };
  if (absl::Status recorded = record(); !recorded.ok()) {
    RemoveQuietly(temp);
    return Annotate(recorded, absl::StrCat("recording uid ", registrant.uid,
                                           " as a registrant of model ", model->id_));
  }
  model->registrants_.Replace(std::move(with));
  return absl::OkStatus();
}

absl::Status ModelStore::SealMaster(Model& model, const std::string& masters_temp) const {
  const std::string masters_name = absl::StrCat(model.id_, kMastersSuffix);
  const std::string manifest_name = absl::StrCat(model.id_, kManifestSuffix);
  const std::string manifest_temp = absl::StrCat(manifest_name, kTempSuffix);
  const int dir = directory_fd_.get();
  auto seal = [&]() -> absl::Status {
    if (::fsync(model.fd_.get()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("fsync of ", PathOf(masters_temp)));
    }
    // From here nobody opens it for writing again (the daemon's own mapping
    // stays writable, for pinning).
    if (::fchmod(model.fd_.get(), kSealedMastersMode) != 0) {
      return ErrnoStatus(errno, absl::StrCat("chmod 0400 ", PathOf(masters_temp)));
    }
    BLOCKSWAP_RETURN_IF_ERROR(WriteManifestFile(model, model.registrants_.List(), manifest_temp));
    // Pinned before the commit, so that a model that cannot be pinned leaves
    // only temporary files to remove.
    BLOCKSWAP_RETURN_IF_ERROR(Pin(model));
    if (::renameat(dir, masters_temp.c_str(), dir, masters_name.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("renaming ", PathOf(masters_temp)));
    }
    // The commit point: from here a restarted daemon adopts the model.
    if (::renameat(dir, manifest_temp.c_str(), dir, manifest_name.c_str()) != 0) {
      absl::Status error = ErrnoStatus(errno, absl::StrCat("renaming ", PathOf(manifest_temp)));
      RemoveQuietly(masters_name);
      return error;
    }
    // The model is committed whatever this says; on tmpfs it is a no-op.
    ::fsync(dir);
    return absl::OkStatus();
  };
  absl::Status status = seal();
  if (!status.ok()) {
    model.residency_ = MasterResidency();
    RemoveQuietly(masters_temp);
    RemoveQuietly(manifest_temp);
  }
  return status;
}

absl::StatusOr<std::unique_ptr<Model>> ModelStore::WriteMaster(std::unique_ptr<Model> model,
                                                               const std::byte* content,
                                                               const BlockPlacement& staging) {
  const std::string masters_temp = absl::StrCat(model->id_, kMastersSuffix, kTempSuffix);
  auto write = [&]() -> absl::Status {
    BLOCKSWAP_RETURN_IF_ERROR(CheckFreeSpace(model->masters_bytes_));
    BLOCKSWAP_RETURN_IF_ERROR(CreateMasterFile(*model, masters_temp, /*allocate=*/true));
    auto* master = static_cast<std::byte*>(model->mapping_.data());
    return ParallelFor(model->block_count(), [&](size_t b) {
      std::memcpy(master + model->master_offsets_[b], content + staging.offsets[b],
                  model->layout_.blocks[b].bytes);
      return absl::OkStatus();
    });
  };
  absl::Status status = write();
  if (!status.ok()) {
    RemoveQuietly(masters_temp);
    return status;
  }
  BLOCKSWAP_RETURN_IF_ERROR(SealMaster(*model, masters_temp));
  return model;
}

absl::StatusOr<RegisterResult> ModelStore::Register(absl::string_view name,
                                                    const ModelLayout& layout,
                                                    const std::byte* content, size_t content_bytes,
                                                    const Registrant& registrant) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateNewModel(layout, name));
  BLOCKSWAP_ASSIGN_OR_RETURN(BlockPlacement staging, StagingOffsets(layout));
  if (content == nullptr || content_bytes < staging.total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("content has ", content_bytes,
                                                   " bytes; the layout's staging area needs ",
                                                   staging.total_bytes));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(BlockPlacement master, MasterOffsets(layout));

  std::vector<Sha256Digest> hashes(layout.blocks.size());
  BLOCKSWAP_RETURN_IF_ERROR(ParallelFor(layout.blocks.size(), [&](size_t b) {
    const std::byte* block = content + staging.offsets[b];
    absl::Status padding = CheckBlockPadding(layout.blocks[b], block);
    if (!padding.ok()) return Annotate(padding, absl::StrCat("block ", b));
    hashes[b] = Sha256Of(block, layout.blocks[b].bytes);
    return absl::OkStatus();
  }));
  std::string id = ModelId(layout, hashes);

  Reservation memory;
  std::shared_ptr<const Model> existing;
  {
    absl::MutexLock lock(&mu_);
    existing = FindOrAwaitLocked(id);
    if (existing == nullptr) {
      BLOCKSWAP_RETURN_IF_ERROR(MakeRoomLocked(master.total_bytes));
      BLOCKSWAP_ASSIGN_OR_RETURN(memory, ChargeMemory(master.total_bytes, name));
      in_progress_.insert(id);
      reserved_bytes_ += master.total_bytes;
    }
  }
  if (existing != nullptr) {
    BLOCKSWAP_RETURN_IF_ERROR(AddRegistrant(existing, registrant));
    return RegisterResult{.model = std::move(existing), .already_present = true};
  }

  auto model = std::unique_ptr<Model>(new Model());
  model->memory_ = std::move(memory);
  model->id_ = id;
  model->name_ = std::string(name);
  model->source_ = registrant.source;
  model->registrants_.Replace({registrant});
  model->layout_ = layout;
  model->block_hashes_ = std::move(hashes);
  model->master_offsets_ = std::move(master.offsets);
  model->masters_bytes_ = master.total_bytes;
  auto written = WriteMaster(std::move(model), content, staging);

  absl::MutexLock lock(&mu_);
  in_progress_.erase(id);
  reserved_bytes_ -= master.total_bytes;
  registration_done_.SignalAll();
  if (!written.ok()) return written.status();
  return RegisterResult{.model = PublishLocked(std::move(written).value()),
                        .already_present = false};
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
  return pinned_bytes_;
}

uint64_t ModelStore::pinned_bytes() const { return pinning_.pinned_bytes(); }

ModelStoreStats ModelStore::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

uint64_t ModelStore::References(const std::shared_ptr<const Model>& model) {
  long count = model.use_count();
  return count > 1 ? static_cast<uint64_t>(count - 1) : 0;
}

void ModelStore::TouchLocked(const std::string& id) const { last_use_[id] = ++use_clock_; }

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

std::shared_ptr<const Model> ModelStore::PublishLocked(std::unique_ptr<Model> model) {
  std::shared_ptr<const Model> sealed = std::move(model);
  models_.emplace(sealed->id(), sealed);
  TouchLocked(sealed->id());
  pinned_bytes_ += sealed->masters_bytes();
  ++stats_.copies;
  return sealed;
}

void ModelStore::EvictLocked(const std::string& id) {
  auto it = models_.find(id);
  if (it == models_.end()) return;
  // The manifest first: without it a restarted daemon adopts nothing.
  RemoveQuietly(absl::StrCat(id, kManifestSuffix));
  RemoveQuietly(absl::StrCat(id, kMastersSuffix));
  pinned_bytes_ -= it->second->masters_bytes();
  ++stats_.evicted;
  last_use_.erase(id);
  models_.erase(it);  // unpins and unmaps: nobody else holds it
}

absl::Status ModelStore::MakeRoomLocked(uint64_t bytes) {
  while (true) {
    absl::Status fits = CheckBudget(bytes);
    if (fits.ok() && options_.memory_budget != nullptr) {
      fits = options_.memory_budget->CheckFits(bytes, absl::StrCat("a model of ", bytes, " bytes"));
    }
    if (fits.ok()) fits = CheckFreeSpace(bytes);
    if (fits.ok()) return fits;
    const std::string* victim = nullptr;
    uint64_t oldest = UINT64_MAX;
    for (const auto& [id, model] : models_) {
      if (References(model) != 0) continue;
      auto use = last_use_.find(id);
      uint64_t tick = use == last_use_.end() ? 0 : use->second;
      if (victim == nullptr || tick < oldest) victim = &id, oldest = tick;
    }
    if (victim == nullptr) return fits;
    std::string id = *victim;
    EvictLocked(id);
  }
}

void ModelStore::ReleaseReservation(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  reserved_bytes_ -= bytes;
}

absl::Status NoSuchModelError(absl::string_view id) {
  return absl::NotFoundError(absl::StrCat("no model ", id.substr(0, 80), " in this blockswapd"));
}

absl::Status ModelStore::Evict(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(id);
  if (it == models_.end()) return NoSuchModelError(id);
  if (uint64_t refs = References(it->second); refs != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", it->first, " is still referenced ", refs,
                     " time(s) (open in sessions or loads in flight); it can be evicted once "
                     "no session holds it"));
  }
  EvictLocked(it->first);
  return absl::OkStatus();
}

absl::StatusOr<VerifyResult> ModelStore::Verify(absl::string_view id) const {
  std::shared_ptr<const Model> model = Find(id);
  if (model == nullptr) return NoSuchModelError(id);
  std::vector<char> bad(model->block_count(), 0);
  BLOCKSWAP_RETURN_IF_ERROR(ParallelFor(model->block_count(), [&](size_t b) {
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

MasterDraft::~MasterDraft() {
  model_.reset();  // unmaps and closes
  if (store_ == nullptr) return;
  if (!temp_name_.empty()) store_->RemoveQuietly(temp_name_);
  if (reserved_ != 0) store_->ReleaseReservation(reserved_);
}

const ModelLayout& MasterDraft::layout() const { return model_->layout_; }

absl::Status MasterDraft::Write(size_t b, uint64_t offset, const void* data,
                               size_t bytes) const {
  return WriteFully(model_->fd_.get(), model_->master_offsets_[b] + offset, data, bytes,
                    absl::StrCat("block ", b, " into ", store_->PathOf(temp_name_)));
}

absl::StatusOr<std::unique_ptr<MasterDraft>> ModelStore::BeginDraft(const ModelLayout& layout,
                                                                    absl::string_view name,
                                                                    const Registrant& registrant) {
  BLOCKSWAP_RETURN_IF_ERROR(ValidateNewModel(layout, name));
  BLOCKSWAP_ASSIGN_OR_RETURN(BlockPlacement master, MasterOffsets(layout));
  auto draft = std::unique_ptr<MasterDraft>(new MasterDraft());
  Reservation memory;
  {
    absl::MutexLock lock(&mu_);
    BLOCKSWAP_RETURN_IF_ERROR(MakeRoomLocked(master.total_bytes));
    BLOCKSWAP_ASSIGN_OR_RETURN(memory, ChargeMemory(master.total_bytes, name));
    reserved_bytes_ += master.total_bytes;
    draft->store_ = this;
    draft->reserved_ = master.total_bytes;
    draft->temp_name_ = absl::StrCat("draft-", next_draft_++, kMastersSuffix, kTempSuffix);
  }
  draft->model_ = std::unique_ptr<Model>(new Model());
  Model& model = *draft->model_;
  model.memory_ = std::move(memory);
  model.name_ = std::string(name);
  model.source_ = registrant.source;
  model.registrants_.Replace({registrant});
  model.layout_ = layout;
  model.master_offsets_ = std::move(master.offsets);
  model.masters_bytes_ = master.total_bytes;
  BLOCKSWAP_RETURN_IF_ERROR(CreateMasterFile(model, draft->temp_name_, /*allocate=*/false));
  return draft;
}

absl::StatusOr<RegisterResult> ModelStore::CommitDraft(std::unique_ptr<MasterDraft> draft,
                                                       std::vector<Sha256Digest> hashes) {
  Model& model = *draft->model_;
  if (hashes.size() != model.block_count()) {
    return absl::InvalidArgumentError(absl::StrCat(hashes.size(), " block hashes for ",
                                                   model.block_count(), " blocks"));
  }
  // The padding the writer left as holes is reserved now, before anyone maps
  // the master: a full tmpfs is this error, never a SIGBUS later.
  if (int rc = ::posix_fallocate(model.fd_.get(), 0, static_cast<off_t>(model.masters_bytes_));
      rc != 0) {
    absl::Status status = ErrnoStatus(rc, absl::StrCat("reserving ", model.masters_bytes_,
                                                       " bytes for ", PathOf(draft->temp_name_)));
    if (rc == ENOSPC) return absl::ResourceExhaustedError(status.message());
    return status;
  }
  std::string id = ModelId(model.layout_, hashes);
  std::shared_ptr<const Model> existing;
  {
    absl::MutexLock lock(&mu_);
    existing = FindOrAwaitLocked(id);
    if (existing == nullptr) in_progress_.insert(id);
  }
  if (existing != nullptr) {
    const std::vector<Registrant> registrants = model.registrants_.List();
    draft.reset();  // outside the lock: it takes it to return its reservation
    for (const Registrant& registrant : registrants) {
      BLOCKSWAP_RETURN_IF_ERROR(AddRegistrant(existing, registrant));
    }
    return RegisterResult{.model = std::move(existing), .already_present = true};
  }
  model.id_ = id;
  model.block_hashes_ = std::move(hashes);
  absl::Status sealed = SealMaster(model, draft->temp_name_);
  draft->temp_name_.clear();  // renamed, or removed by SealMaster
  uint64_t reserved = std::exchange(draft->reserved_, 0);
  std::unique_ptr<Model> owned = std::move(draft->model_);
  draft.reset();
  absl::MutexLock lock(&mu_);
  in_progress_.erase(id);
  reserved_bytes_ -= reserved;
  registration_done_.SignalAll();
  if (!sealed.ok()) return sealed;
  return RegisterResult{.model = PublishLocked(std::move(owned)), .already_present = false};
}

}  // namespace blockswap::daemon
