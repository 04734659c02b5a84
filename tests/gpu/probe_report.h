// The primitives probe's output: one line per check, printed as soon as the
// check ends (so a probe cut short still shows how far it got), in the form
// docs/gpu.md explains:  PASS|FAIL|SKIP <name>: <detail>
#ifndef BLOCKSWAP_TESTS_GPU_PROBE_REPORT_H_
#define BLOCKSWAP_TESTS_GPU_PROBE_REPORT_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blockswap::probe {

class Report {
 public:
  void Pass(absl::string_view name, absl::string_view detail) { Line("PASS", name, detail); }
  void Fail(absl::string_view name, absl::string_view detail) {
    ++failures_;
    Line("FAIL", name, detail);
  }
  void Skip(absl::string_view name, absl::string_view detail) { Line("SKIP", name, detail); }
  // PASS with `passed`, or FAIL with the status's message.
  void Check(absl::string_view name, const absl::Status& status, absl::string_view passed) {
    if (status.ok()) {
      Pass(name, passed);
    } else {
      Fail(name, status.message());
    }
  }
  int failures() const { return failures_; }

 private:
  void Line(absl::string_view verdict, absl::string_view name, absl::string_view detail) {
    std::string line = std::string(verdict) + " " + std::string(name) + ": " + std::string(detail);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  int failures_ = 0;
};

}  // namespace blockswap::probe

#endif  // BLOCKSWAP_TESTS_GPU_PROBE_REPORT_H_
