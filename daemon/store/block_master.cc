#include "daemon/store/block_master.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "daemon/store/block_placement.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

uint64_t BlockFileBytes(uint64_t block_bytes) {
  return std::max(RoundUp(block_bytes, kBlockPlacementAlignment), kBlockPlacementAlignment);
}

BlockMaster::~BlockMaster() = default;

absl::StatusOr<UniqueFd> BlockMaster::OpenReadOnly() const {
  const std::string name = absl::StrCat(id_, ".block");
  UniqueFd fd(::openat(directory_->get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    return ErrnoStatus(errno, absl::StrCat("opening the master of block ", id_, " read-only"));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fstat of the master of block ", id_));
  }
  if (st.st_dev != device_ || st.st_ino != inode_ || (st.st_mode & 07777) != 0400 ||
      st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the file of block ", id_, " is no longer the master this daemon sealed (inode ", st.st_ino,
        ", mode ", OctalMode(st.st_mode), ", uid ", st.st_uid, "; sealed: inode ", inode_,
        ", mode 0400)"));
  }
  return fd;
}

}  // namespace blockswap::daemon
