// The fields of /proc/PID/stat after the command name, for tests that read a
// process's state, parent or CPU time. The command name is in parentheses
// and may hold spaces and parentheses itself, so the fields start after the
// last ')'. Header-only.
#ifndef BLOCKSWAP_TESTS_SUPPORT_PROC_STAT_H_
#define BLOCKSWAP_TESTS_SUPPORT_PROC_STAT_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/support/read_file.h"

namespace blockswap::testing {

// Field 3 of proc(5) (the state) and on: [0] state, [1] ppid, [11] utime,
// [12] stime. Empty when the process is gone or unreadable.
inline std::vector<std::string> ProcStatFields(pid_t pid) {
  const std::string text = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 > text.size()) return {};
  return absl::StrSplit(text.substr(paren + 2), ' ');
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_PROC_STAT_H_
