// The CPU time a process has used, for tests and benchmarks that compare
// what one process spent against another measured in the same run.
#ifndef BLOCKSWAP_TESTS_SUPPORT_PROCESS_CPU_H_
#define BLOCKSWAP_TESTS_SUPPORT_PROCESS_CPU_H_

#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "tests/support/proc_stat.h"

namespace blockswap::testing {

// CPU time (user + system, all threads) process `pid` has used so far,
// seconds (/proc/PID/stat; clock-tick resolution); -1 when unreadable.
inline double ProcessCpuSeconds(pid_t pid) {
  const std::vector<std::string> fields = ProcStatFields(pid);
  double utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
      !absl::SimpleAtod(fields[12], &stime)) {
    return -1;
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_PROCESS_CPU_H_
