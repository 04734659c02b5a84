#include "shared/base/regular_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {

absl::string_view FileTypeName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a file of unknown type";
}

}  // namespace

absl::Status CheckRegularFile(const struct stat& st, absl::string_view path) {
  if (S_ISREG(st.st_mode)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(path, " is ", FileTypeName(st.st_mode), ", not a regular file"));
}

absl::StatusOr<UniqueFd> OpenRegularFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid()) {
    const int error = errno;
    // A socket's open() fails (ENXIO): say what it is rather than the errno.
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return CheckRegularFile(st, path);
    }
    return ErrnoStatus(error, absl::StrCat("opening ", path));
  }
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat of ", path));
  BLOCKSWAP_RETURN_IF_ERROR(CheckRegularFile(st, path));
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, absl::StrCat("clearing O_NONBLOCK on ", path));
  }
  return fd;
}

}  // namespace blockswap
