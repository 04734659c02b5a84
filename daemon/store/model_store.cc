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
#include "daemon/budget/master_limits.h"
#include "daemon/os/logging.h"
#include "daemon/store/manifest.h"
#include "daemon/store/masters_directory.h"
#include "daemon/store/parallel_for.h"
#include "shared/base/file_io.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

constexpr absl::string_view kLockName = ".lock";
constexpr absl::string_view kBlockSuffix = ".block";
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

std::string BlockFileName(absl::string_view block_id) {
  return absl::StrCat(block_id, kBlockSuffix);
}

using BlockMasters = std::vector<std::shared_ptr<const BlockMaster>>;

// The distinct blocks of a model (positions with equal blocks share one),
// in first-position order.
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

}  // namespace

Model::~Model() = default;

const std::byte* Model::block(size_t b) const {
  return b < blocks_.size() ? blocks_[b]->data() : nullptr;
}

uint64_t Model::block_bytes(size_t b) const {
  return b < layout_.blocks.size() ? layout_.blocks[b].bytes : 0;
}

bool Model::pinned() const {
  return std::all_of(blocks_.begin(), blocks_.end(),
                     [](const auto& block) { return block->pinned(); });
}

size_t Model::staged_blocks() const {
  return std::count_if(blocks_.begin(), blocks_.end(),
                       [](const auto& block) { return block->staged(); });
}

ModelStore::ModelStore(ModelStoreOptions options, Device* pin_device, UniqueFd directory_fd,
                       UniqueFd lock_fd)
    : options_(std::move(options)),
      pin_device_(pin_device),
      directory_fd_(std::make_shared<const UniqueFd>(std::move(directory_fd))),
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
  ::unlinkat(directory_fd_->get(), name.c_str(), 0);
}

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

absl::Status ModelStore::CheckBudget(uint64_t bytes) const {
  // Otherwise what max_pinned_bytes cannot take is staged (Pin).
  if (options_.pinning != PinningPolicy::kAlways) return absl::OkStatus();
  // Registrations in progress count: their reservations are promises.
  uint64_t committed = block_bytes_ + reserved_bytes_;
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
      MemoryUse::kMasters, bytes + kBlockOverheadBytes,
      absl::StrCat("a block master of model '", name, "' (", bytes, " bytes + ", kBlockOverheadBytes,
                   " of descriptor, mapping and inode)"));
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

absl::Status ModelStore::CheckFreeSpace(uint64_t bytes) const {
  struct statvfs fs {};
  if (::fstatvfs(directory_fd_->get(), &fs) != 0) {
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

absl::Status ModelStore::CheckCapacity(uint64_t bytes, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  return MakeRoomLocked(bytes, blocks);
}

absl::StatusOr<UniqueFd> ModelStore::OpenOwnFile(const std::string& name, mode_t mode,
                                                 struct stat* st) const {
  int raw =
      ::openat(directory_fd_->get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("opening ", PathOf(name)));
  UniqueFd fd(raw);
  BLOCKSWAP_RETURN_IF_ERROR(CheckOwnFile(fd.get(), PathOf(name), mode, st));
  return fd;
}

absl::StatusOr<Manifest> ModelStore::ReadManifest(const std::string& id) const {
  std::string manifest_name = absl::StrCat(id, kManifestSuffix);
  std::string manifest_path = PathOf(manifest_name);
  struct stat st {};
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd manifest_fd, OpenOwnFile(manifest_name, kManifestMode, &st));
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
  // Every block fits one pinned piece.
  BLOCKSWAP_RETURN_IF_ERROR(MasterOffsets(manifest.layout).status());
  const size_t blocks = manifest.layout.blocks.size();
  if (manifest.block_hashes.size() != blocks || manifest.block_ids.size() != blocks) {
    return absl::FailedPreconditionError(absl::StrCat(
        manifest_path, ": ", manifest.block_hashes.size(), " block hashes and ",
        manifest.block_ids.size(), " block ids for a layout of ", blocks, " blocks"));
  }
  std::string recomputed = ModelId(manifest.layout, manifest.block_hashes);
  if (recomputed != id) {
    return absl::FailedPreconditionError(
        absl::StrCat(manifest_path, ": its layout and block hashes give id ", recomputed));
  }
  for (size_t b = 0; b < manifest.block_ids.size(); ++b) {
    if (manifest.block_ids[b] != BlockId(manifest.layout.blocks[b], manifest.block_hashes[b])) {
      return absl::FailedPreconditionError(absl::StrCat(
          manifest_path, ": block ", b, " names block id ", manifest.block_ids[b].substr(0, 80),
          ", not the one of its layout and hash"));
    }
  }
  return manifest;
}

absl::StatusOr<std::unique_ptr<BlockMaster>> ModelStore::LoadBlock(const std::string& block_id,
                                                                   uint64_t bytes) const {
  const std::string name = BlockFileName(block_id);
  const std::string path = PathOf(name);
  struct stat st {};
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd read_only, OpenOwnFile(name, kSealedMastersMode, &st));
  auto block = std::unique_ptr<BlockMaster>(new BlockMaster());
  block->id_ = block_id;
  block->bytes_ = bytes;
  if (static_cast<uint64_t>(st.st_size) != block->file_bytes()) {
    return absl::FailedPreconditionError(absl::StrCat(path, " has ", st.st_size, " bytes, not the ",
                                                      block->file_bytes(), " of a block of ", bytes,
                                                      " bytes"));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(block->fd_, ReopenSealedMastersReadWrite(read_only, path));
  BLOCKSWAP_ASSIGN_OR_RETURN(block->mapping_, Mapping::Map(block->fd_, block->file_bytes(),
                                                           Access::kReadWrite, /*populate=*/true));
  BLOCKSWAP_RETURN_IF_ERROR(FinishSealed(*block));
  return block;
}

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

absl::Status ModelStore::AdoptBlocksLocked(Model& model, absl::Status* fatal) {
  const size_t count = model.block_count();
  model.blocks_.assign(count, nullptr);
  std::map<std::string, std::shared_ptr<const BlockMaster>, std::less<>> fresh;
  uint64_t new_bytes = 0;
  std::vector<const BlockMaster*> adopted;
  for (size_t b = 0; b < count; ++b) {
    const std::string block_id = BlockId(model.layout_.blocks[b], model.block_hashes_[b]);
    if (auto held = blocks_.find(block_id); held != blocks_.end()) {
      model.blocks_[b] = held->second.master;
      continue;
    }
    if (auto it = fresh.find(block_id); it != fresh.end()) {
      model.blocks_[b] = it->second;
      continue;
    }
    const uint64_t file_bytes = BlockFileBytes(model.layout_.blocks[b].bytes);
    if (options_.pinning == PinningPolicy::kAlways && options_.max_pinned_bytes != 0 &&
        new_bytes + file_bytes >
            options_.max_pinned_bytes - std::min(block_bytes_, options_.max_pinned_bytes)) {
      // A lowered --max-pinned-bytes.
      return absl::ResourceExhaustedError(
          absl::StrCat("its blocks would exceed --max-pinned-bytes=", options_.max_pinned_bytes));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<BlockMaster> block,
                               LoadBlock(block_id, model.layout_.blocks[b].bytes));
    // A lowered max_memory_bytes: the model goes.
    BLOCKSWAP_ASSIGN_OR_RETURN(block->memory_, ChargeMemory(file_bytes, model.name_));
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

void ModelStore::PublishAdoptedLocked(std::unique_ptr<Model> model) {
  for (const auto& block : DistinctBlocks(model->blocks_)) {
    auto [it, inserted] = blocks_.try_emplace(block->id());
    if (inserted) {
      it->second.master = block;
      block_bytes_ += block->file_bytes();
    }
    ++it->second.models;
  }
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
  BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<std::string> names,
                             ListDirectory(*directory_fd_, options_.directory));
  absl::MutexLock lock(&mu_);
  std::set<std::string, std::less<>> keep = {std::string(kLockName)};
  // Prefixes of the manifests this daemon cannot read (a newer format):
  // they and every file beside them stay where they are.
  std::vector<std::string> unknown;
  for (const std::string& name : names) {
    if (!absl::EndsWith(name, kManifestSuffix)) continue;
    std::string id = name.substr(0, name.size() - kManifestSuffix.size());
    if (!IsModelId(id)) continue;
    absl::StatusOr<Manifest> manifest = ReadManifest(id);
    if (absl::IsUnimplemented(manifest.status())) {
      Log(LogLevel::kWarning,
          absl::StrCat(
              manifest.status().message(), ". Model ", id, " is left in place with every file in ",
              options_.directory, " and not counted; run the blockswapd that wrote it, or remove ",
              PathOf(absl::StrCat(id, ".*")), " (and its block files) once it is not needed"));
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
  for (const auto& [block_id, block] : blocks_) keep.insert(BlockFileName(block_id));
  for (const std::string& name : names) {
    if (keep.contains(name)) continue;
    const bool temporary = absl::EndsWith(name, kTempSuffix);
    // Any file may belong to a manifest of a newer format: only our
    // temporary files go while one is here.
    if (!unknown.empty() && !temporary) continue;
    if (::unlinkat(directory_fd_->get(), name.c_str(), 0) != 0 &&
        (errno != EISDIR || ::unlinkat(directory_fd_->get(), name.c_str(), AT_REMOVEDIR) != 0)) {
      return ErrnoStatus(errno, absl::StrCat("removing the stray entry ", PathOf(name)));
    }
    ++stats_.removed;
  }
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
    if (::renameat(directory_fd_->get(), temp.c_str(), directory_fd_->get(), manifest_name.c_str()) !=
        0) {
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

ModelStore::BlockClaim ModelStore::ClaimBlocksLocked(const std::vector<std::string>& ids,
                                                     const std::vector<uint64_t>& bytes) {
  // All or nothing: a registration that waited holding claims could wait for
  // one that waits for it.
  auto busy = [&] {
    for (const std::string& block_id : ids) {
      if (!blocks_.contains(block_id) && blocks_in_progress_.contains(block_id)) return true;
    }
    return false;
  };
  while (busy()) registration_done_.Wait(&mu_);
  BlockClaim claim;
  claim.held.resize(ids.size());
  std::set<absl::string_view> seen;
  for (size_t b = 0; b < ids.size(); ++b) {
    const bool first = seen.insert(ids[b]).second;
    if (auto it = blocks_.find(ids[b]); it != blocks_.end()) {
      claim.held[b] = it->second.master;
      if (first) {
        ++it->second.claims;
        claim.held_ids.push_back(ids[b]);
      }
    } else if (first) {
      blocks_in_progress_.insert(ids[b]);
      claim.claimed.push_back(ids[b]);
      claim.claimed_positions.push_back(b);
      claim.missing_bytes += BlockFileBytes(bytes[b]);
    }
  }
  return claim;
}

void ModelStore::ReleaseBlockLocked(const std::string& block_id, uint64_t HeldBlock::*field) {
  auto it = blocks_.find(block_id);
  if (it == blocks_.end()) return;
  --(it->second.*field);
  if (it->second.models != 0 || it->second.claims != 0) return;
  RemoveQuietly(BlockFileName(block_id));
  block_bytes_ -= it->second.master->file_bytes();
  blocks_.erase(it);  // unpins and unmaps once no Model holds it
}

void ModelStore::EndClaimLocked(const BlockClaim& claim, bool published) {
  for (const std::string& block_id : claim.claimed) blocks_in_progress_.erase(block_id);
  for (const std::string& block_id : claim.held_ids) {
    if (published) ++blocks_.at(block_id).models;
    ReleaseBlockLocked(block_id, &HeldBlock::claims);
  }
}

absl::StatusOr<RegisterResult> ModelStore::RegisterHashed(std::unique_ptr<Model> model,
                                                          bool charged, const BlockWriter& write) {
  const size_t count = model->block_count();
  std::vector<std::string> ids(count);
  std::vector<uint64_t> bytes(count);
  for (size_t b = 0; b < count; ++b) {
    ids[b] = BlockId(model->layout_.blocks[b], model->block_hashes_[b]);
    bytes[b] = model->layout_.blocks[b].bytes;
  }
  model->id_ = ModelId(model->layout_, model->block_hashes_);
  const std::string id = model->id_;
  // A registration has one registrant; the uid is charged every distinct
  // block, held or not.
  const uid_t uid = model->registrants_.List().front().uid;
  std::vector<BlockRef> refs;
  {
    std::set<absl::string_view> seen;
    for (size_t b = 0; b < count; ++b) {
      if (seen.insert(ids[b]).second) refs.push_back({ids[b], BlockFileBytes(bytes[b])});
    }
  }

  BlockClaim claim;
  std::vector<Reservation> memory;
  uint64_t reserved = 0;
  uint64_t reserved_blocks = 0;
  std::shared_ptr<const Model> existing;
  {
    absl::MutexLock lock(&mu_);
    // First, and from the uid's own holds alone: the same answer whether or
    // not anyone holds this content.
    BLOCKSWAP_RETURN_IF_ERROR(uid_holds_.Check(uid, refs, options_.uid_limits));
    existing = FindOrAwaitLocked(id);
    if (existing == nullptr) {
      // Again: the wait may have let another registration of the uid in.
      BLOCKSWAP_RETURN_IF_ERROR(uid_holds_.Check(uid, refs, options_.uid_limits));
      in_progress_.insert(id);
      claim = ClaimBlocksLocked(ids, bytes);
      absl::Status room =
          charged ? absl::OkStatus() : MakeRoomLocked(claim.missing_bytes, claim.claimed.size());
      for (size_t i = 0; room.ok() && !charged && i < claim.claimed.size(); ++i) {
        absl::StatusOr<Reservation> charge =
            ChargeMemory(BlockFileBytes(bytes[claim.claimed_positions[i]]), model->name_);
        room = charge.status();
        if (charge.ok()) memory.push_back(*std::move(charge));
      }
      if (!room.ok()) {
        memory.clear();
        EndClaimLocked(claim, /*published=*/false);
        in_progress_.erase(id);
        registration_done_.SignalAll();
        return room;
      }
      if (!charged) reserved = claim.missing_bytes, reserved_blocks = claim.claimed.size();
      reserved_bytes_ += reserved;
      reserved_blocks_ += reserved_blocks;
      // Charged before the blocks are written, so that concurrent
      // registrations of one uid cannot together pass its limits.
      uid_holds_.Add(uid, refs);
    }
  }
  if (existing != nullptr) {
    for (const Registrant& registrant : model->registrants_.List()) {
      BLOCKSWAP_RETURN_IF_ERROR(AddRegistrant(existing, registrant));
    }
    return RegisterResult{.model = std::move(existing), .already_present = true};
  }

  // Each new block sealed under its final name, then the manifest (the
  // commit point); on failure the blocks written go again. ParallelFor's
  // threads each hold one block file open, and the manifest one more.
  std::vector<std::unique_ptr<BlockMaster>> written(claim.claimed.size());
  absl::Status status = CheckDescriptorHeadroom(
      std::min<uint64_t>(claim.claimed.size(), kMaxWorkerThreads) + 1,
      absl::StrCat("registering model ", id.substr(0, 16)));
  if (status.ok()) status = ParallelFor(claim.claimed.size(), [&](size_t i) -> absl::Status {
    BLOCKSWAP_ASSIGN_OR_RETURN(WrittenBlock block,
                               write(claim.claimed_positions[i], claim.claimed[i]));
    if (!charged) block.master->memory_ = std::move(memory[i]);
    BLOCKSWAP_RETURN_IF_ERROR(SealBlock(*block.master, block.temp, /*pin=*/true));
    written[i] = std::move(block.master);
    return absl::OkStatus();
  });
  std::vector<std::shared_ptr<const BlockMaster>> fresh(claim.claimed.size());
  for (size_t i = 0; i < written.size(); ++i) fresh[i] = std::move(written[i]);
  if (status.ok()) {
    model->blocks_ = claim.held;
    for (size_t b = 0; b < count; ++b) {
      if (model->blocks_[b] != nullptr) continue;
      auto it = std::find(claim.claimed.begin(), claim.claimed.end(), ids[b]);
      model->blocks_[b] = fresh[it - claim.claimed.begin()];
    }
    model->masters_bytes_ = DistinctFileBytes(model->blocks_);
    status = CommitManifest(*model);
  }
  if (status.ok()) {
    std::vector<const BlockMaster*> sealed;
    for (const auto& block : fresh) sealed.push_back(block.get());
    LogRefusedPins(*model, sealed);
  }
  if (!status.ok()) {
    for (size_t i = 0; i < fresh.size(); ++i) {
      if (fresh[i] != nullptr) RemoveQuietly(BlockFileName(claim.claimed[i]));
    }
  }

  absl::MutexLock lock(&mu_);
  in_progress_.erase(id);
  reserved_bytes_ -= reserved;
  reserved_blocks_ -= reserved_blocks;
  registration_done_.SignalAll();
  if (!status.ok()) {
    uid_holds_.Remove(uid, refs);
    EndClaimLocked(claim, /*published=*/false);
    return status;
  }
  charged_uids_[id].insert(uid);
  for (const std::shared_ptr<const BlockMaster>& block : fresh) {
    blocks_[block->id()] = HeldBlock{.master = block, .models = 1, .claims = 0};
    block_bytes_ += block->file_bytes();
  }
  EndClaimLocked(claim, /*published=*/true);
  std::shared_ptr<const Model> sealed = std::move(model);
  models_.emplace(sealed->id(), sealed);
  TouchLocked(sealed->id());
  ++stats_.copies;
  return RegisterResult{.model = std::move(sealed), .already_present = false};
}

absl::StatusOr<RegisterResult> ModelStore::Register(absl::string_view name,
                                                    const ModelLayout& layout,
                                                    const std::byte* content, size_t content_bytes,
                                                    const Registrant& registrant,
                                                    const KnownBlocks* known) {
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

  std::vector<Sha256Digest> hashes(count);
  BLOCKSWAP_RETURN_IF_ERROR(ParallelFor(count, [&](size_t b) {
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
  model->registrants_.Replace({registrant});
  model->layout_ = layout;
  model->block_hashes_ = std::move(hashes);
  return RegisterHashed(std::move(model), /*charged=*/false,
                        [&](size_t b, const std::string& block_id) -> absl::StatusOr<WrittenBlock> {
                          WrittenBlock block{std::unique_ptr<BlockMaster>(new BlockMaster()),
                                             absl::StrCat(BlockFileName(block_id), kTempSuffix)};
                          block.master->id_ = block_id;
                          block.master->bytes_ = layout.blocks[b].bytes;
                          absl::Status created = CheckFreeSpace(block.master->file_bytes());
                          if (created.ok())
                            created = CreateBlockFile(*block.master, block.temp, /*allocate=*/true);
                          if (!created.ok()) {
                            RemoveQuietly(block.temp);
                            return created;
                          }
                          // A known block is claimed only when it was evicted since the caller
                          // found it: its old master still holds the bytes.
                          std::memcpy(block.master->mapping_.data(),
                                      is_known(b) ? known->masters[b]->data() : staged(b),
                                      layout.blocks[b].bytes);
                          return block;
                        });
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
  return block_bytes_;
}

uint64_t ModelStore::pinned_bytes() const { return pinning_.pinned_bytes(); }

StagedBlocks ModelStore::staged_blocks() const {
  absl::MutexLock lock(&mu_);
  StagedBlocks staged;
  for (const auto& [id, held] : blocks_) {
    if (!held.master->staged()) continue;
    ++staged.blocks;
    staged.bytes += held.master->file_bytes();
  }
  return staged;
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

void ModelStore::TouchLocked(const std::string& id) const { last_use_[id] = ++use_clock_; }

void ModelStore::ChargeUidLocked(const std::string& id, uid_t uid,
                                 const std::vector<BlockRef>& blocks) {
  if (charged_uids_[id].insert(uid).second) uid_holds_.Add(uid, blocks);
}

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

void ModelStore::EvictLocked(const std::string& id) {
  auto it = models_.find(id);
  if (it == models_.end()) return;
  // The manifest first: without it a restarted daemon adopts nothing.
  RemoveQuietly(absl::StrCat(id, kManifestSuffix));
  if (auto charged = charged_uids_.find(id); charged != charged_uids_.end()) {
    const std::vector<BlockRef> refs = BlockRefs(it->second->blocks_);
    for (uid_t uid : charged->second) uid_holds_.Remove(uid, refs);
    charged_uids_.erase(charged);
  }
  // A block goes only with the last model that names it.
  for (const auto& block : DistinctBlocks(it->second->blocks_)) {
    ReleaseBlockLocked(block->id(), &HeldBlock::models);
  }
  ++stats_.evicted;
  last_use_.erase(id);
  models_.erase(it);  // unpins and unmaps what no other model holds
}

absl::Status ModelStore::CheckBlockCountLocked(uint64_t blocks) const {
  const uint64_t limit = options_.max_blocks;
  const uint64_t held = blocks_.size() + reserved_blocks_;
  if (limit == 0 || held + blocks <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "a model of ", blocks, " new blocks would exceed max_master_blocks = ", limit, " (", held,
      " held or being written; each block is one of blockswapd's mappings, bounded by "
      "vm.max_map_count)"));
}

absl::Status ModelStore::MakeRoomLocked(uint64_t bytes, uint64_t blocks) {
  while (true) {
    bool short_of_blocks = false;
    absl::Status fits = CheckBudget(bytes);
    if (fits.ok() && options_.memory_budget != nullptr) {
      const uint64_t charged = bytes + blocks * kBlockOverheadBytes;
      fits = options_.memory_budget->CheckFits(charged,
                                               absl::StrCat("a model of ", bytes, " bytes in ", blocks,
                                                            " blocks (", charged, " with their overhead)"));
    }
    if (fits.ok()) {
      fits = CheckBlockCountLocked(blocks);
      short_of_blocks = !fits.ok();
    }
    if (fits.ok()) fits = CheckFreeSpace(bytes);
    if (fits.ok()) return fits;
    // The unreferenced model of the uid that holds the most of what is
    // short, least recently used first among equals.
    const std::string* victim = nullptr;
    uint64_t heaviest = 0;
    uint64_t oldest = UINT64_MAX;
    for (const auto& [id, model] : models_) {
      if (References(model) != 0) continue;
      uint64_t weight = 0;
      if (auto charged = charged_uids_.find(id); charged != charged_uids_.end()) {
        for (uid_t uid : charged->second) {
          weight = std::max(weight, short_of_blocks ? uid_holds_.blocks(uid) : uid_holds_.bytes(uid));
        }
      }
      auto use = last_use_.find(id);
      uint64_t tick = use == last_use_.end() ? 0 : use->second;
      if (victim == nullptr || weight > heaviest || (weight == heaviest && tick < oldest)) {
        victim = &id, heaviest = weight, oldest = tick;
      }
    }
    if (victim == nullptr) return fits;
    std::string id = *victim;
    EvictLocked(id);
  }
}

void ModelStore::ReleaseReservation(uint64_t bytes, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  reserved_bytes_ -= bytes;
  reserved_blocks_ -= blocks;
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
  blocks_.clear();  // unmaps and closes
  if (store_ == nullptr) return;
  for (const std::string& temp : temp_names_) {
    if (!temp.empty()) store_->RemoveQuietly(temp);
  }
  if (reserved_ != 0 || reserved_blocks_ != 0) store_->ReleaseReservation(reserved_, reserved_blocks_);
}

const ModelLayout& MasterDraft::layout() const { return model_->layout_; }

absl::Status MasterDraft::Write(size_t b, uint64_t offset, const void* data, size_t bytes) const {
  const std::string& temp = temp_names_[b];
  UniqueFd fd(::openat(store_->directory_fd_->get(), temp.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("opening ", store_->PathOf(temp)));
  return WriteFully(fd.get(), offset, data, bytes,
                    absl::StrCat("block ", b, " into ", store_->PathOf(temp)));
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
    BLOCKSWAP_RETURN_IF_ERROR(MakeRoomLocked(total, layout.blocks.size()));
    for (const BlockSpec& block : layout.blocks) {
      BLOCKSWAP_ASSIGN_OR_RETURN(memory.emplace_back(),
                                 ChargeMemory(BlockFileBytes(block.bytes), name));
    }
    reserved_bytes_ += total;
    reserved_blocks_ += layout.blocks.size();
    draft->store_ = this;
    draft->reserved_ = total;
    draft->reserved_blocks_ = layout.blocks.size();
    number = next_draft_++;
  }
  draft->model_ = std::unique_ptr<Model>(new Model());
  Model& model = *draft->model_;
  model.name_ = std::string(name);
  model.source_ = registrant.source;
  model.registrants_.Replace({registrant});
  model.layout_ = layout;
  for (size_t b = 0; b < layout.blocks.size(); ++b) {
    auto block = std::unique_ptr<BlockMaster>(new BlockMaster());
    block->bytes_ = layout.blocks[b].bytes;
    block->memory_ = std::move(memory[b]);
    draft->temp_names_.push_back(absl::StrCat("draft-", number, "-", b, kBlockSuffix, kTempSuffix));
    BLOCKSWAP_RETURN_IF_ERROR(
        CreateBlockFile(*block, draft->temp_names_.back(), /*allocate=*/false));
    block->fd_.Reset();  // reopened by name for each write and at the seal
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
  // The draft's reservation covers every block it wrote; those the store
  // holds already are dropped with the draft.
  absl::StatusOr<RegisterResult> result = RegisterHashed(
      std::move(model), /*charged=*/true,
      [&](size_t b, const std::string& block_id) -> absl::StatusOr<WrittenBlock> {
        WrittenBlock block{std::move(draft->blocks_[b]), std::move(draft->temp_names_[b])};
        draft->temp_names_[b].clear();
        block.master->id_ = block_id;
        return block;
      });
  draft.reset();  // outside the lock: it takes it to return its reservation
  return result;
}

}  // namespace blockswap::daemon
