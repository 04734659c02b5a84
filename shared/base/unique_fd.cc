#include "shared/base/unique_fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap {

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

absl::StatusOr<UniqueFd> UniqueFd::Duplicate() const {
  int copy = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return ErrnoStatus(errno, absl::StrCat("duplicating fd ", fd_));
  return UniqueFd(copy);
}

absl::StatusOr<UniqueFd> UniqueFd::ReopenReadOnly() const {
  std::string path = absl::StrCat("/proc/self/fd/", fd_);
  int copy = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (copy < 0) return ErrnoStatus(errno, absl::StrCat("reopening fd ", fd_, " read-only"));
  return UniqueFd(copy);
}

}  // namespace blockswap
