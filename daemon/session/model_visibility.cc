#include "daemon/session/model_visibility.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace blockswap::daemon {

absl::StatusOr<ModelAccess> ParseModelAccess(absl::string_view text) {
  if (text == "allowed-users") return ModelAccess::kAllowedUsers;
  if (text == "registrant-group") return ModelAccess::kRegistrantGroup;
  return absl::InvalidArgumentError(absl::StrCat(
      "expected \"allowed-users\" (every allowed user sees every model) or \"registrant-group\" "
      "(the registering uids, their groups, root and the daemon's uid), got '",
      text.substr(0, 80), "'"));
}

const char* ModelAccessName(ModelAccess access) {
  return access == ModelAccess::kRegistrantGroup ? "registrant-group" : "allowed-users";
}

bool ModelVisibility::Privileged(const Peer& viewer) const {
  return viewer.uid == 0 || viewer.uid == daemon_uid_;
}

bool ModelVisibility::MaySee(const Peer& viewer, const std::vector<Registrant>& registrants) const {
  if (access_ == ModelAccess::kAllowedUsers || Privileged(viewer)) return true;
  auto in_group = [&](gid_t gid) {
    return viewer.gid == gid ||
           std::find(viewer.groups.begin(), viewer.groups.end(), gid) != viewer.groups.end();
  };
  return std::any_of(registrants.begin(), registrants.end(),
                     [&](const Registrant& r) { return r.uid == viewer.uid || in_group(r.gid); });
}

std::string ModelVisibility::Sources(const Peer& viewer,
                                     const std::vector<Registrant>& registrants) const {
  std::vector<std::string> shown;
  for (const Registrant& r : registrants) {
    std::string one;
    if (r.uid == viewer.uid) {
      one = r.source;
    } else if (Privileged(viewer)) {
      one = absl::StrCat(r.source, " (uid ", r.uid, ")");
    } else {
      one = absl::StartsWith(r.source, "file") ? "file (another user's)" : "upload";
    }
    if (std::find(shown.begin(), shown.end(), one) == shown.end()) shown.push_back(std::move(one));
  }
  return absl::StrJoin(shown, "; ");
}

}  // namespace blockswap::daemon
