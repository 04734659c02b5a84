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

bool ModelVisibility::Restricted(const Peer& viewer) const {
  return access_ == ModelAccess::kRegistrantGroup && !Privileged(viewer);
}

bool ModelVisibility::Grants(const Peer& viewer, const Registrant& registrant) {
  return registrant.uid == viewer.uid || viewer.gid == registrant.gid ||
         std::find(viewer.groups.begin(), viewer.groups.end(), registrant.gid) !=
             viewer.groups.end();
}

bool ModelVisibility::MaySee(const Peer& viewer, const std::vector<Registrant>& registrants) const {
  if (!Restricted(viewer)) return true;
  return std::any_of(registrants.begin(), registrants.end(),
                     [&](const Registrant& r) { return Grants(viewer, r); });
}

std::string ModelVisibility::Name(const Peer& viewer, const std::vector<Registrant>& registrants,
                                  const std::string& first) const {
  if (!Restricted(viewer)) return first;
  // Never `first` itself: another user may have given it. A name not
  // recorded shows empty.
  const Registrant* granting = nullptr;
  // Newest first: the name the viewer gave it last.
  for (auto r = registrants.rbegin(); r != registrants.rend(); ++r) {
    if (r->uid == viewer.uid) return r->name;
    if (granting == nullptr && Grants(viewer, *r)) granting = &*r;
  }
  return granting == nullptr ? "" : granting->name;
}

std::string ModelVisibility::Sources(const Peer& viewer,
                                     const std::vector<Registrant>& registrants) const {
  std::vector<std::string> shown;
  for (const Registrant& r : registrants) {
    // Another user's registration of content the viewer sees only through
    // its own would tell it that user holds the same weights.
    if (Restricted(viewer) && !Grants(viewer, r)) continue;
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
