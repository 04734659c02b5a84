#include "tools/blockswapctl/trace_command.h"

#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "shared/base/env_settings.h"
#include "shared/protocol/trace_log.h"
#include "tools/blockswapctl/trace_json.h"

namespace blockswap::ctl {
namespace {

// The PNG drawing script: share/blockswap/trace_png.py beside bin/ — the
// same layout in the build tree (CMake copies it) and the install tree.
std::string TracePngScript() {
  char self[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) return "trace_png.py";
  std::string path(self, static_cast<size_t>(length));
  std::string bin_dir = path.substr(0, path.rfind('/'));
  return absl::StrCat(bin_dir, "/../share/blockswap/trace_png.py");
}

// The Python that draws: $BLOCKSWAP_PYTHON, else the system's python3 (where
// Debian's python3-matplotlib lives), else python3 on PATH.
std::string TracePython() {
  if (std::optional<std::string> python = EnvValue(EnvSetting::kPython)) return *python;
  if (::access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

// Runs the drawing script; its own messages go to stderr. Returns its status.
int DrawTracePng(const std::string& json_path, const std::string& png_path) {
  const std::string script = TracePngScript();
  const std::string python = TracePython();
  if (::access(script.c_str(), R_OK) != 0) {
    std::cerr << "blockswapctl: trace: --png: the drawing script " << script << " is missing ("
              << std::strerror(errno) << ")\n";
    return kExitFailure;
  }
  pid_t child = ::fork();
  if (child < 0) {
    std::cerr << "blockswapctl: trace: --png: fork: " << std::strerror(errno) << "\n";
    return kExitFailure;
  }
  if (child == 0) {
    const char* args[] = {python.c_str(), script.c_str(), json_path.c_str(), png_path.c_str(),
                          nullptr};
    ::execvp(args[0], const_cast<char* const*>(args));
    std::cerr << "blockswapctl: trace: --png needs python3 with matplotlib; cannot run " << python
              << ": " << std::strerror(errno) << "\n";
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  std::cerr << "blockswapctl: trace: --png: " << python << " " << script << " failed ("
            << (WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status))
                                  : absl::StrCat("signal ", WTERMSIG(status)))
            << "); " << png_path << " not written\n";
  return kExitFailure;
}

}  // namespace

int Trace(const Options& options, const TraceOptions& trace) {
  // Blocked before gRPC starts its threads (they inherit the mask), so that
  // only the sigtimedwait below takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  AdminCaller caller(options);
  // The window starts now, on the clock every process of the host shares.
  v1::TraceRequest request;
  request.set_since_ns(MonotonicNanos());
  // Fail at once when no daemon answers, not after the window.
  if (absl::StatusOr<v1::StatusReply> probe = caller.Call(&v1::Admin::Stub::Status); !probe.ok()) {
    std::cerr << "blockswapctl: trace: " << DescribeCallFailure(options.socket_path, probe.status())
              << "\n";
    return kExitFailure;
  }
  std::cerr << "blockswapctl: trace: recording for " << trace.seconds
            << " s (SIGINT or SIGTERM ends the window early)" << std::endl;
  // The window: --seconds, or until SIGINT/SIGTERM (Ctrl-C), whichever comes
  // first; the trace is written either way.
  const absl::Time window_end = absl::Now() + absl::Seconds(trace.seconds);
  for (absl::Duration left = window_end - absl::Now(); left > absl::ZeroDuration();
       left = window_end - absl::Now()) {
    timespec timeout = absl::ToTimespec(left);
    if (::sigtimedwait(&stop_signals, nullptr, &timeout) >= 0) break;  // a stop signal
  }
  absl::StatusOr<v1::TraceReply> reply = caller.Call(&v1::Admin::Stub::Trace, request);
  if (!reply.ok()) {
    std::cerr << "blockswapctl: trace: " << DescribeCallFailure(options.socket_path, reply.status())
              << "\n";
    return kExitFailure;
  }
  nlohmann::json document = TraceToChromeJson(*reply, request.since_ns());
  {
    std::ofstream out(trace.out, std::ios::trunc);
    out << document.dump() << "\n";
    out.close();
    if (!out) {
      std::cerr << "blockswapctl: trace: cannot write " << trace.out << "\n";
      return kExitFailure;
    }
  }
  if (std::string lost = TraceLossReport(*reply); !lost.empty()) {
    std::cerr << "blockswapctl: trace: the bounded trace rings lost events of this window "
                 "(use a shorter --seconds):\n"
              << lost;
  }
  size_t spans = 0;
  for (const auto& event : document["traceEvents"]) spans += event["ph"] == "X" ? 1 : 0;
  const std::string window =
      absl::StrFormat("%.1f s", (reply->now_ns() - request.since_ns()) / 1e9);
  if (spans == 0) {
    std::cerr << "blockswapctl: trace: no activity in the " << window << " window (no client "
              << "loaded a block) -> " << trace.out << "\n";
  } else {
    std::cerr << "blockswapctl: trace: " << reply->clients_size() << " clients, " << spans
              << " spans over " << window << " -> " << trace.out << "\n";
  }
  if (!trace.png.empty()) {
    if (int drawn = DrawTracePng(trace.out, trace.png); drawn != 0) return drawn;
    std::cerr << "blockswapctl: trace: timeline -> " << trace.png << "\n";
  }
  return 0;
}

}  // namespace blockswap::ctl
