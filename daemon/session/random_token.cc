#include "daemon/session/random_token.h"

#include <sys/random.h>

#include <cerrno>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

absl::Status FillRandom(void* data, size_t bytes) {
  auto* out = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t got = ::getrandom(out, bytes, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "getrandom");
    }
    out += got;
    bytes -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> RandomToken() {
  char raw[16];
  BLOCKSWAP_RETURN_IF_ERROR(FillRandom(raw, sizeof(raw)));
  return absl::BytesToHexString(absl::string_view(raw, sizeof(raw)));
}

absl::StatusOr<uint64_t> RandomNonZero64() {
  uint64_t value = 0;
  while (value == 0) BLOCKSWAP_RETURN_IF_ERROR(FillRandom(&value, sizeof(value)));
  return value;
}

}  // namespace blockswap::daemon
