#include "daemon/runtime/process_stats.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

absl::StatusOr<std::string> ReadText(const char* path) {
  std::ifstream in(path);
  if (!in) return ErrnoStatus(errno, absl::StrCat("reading ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Seconds since the epoch when the system booted (/proc/stat's btime).
absl::StatusOr<uint64_t> BootTime() {
  absl::StatusOr<std::string> stat = ReadText("/proc/stat");
  if (!stat.ok()) return stat.status();
  for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
    uint64_t btime = 0;
    if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtoi(line, &btime)) return btime;
  }
  return absl::DataLossError("/proc/stat has no btime line");
}

}  // namespace

absl::StatusOr<ProcessStats> ReadProcessStats() {
  absl::StatusOr<std::string> stat = ReadText("/proc/self/stat");
  if (!stat.ok()) return stat.status();
  // The command name (field 2) is in parentheses and may hold spaces: the
  // fields counted here start after its closing parenthesis, at field 3.
  const size_t close = stat->rfind(')');
  if (close == std::string::npos) return absl::DataLossError("/proc/self/stat has no ')'");
  std::vector<std::string> fields = absl::StrSplit(stat->substr(close + 2), ' ', absl::SkipEmpty());
  auto field = [&fields](size_t number) -> uint64_t {  // proc(5)'s 1-based numbering
    uint64_t value = 0;
    if (number >= 3 && number - 3 < fields.size()) {
      (void)absl::SimpleAtoi(fields[number - 3], &value);
    }
    return value;
  };
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  ProcessStats out;
  out.cpu_seconds = static_cast<double>(field(14) + field(15)) / ticks;  // utime + stime
  out.threads = field(20);
  out.virtual_memory_bytes = field(23);
  out.resident_memory_bytes = field(24) * page;
  absl::StatusOr<uint64_t> boot = BootTime();
  if (!boot.ok()) return boot.status();
  out.start_time_seconds = static_cast<double>(*boot) + static_cast<double>(field(22)) / ticks;

  out.open_fds = OpenDescriptorCount();
  if (out.open_fds == 0) return absl::UnavailableError("cannot read /proc/self/fd");
  --out.open_fds;  // the one that read the directory
  out.max_fds = OpenFilesLimit();
  return out;
}

uint64_t OpenFilesLimit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return limit.rlim_cur;
}

uint64_t RaiseOpenFilesLimit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &limit);  // on failure the soft limit stays, and is reported
  }
  return OpenFilesLimit();
}

uint64_t OpenDescriptorCount() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  uint64_t open = 0;
  while (const dirent* entry = ::readdir(dir)) open += entry->d_name[0] != '.';
  ::closedir(dir);
  // With the directory's own, open while it was read: one more than needed,
  // so the budgets that use it err on the side of the reserve.
  return open;
}

}  // namespace blockswap::daemon
