// What a process holds open: each descriptor of /proc/PID/fd with what it
// refers to (its readlink: a path, "socket:[INODE]", "anon_inode:[eventfd]",
// "/memfd:NAME (deleted)", ...), for tests that check a daemon keeps nothing
// for clients that are gone. A sanitizer's own descriptors are left out.
// Header-only.
#ifndef BLOCKSWAP_TESTS_SUPPORT_OPEN_DESCRIPTORS_H_
#define BLOCKSWAP_TESTS_SUPPORT_OPEN_DESCRIPTORS_H_

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/support/proc_stat.h"

namespace blockswap::testing {

// Every descriptor of `pid`, number -> target. Empty when /proc/PID/fd
// cannot be read. A descriptor closed between the listing and its readlink
// is left out.
inline std::map<int, std::string> AllOpenDescriptors(pid_t pid) {
  std::map<int, std::string> open;
  const std::string dir_path = absl::StrCat("/proc/", pid, "/fd");
  DIR* dir = ::opendir(dir_path.c_str());
  if (dir == nullptr) return open;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    char target[PATH_MAX];
    const std::string link = absl::StrCat(dir_path, "/", entry->d_name);
    const ssize_t length = ::readlink(link.c_str(), target, sizeof(target) - 1);
    if (length < 0) continue;
    open[std::atoi(entry->d_name)] = std::string(target, length);
  }
  ::closedir(dir);
  return open;
}

// What `pid` shares with a sanitizer's symbolizer: the targets held by a
// child of `pid` running llvm-symbolizer or addr2line. TSan starts one, over
// two pipes, the first time it symbolizes a report (a suppressed one too),
// so whether a daemon under TSan holds those pipes depends on when it first
// saw a race, not on its clients.
inline std::set<std::string> SymbolizerTargets(pid_t pid) {
  std::set<std::string> targets;
  std::error_code unlisted;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", unlisted)) {
    const std::string name = entry.path().filename();
    const pid_t child = std::atoi(name.c_str());
    if (child <= 0) continue;
    const std::vector<std::string> stat = ProcStatFields(child);
    if (stat.size() < 2 || stat[1] != absl::StrCat(pid)) continue;  // [1]: its parent
    std::error_code unreadable;
    const std::string program =
        std::filesystem::read_symlink(absl::StrCat("/proc/", child, "/exe"), unreadable).filename();
    if (!absl::StartsWith(program, "llvm-symbolizer") && program != "addr2line") continue;
    for (const auto& [fd, target] : AllOpenDescriptors(child)) targets.insert(target);
  }
  return targets;
}

// The descriptors `pid` holds for itself: all but those it shares with a
// sanitizer's symbolizer (see SymbolizerTargets).
inline std::map<int, std::string> OpenDescriptors(pid_t pid) {
  std::map<int, std::string> open = AllOpenDescriptors(pid);
  const std::set<std::string> symbolizer = SymbolizerTargets(pid);
  std::erase_if(open, [&](const auto& entry) {
    return absl::StartsWith(entry.second, "pipe:") && symbolizer.contains(entry.second);
  });
  return open;
}

// Whether `target` names a file that has been unlinked: on a tmpfs its pages
// stay allocated for as long as the descriptor is open.
inline bool IsDeletedFile(const std::string& target) {
  return absl::EndsWith(target, " (deleted)");
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_OPEN_DESCRIPTORS_H_
