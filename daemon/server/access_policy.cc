#include "daemon/server/access_policy.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

template <typename Id>
std::string JoinIds(const std::set<Id>& ids) {
  return ids.empty() ? std::string("none") : absl::StrJoin(ids, ", ");
}

}  // namespace

AccessPolicy::AccessPolicy() : uids_{::geteuid(), 0}, wants_socket_group_(true) {}

AccessPolicy AccessPolicy::Only(std::vector<uid_t> uids, std::vector<gid_t> gids) {
  AccessPolicy policy;
  policy.uids_ = std::set<uid_t>(uids.begin(), uids.end());
  policy.gids_ = std::set<gid_t>(gids.begin(), gids.end());
  policy.wants_socket_group_ = false;
  return policy;
}

void AccessPolicy::ResolveSocketGroup(gid_t group) {
  if (!wants_socket_group_) return;
  gids_.insert(group);
  wants_socket_group_ = false;
}

bool AccessPolicy::Allows(uid_t uid, gid_t gid, absl::Span<const gid_t> groups) const {
  if (uids_.contains(uid) || gids_.contains(gid)) return true;
  return std::any_of(groups.begin(), groups.end(),
                     [this](gid_t group) { return gids_.contains(group); });
}

absl::Status AccessPolicy::Check(uid_t uid, gid_t gid, absl::Span<const gid_t> groups) const {
  if (Allows(uid, gid, groups)) return absl::OkStatus();
  // The supplementary groups are named only when they add something, so the
  // usual message stays short.
  std::set<gid_t> others(groups.begin(), groups.end());
  others.erase(gid);
  std::string who = absl::StrCat("uid ", uid, " (gid ", gid);
  if (!others.empty())
    absl::StrAppend(&who, "; supplementary groups ", absl::StrJoin(others, ", "));
  return absl::PermissionDeniedError(
      absl::StrCat(who, ") is not allowed by this blockswapd; ", Describe()));
}

std::string AccessPolicy::Describe() const {
  return absl::StrCat("allowed uids: ", JoinIds(uids_), "; gids: ", JoinIds(gids_));
}

absl::StatusOr<std::vector<gid_t>> ParseProcStatusGroups(absl::string_view status) {
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "Groups:")) continue;
    std::vector<gid_t> groups;
    for (absl::string_view field :
         absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      uint32_t group;
      if (!absl::SimpleAtoi(field, &group)) {
        return absl::InvalidArgumentError(
            absl::StrCat("unparseable group \"", field, "\" on the Groups: line"));
      }
      groups.push_back(group);
    }
    return groups;
  }
  return absl::NotFoundError("no Groups: line");
}

absl::StatusOr<std::vector<gid_t>> ReadSupplementaryGroups(pid_t pid) {
  std::string path = absl::StrCat("/proc/", pid, "/status");
  std::ifstream file(path);
  if (!file) return ErrnoStatus(errno, absl::StrCat("opening ", path));
  std::stringstream text;
  text << file.rdbuf();
  auto groups = ParseProcStatusGroups(text.str());
  if (!groups.ok()) return Annotate(groups.status(), absl::StrCat("reading ", path));
  return groups;
}

absl::StatusOr<std::vector<gid_t>> ReadSupplementaryGroupsOf(pid_t pid, const UniqueFd& pidfd) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<gid_t> groups, ReadSupplementaryGroups(pid));
  // Signal 0 checks only that the process behind the pidfd still exists; if
  // it does, /proc/<pid> was that process and not a successor on its pid.
  if (::syscall(SYS_pidfd_send_signal, pidfd.get(), 0, nullptr, 0) != 0) {
    return ErrnoStatus(errno, absl::StrCat("peer pid ", pid, " exited while its groups were read"));
  }
  return groups;
}

}  // namespace blockswap::daemon
