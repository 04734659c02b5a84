// Child processes for multi-process tests.
//
// A test binary re-executes itself (/proc/self/exe) with
// `--blockswap-child ROLE ARGS...`; the shared test main runs the registered
// role instead of the tests, and the role's return value is the exit code.
#ifndef BLOCKSWAP_TESTS_SUPPORT_CHILD_PROCESS_H_
#define BLOCKSWAP_TESTS_SUPPORT_CHILD_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shared/base/unique_fd.h"

namespace blockswap::testing {

using ChildRole = int (*)(const std::vector<std::string>& args);

// Returns true so it can initialise a static.
bool RegisterChildRole(const char* name, ChildRole role);
// Runs `argv` as a child role when it asks for one; returns the exit code, or
// -1 when argv is an ordinary test invocation.
int MaybeRunChildRole(int argc, char** argv);

#define BLOCKSWAP_CHILD_ROLE(name, function) \
  static const bool blockswap_child_role_##function = \
      ::blockswap::testing::RegisterChildRole(name, function)

struct SpawnOptions {
  std::vector<std::string> args = {};
  // (descriptor in this process, number it gets in the child): with stdio,
  // all the child holds of this process.
  std::vector<std::pair<int, int>> inherit = {};
  std::map<std::string, std::string> env = {};  // added to this process's environment
};

// A spawned child; killed (SIGKILL) and reaped if still running on
// destruction, so a failing test leaves nothing behind.
class ChildProcess {
 public:
  static absl::StatusOr<ChildProcess> Spawn(const std::string& role, SpawnOptions options);
  // A role ends when the process that spawned it exits (it watches that
  // process), so a test killed by its timeout leaves no role behind.
  //
  // Runs another program: `path` with `options.args`.
  static absl::StatusOr<ChildProcess> SpawnProgram(const std::string& path,
                                                   SpawnOptions options);
  // The same, and the program is killed when this test process exits, when
  // it is spawned from the main thread (PR_SET_PDEATHSIG through setpriv,
  // where util-linux has it; its pid is the program's after the exec).
  static absl::StatusOr<ChildProcess> SpawnProgramEndingWithTest(const std::string& path,
                                                                 SpawnOptions options);

  ChildProcess(ChildProcess&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)), pidfd_(std::move(other.pidfd_)) {}
  ChildProcess& operator=(ChildProcess&&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // The exit code; a child killed by signal N reports 128+N. A child still
  // running after `timeout` is killed and DEADLINE_EXCEEDED returned.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // The exit code if the child has exited, without waiting.
  std::optional<int> TryWait();
  void Kill(int signal);

 private:
  ChildProcess(pid_t pid, UniqueFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  pid_t pid_ = -1;
  UniqueFd pidfd_;
};

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_CHILD_PROCESS_H_
