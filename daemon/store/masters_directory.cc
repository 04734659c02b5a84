#include "daemon/store/masters_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

// What every refusal says after what was found.
std::string RemedyFor(const std::string& path) {
  return absl::StrCat(
      ". A directory another user made or may enter lets that user read the masters, plant "
      "files for blockswapd to adopt, or keep it from starting, so blockswapd will not use it. "
      "Remove it as root (rm -rf ",
      path,
      ") and start blockswapd again: it creates the directory itself, and the tmpfiles.d entry "
      "installed with the unit (blockswapd.conf) creates it at boot, before any user can");
}

absl::Status CheckOpened(const UniqueFd& directory, const std::string& path) {
  struct stat st {};
  if (::fstat(directory.get(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fstat of the masters directory ", path));
  }
  const uid_t self = ::geteuid();
  if (st.st_uid != self || (st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "masters directory ", path, " belongs to uid ", st.st_uid, " with mode ",
        OctalMode(st.st_mode), ", but blockswapd (uid ", self,
        ") needs it as its own with no group or other permissions (mode 0700)", RemedyFor(path)));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenExisting(const std::string& path) {
  // O_NOFOLLOW: a symbolic link planted at the path is refused, not followed.
  int raw = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (raw >= 0) return UniqueFd(raw);
  if (errno == ELOOP || errno == ENOTDIR) {
    return absl::FailedPreconditionError(
        absl::StrCat("masters directory ", path, " is not a directory (a symbolic link or a file)",
                     RemedyFor(path)));
  }
  return ErrnoStatus(errno, absl::StrCat("opening the masters directory ", path));
}

}  // namespace

absl::StatusOr<UniqueFd> OpenMastersDirectory(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("the masters directory path is empty");
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("creating the masters directory ", path));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd directory, OpenExisting(path));
  BLOCKSWAP_RETURN_IF_ERROR(CheckOpened(directory, path));
  // A umask may have taken owner bits from a directory just created.
  if (::fchmod(directory.get(), 0700) != 0) {
    return ErrnoStatus(errno, absl::StrCat("setting mode 0700 on ", path));
  }
  return directory;
}

absl::StatusOr<std::string> InspectMastersDirectory(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("the masters directory path is empty");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
    return absl::StrCat(path, " is absent: blockswapd creates it (mode 0700, uid ", ::geteuid(),
                        ")");
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd directory, OpenExisting(path));
  BLOCKSWAP_RETURN_IF_ERROR(CheckOpened(directory, path));
  return absl::StrCat(path, " is blockswapd's (uid ", ::geteuid(),
                      ", no group or other permissions)");
}

}  // namespace blockswap::daemon
