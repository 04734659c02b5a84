// Makes a test role a process of another user: a trainer of a different uid
// than the daemon's, as under the system service.
#ifndef BLOCKSWAP_TESTS_SUPPORT_BECOME_USER_H_
#define BLOCKSWAP_TESTS_SUPPORT_BECOME_USER_H_

#include <grp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace blockswap::testing {

// This process becomes uid N with gid N and no supplementary groups (root
// only). Dumpable again after setuid, as any trainer that was never anyone
// else is.
inline absl::Status BecomeUser(int64_t uid) {
  if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(uid)) != 0 ||
      ::setuid(static_cast<uid_t>(uid)) != 0 || ::prctl(PR_SET_DUMPABLE, 1) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot become uid ", uid, " (not root?)"));
  }
  return absl::OkStatus();
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_BECOME_USER_H_
