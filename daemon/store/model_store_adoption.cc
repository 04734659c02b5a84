// ModelStore's adoption at Open: the sealed models a daemon left in its
// directory are checked and taken over, manifests of a format it does not
// know left in place, the rest removed.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/runtime/logging.h"
#include "daemon/store/manifest.h"
#include "daemon/store/model_store.h"
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

}  // namespace blockswap::daemon
