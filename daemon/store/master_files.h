// The files of the masters directory (docs/store.md), default
// /dev/shm/blockswap, mode 0700, owned by the daemon's euid, never loose in
// world-writable /dev/shm (masters_directory.h):
//   .lock             flock()ed exclusively while a store is open
//   <block id>.block  the bytes of one block (BlockId: its layout and the
//                     hash of its bytes), BlockFileBytes long; held once
//                     whatever models name it
//   <id>.manifest     JSON (manifest.h): id, name, registrants, layout, block
//                     hashes and the block id of each block; its first rename
//                     is the commit point. Rewritten (a temporary file renamed
//                     over it) when the registrants change.
//   *.tmp             a registration in progress (removed at Open)
// Files are mode 0600 while written; block files are 0400 once sealed.
// Clients never open them by name: they get read-only descriptors
// (BlockMaster::OpenReadOnly) over SCM_RIGHTS.
//
// Trust: the content of a sealed block is not re-hashed when it is read back.
// Only the daemon's euid can write into the 0700 directory, and a manifest's
// id is recomputed from its layout and block hashes and each block id from
// its block's layout and hash, so a manifest cannot name bytes under another
// id by mistake; whoever runs as the daemon's user can tamper with anything
// anyway.
#ifndef BLOCKSWAP_DAEMON_STORE_MASTER_FILES_H_
#define BLOCKSWAP_DAEMON_STORE_MASTER_FILES_H_

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/store/block_master.h"
#include "daemon/store/manifest.h"
#include "daemon/store/model.h"
#include "daemon/store/registrants.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

// Pins or stages a block being sealed (the store's MasterPinning).
using PinBlock = std::function<absl::Status(BlockMaster&)>;

// Thread-safe: it holds no state but the directory and its lock, and every
// file is opened relative to the directory, never by an absolute path.
class MasterFiles {
 public:
  // Opens `path` (OpenMastersDirectory: created mode 0700, or checked) and
  // locks it against a second daemon (FAILED_PRECONDITION naming the lock).
  static absl::StatusOr<std::unique_ptr<MasterFiles>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  std::string PathOf(absl::string_view name) const;
  // Every entry but "." and "..", sorted.
  absl::StatusOr<std::vector<std::string>> List() const;
  // Bytes the tmpfs has free.
  absl::StatusOr<uint64_t> FreeBytes() const;
  absl::Status Rename(const std::string& from, const std::string& to) const;
  // Removes `name`, whatever it is, ignoring errors: for what is left of a
  // failed write, which may not exist.
  void RemoveQuietly(const std::string& name) const;
  // Removes a stray entry at Open (a file or an empty directory).
  absl::Status RemoveStray(const std::string& name) const;

  // A new master of a block of `bytes` (its id `block_id`, or "" until a
  // draft's is known) in the new file `temp` (mode 0600). `allocate`:
  // every page reserved (posix_fallocate: a full tmpfs is this error, never
  // a SIGBUS in the copy) and mapped read-write, populated. Otherwise the
  // file is only sized and keeps no descriptor (a draft, written with
  // WriteInto). Removes `temp` on failure.
  absl::StatusOr<std::unique_ptr<BlockMaster>> CreateBlock(std::string block_id, uint64_t bytes,
                                                           const std::string& temp,
                                                           bool allocate) const;
  // Writes `bytes` at `offset` of the file `temp` (pwrite; opened for the
  // write, so a draft of any size keeps no descriptor).
  absl::Status WriteInto(const std::string& temp, uint64_t offset, const void* data, size_t bytes,
                         absl::string_view what) const;
  // Reserves and maps a draft's file, fsync, chmod 0400, pins (`pin`, when
  // set; before the rename, so a block that cannot be pinned leaves only a
  // temporary file) and renames `temp` to <block id>.block. Removes `temp`
  // on failure.
  absl::Status SealBlock(BlockMaster& block, const std::string& temp, const PinBlock& pin) const;
  // The sealed block file of `block_id`, of a block of `bytes`, checked
  // (owner, mode, size) and mapped read-write, not pinned.
  absl::StatusOr<std::unique_ptr<BlockMaster>> LoadBlock(const std::string& block_id,
                                                         uint64_t bytes) const;

  // The manifest of `id`, read and checked against its layout, id and block
  // ids. UNIMPLEMENTED for a format version this daemon does not read.
  absl::StatusOr<Manifest> ReadManifest(const std::string& id) const;
  // Writes `model`'s manifest, listing `registrants`, into `temp` (mode 0600).
  absl::Status WriteManifest(const Model& model, const std::vector<Registrant>& registrants,
                             const std::string& temp) const;
  // Writes the manifest and renames it into place: the commit point.
  absl::Status CommitManifest(const Model& model) const;

 private:
  MasterFiles(std::string path, UniqueFd directory, UniqueFd lock);

  // `name`, opened read-only (no link followed), checked to be a regular
  // file of ours with mode `mode`; its stat in `st`.
  absl::StatusOr<UniqueFd> OpenOwnFile(const std::string& name, mode_t mode, struct stat* st) const;
  // A sealed block's identity for OpenReadOnly; its descriptor closed.
  absl::Status FinishSealed(BlockMaster& block) const;

  const std::string path_;
  // Shared with the masters, which reopen their files by name.
  const std::shared_ptr<const UniqueFd> directory_;
  const UniqueFd lock_;  // holds the flock for as long as the files are open
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MASTER_FILES_H_
