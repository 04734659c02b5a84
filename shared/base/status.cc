#include "shared/base/status.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"

namespace blockswap {
namespace {

// The first word of a /proc/sys file ("unknown" when it cannot be read).
std::string ReadProcNumber(const char* path) {
  std::ifstream in(path);
  std::string value;
  return in >> value ? value : "unknown";
}

}  // namespace

absl::Status ErrnoStatus(int error_number, absl::string_view context) {
  std::string message = absl::StrCat(context, ": ", std::strerror(error_number));
  // Out of descriptors is a limit the operator can raise: name it and its
  // value (read now, so that a raised limit shows).
  if (error_number == EMFILE) {
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      absl::StrAppend(&message, " (this process's descriptor limit, RLIMIT_NOFILE, is ",
                      limit.rlim_cur,
                      "; for blockswapd raise LimitNOFILE= in its unit, or ulimit -n)");
    }
  } else if (error_number == ENFILE) {
    absl::StrAppend(&message, " (the system's open-file table is full: sysctl fs.file-max is ",
                    ReadProcNumber("/proc/sys/fs/file-max"), ")");
  }
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
  absl::Status annotated(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&annotated](absl::string_view type_url, const absl::Cord& payload) {
    annotated.SetPayload(type_url, payload);
  });
  return annotated;
}

}  // namespace blockswap
