#include "shared/base/file_io.h"

#include <errno.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap {

absl::Status ReadFully(int fd, uint64_t offset, void* data, size_t bytes, absl::string_view what) {
  auto* to = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    ssize_t got = ::pread(fd, to + done, bytes - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoStatus(errno, absl::StrCat("reading ", what));
    if (got == 0) {
      return absl::DataLossError(absl::StrCat("reading ", what, ": it ends after ", offset + done,
                                              " bytes, ", bytes - done, " short of ",
                                              offset + bytes));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::Status WriteFully(int fd, uint64_t offset, const void* data, size_t bytes,
                        absl::string_view what) {
  const auto* from = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    ssize_t wrote = ::pwrite(fd, from + done, bytes - done, static_cast<off_t>(offset + done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      const int error = wrote < 0 ? errno : ENOSPC;
      absl::Status status = ErrnoStatus(error, absl::StrCat("writing ", what));
      if (error == ENOSPC) return absl::ResourceExhaustedError(status.message());
      return status;
    }
    done += static_cast<size_t>(wrote);
  }
  return absl::OkStatus();
}

}  // namespace blockswap
