#include "daemon/budget/memory_limit.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace blockswap::daemon {
namespace {

// The number in the first line of `path`; 0 when it is absent, "max" or not
// a number (no limit there).
uint64_t ReadLimitFile(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return 0;
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value)) return 0;
  return value;
}

// Lowers `limit` to the smallest limit file `file` found in `directory` and
// its ancestors up to `root`.
void LowerAlongPath(const std::string& root, std::string directory, const std::string& file,
                    MemoryLimit& limit) {
  while (true) {
    uint64_t value = ReadLimitFile(absl::StrCat(root, directory, "/", file));
    if (value != 0 && value < limit.bytes) {
      limit.bytes = value;
      limit.source =
          absl::StrCat("memory cgroup ", directory.empty() ? "/" : directory, " (", file, ")");
    }
    if (directory.empty()) return;
    size_t slash = directory.rfind('/');
    directory = slash == std::string::npos ? "" : directory.substr(0, slash);
  }
}

}  // namespace

MemoryLimit ProcessMemoryLimit(absl::string_view cgroup_root) {
  MemoryLimit limit;
  limit.bytes = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  limit.source = "physical memory";
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  const std::string root(cgroup_root);
  while (std::getline(in, line)) {
    // "0::/path" (v2) or "4:memory:/path" (v1).
    std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    std::string path = fields[2] == "/" ? "" : fields[2];
    if (fields[0] == "0" && fields[1].empty()) {
      LowerAlongPath(root + "/unified", path, "memory.max", limit);
      LowerAlongPath(root, path, "memory.max", limit);
    }
    for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
      if (controller == "memory") {
        LowerAlongPath(root + "/memory", path, "memory.limit_in_bytes", limit);
      }
    }
  }
  return limit;
}

}  // namespace blockswap::daemon
