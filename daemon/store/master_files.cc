#include "daemon/store/master_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/store/block_placement.h"
#include "daemon/store/masters_directory.h"
#include "daemon/store/model_store_internal.h"
#include "shared/base/file_io.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

// A manifest is a few hundred bytes per tensor; anything larger than this
// was not written by blockswapd.
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;

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

MasterFiles::MasterFiles(std::string path, UniqueFd directory, UniqueFd lock)
    : path_(std::move(path)),
      directory_(std::make_shared<const UniqueFd>(std::move(directory))),
      lock_(std::move(lock)) {}

absl::StatusOr<std::unique_ptr<MasterFiles>> MasterFiles::Open(const std::string& path) {
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
  return std::unique_ptr<MasterFiles>(new MasterFiles(path, std::move(directory), std::move(lock)));
}

std::string MasterFiles::PathOf(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

void MasterFiles::RemoveQuietly(const std::string& name) const {
  ::unlinkat(directory_->get(), name.c_str(), 0);
}

absl::Status MasterFiles::RemoveStray(const std::string& name) const {
  if (::unlinkat(directory_->get(), name.c_str(), 0) != 0 &&
      (errno != EISDIR || ::unlinkat(directory_->get(), name.c_str(), AT_REMOVEDIR) != 0)) {
    return ErrnoStatus(errno, absl::StrCat("removing the stray entry ", PathOf(name)));
  }
  return absl::OkStatus();
}

absl::Status MasterFiles::Rename(const std::string& from, const std::string& to) const {
  if (::renameat(directory_->get(), from.c_str(), directory_->get(), to.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("renaming ", PathOf(from)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MasterFiles::List() const {
  return ListDirectory(*directory_, path_);
}

absl::StatusOr<uint64_t> MasterFiles::FreeBytes() const {
  struct statvfs fs {};
  if (::fstatvfs(directory_->get(), &fs) != 0) {
    return ErrnoStatus(errno, absl::StrCat("statvfs of ", path_));
  }
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

absl::Status MasterFiles::WriteInto(const std::string& temp, uint64_t offset, const void* data,
                                    size_t bytes, absl::string_view what) const {
  UniqueFd fd(::openat(directory_->get(), temp.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("opening ", PathOf(temp)));
  return WriteFully(fd.get(), offset, data, bytes, absl::StrCat(what, " into ", PathOf(temp)));
}

absl::StatusOr<UniqueFd> MasterFiles::OpenOwnFile(const std::string& name, mode_t mode,
                                                  struct stat* st) const {
  int raw =
      ::openat(directory_->get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("opening ", PathOf(name)));
  UniqueFd fd(raw);
  BLOCKSWAP_RETURN_IF_ERROR(CheckOwnFile(fd.get(), PathOf(name), mode, st));
  return fd;
}

absl::StatusOr<Manifest> MasterFiles::ReadManifest(const std::string& id) const {
  std::string manifest_name = ManifestFileName(id);
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
    return absl::FailedPreconditionError(
        absl::StrCat(manifest_path, ": ", manifest.block_hashes.size(), " block hashes and ",
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

absl::StatusOr<std::unique_ptr<BlockMaster>> MasterFiles::LoadBlock(const std::string& block_id,
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

absl::Status MasterFiles::FinishSealed(BlockMaster& block) const {
  struct stat st {};
  if (::fstat(block.fd_.get(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fstat of the master of block ", block.id_));
  }
  block.directory_ = directory_;
  block.device_ = st.st_dev;
  block.inode_ = st.st_ino;
  block.fd_.Reset();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BlockMaster>> MasterFiles::CreateBlock(std::string block_id,
                                                                      uint64_t bytes,
                                                                      const std::string& temp,
                                                                      bool allocate) const {
  auto block = std::unique_ptr<BlockMaster>(new BlockMaster());
  block->id_ = std::move(block_id);
  block->bytes_ = bytes;
  const uint64_t size = block->file_bytes();
  auto create = [&]() -> absl::Status {
    int raw = ::openat(directory_->get(), temp.c_str(),
                       O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (raw < 0) return ErrnoStatus(errno, absl::StrCat("creating ", PathOf(temp)));
    block->fd_ = UniqueFd(raw);
    // The adoption check wants exactly 0600, whatever the umask.
    if (::fchmod(block->fd_.get(), 0600) != 0) {
      return ErrnoStatus(errno, absl::StrCat("chmod 0600 ", PathOf(temp)));
    }
    if (!allocate) {
      if (::ftruncate(block->fd_.get(), static_cast<off_t>(size)) != 0) {
        return ErrnoStatus(errno, absl::StrCat("sizing ", PathOf(temp), " to ", size, " bytes"));
      }
      block->fd_.Reset();  // reopened by name for each write and at the seal
      return absl::OkStatus();
    }
    if (int rc = ::posix_fallocate(block->fd_.get(), 0, static_cast<off_t>(size)); rc != 0) {
      return ErrnoStatus(rc, absl::StrCat("reserving ", size, " bytes for ", PathOf(temp)));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(block->mapping_, Mapping::Map(block->fd_, size, Access::kReadWrite,
                                                             /*populate=*/true));
    return absl::OkStatus();
  };
  if (absl::Status created = create(); !created.ok()) {
    block.reset();
    RemoveQuietly(temp);
    return created;
  }
  return block;
}

absl::Status MasterFiles::SealBlock(BlockMaster& block, const std::string& temp,
                                    const PinBlock& pin) const {
  const std::string final_name = BlockFileName(block.id_);
  const int dir = directory_->get();
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
    if (pin) BLOCKSWAP_RETURN_IF_ERROR(pin(block));
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

absl::Status MasterFiles::WriteManifest(const Model& model,
                                        const std::vector<Registrant>& registrants,
                                        const std::string& temp) const {
  int raw = ::openat(directory_->get(), temp.c_str(),
                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, kManifestMode);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("creating ", PathOf(temp)));
  UniqueFd manifest(raw);
  if (::fchmod(manifest.get(), kManifestMode) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chmod 0600 ", PathOf(temp)));
  }
  Manifest contents;
  contents.id = model.id();
  contents.name = model.name();
  contents.source = model.source();
  contents.registrants = registrants;
  contents.layout = model.layout();
  contents.block_hashes = model.block_hashes();
  for (size_t b = 0; b < model.block_count(); ++b) {
    contents.block_ids.push_back(model.block_master(b)->id());
  }
  const std::string json = EncodeManifest(contents);
  BLOCKSWAP_RETURN_IF_ERROR(WriteFully(manifest.get(), 0, json.data(), json.size(), PathOf(temp)));
  if (::fsync(manifest.get()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fsync of ", PathOf(temp)));
  }
  return absl::OkStatus();
}

absl::Status MasterFiles::CommitManifest(const Model& model) const {
  const std::string manifest_name = ManifestFileName(model.id());
  const std::string manifest_temp = absl::StrCat(manifest_name, kTempSuffix);
  const int dir = directory_->get();
  absl::Status written = WriteManifest(model, model.registrants().List(), manifest_temp);
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

}  // namespace blockswap::daemon
