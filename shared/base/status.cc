#include "shared/base/status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"

namespace blockswap {

absl::Status ErrnoStatus(int error_number, absl::string_view context) {
  std::string message = absl::StrCat(context, ": ", std::strerror(error_number));
  switch (error_number) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EAGAIN:  // also EWOULDBLOCK: a non-blocking queue is full
    case ETOOMANYREFS:
      return absl::ResourceExhaustedError(message);
    case EINVAL:
    case EBADF:
      return absl::InvalidArgumentError(message);
    case ETIMEDOUT:
      return absl::DeadlineExceededError(message);
    case EPIPE:
    case ECONNRESET:
    case ECONNREFUSED:
    case ENOTCONN:
    case ESRCH:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace blockswap
