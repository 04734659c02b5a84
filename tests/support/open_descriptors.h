// What a process holds open: each descriptor of /proc/PID/fd with what it
// refers to (its readlink: a path, "socket:[INODE]", "anon_inode:[eventfd]",
// "/memfd:NAME (deleted)", ...), for tests that check a daemon keeps nothing
// for clients that are gone. Header-only.
#ifndef BLOCKSWAP_TESTS_SUPPORT_OPEN_DESCRIPTORS_H_
#define BLOCKSWAP_TESTS_SUPPORT_OPEN_DESCRIPTORS_H_

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace blockswap::testing {

// Descriptor number -> target. Empty when /proc/PID/fd cannot be read. A
// descriptor closed between the listing and its readlink is left out.
inline std::map<int, std::string> OpenDescriptors(pid_t pid) {
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

// Whether `target` names a file that has been unlinked: on a tmpfs its pages
// stay allocated for as long as the descriptor is open.
inline bool IsDeletedFile(const std::string& target) {
  return absl::EndsWith(target, " (deleted)");
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_OPEN_DESCRIPTORS_H_
