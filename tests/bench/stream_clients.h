// What the benchmark programs share: gpu-stream client processes
// (tests/gpu/gpu_roles.cc) spawned from the benchmark binary and added up
// over their common wall-clock window, and the summary lines every program
// ends with (`<id> <name> goal=<g> measured=<m> PASS|MISS`, collected by
// tests/bench/run-all.sh).
#ifndef BLOCKSWAP_TESTS_BENCH_STREAM_CLIENTS_H_
#define BLOCKSWAP_TESTS_BENCH_STREAM_CLIENTS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/support/daemon_process.h"
#include "tests/support/process_cpu.h"
#include "tests/support/role_report.h"

namespace blockswap::bench {

// A benchmark's main, once its options are added to `app`: a child role
// (the client processes it spawns run this same binary) runs and returns at
// once; otherwise `app` parses the command line (--help and bad flags exit
// as CLI11 says), and `bench` runs on fresh scratch directories (socket,
// masters). Its status is the exit code: 0, else the error on stderr and 1,
// or 77 (skipped: ctest's SKIP_RETURN_CODE) for FAILED_PRECONDITION when
// `precondition_skips` (no usable device; device-check.sh counts it as a
// failure on a GPU machine).
int BenchmarkMain(int argc, char** argv, CLI::App& app, const char* program,
                  const std::function<absl::Status(testing::ScratchDirs&)>& bench,
                  bool precondition_skips = false);

using testing::ProcessCpuSeconds;

// Stops a benchmark's daemon with SIGTERM: an error unless it exits 0 (a
// daemon that crashed under the load makes the run's numbers void).
absl::Status StopDaemon(testing::DaemonProcess& daemon);

struct StreamRun {
  double aggregate_gbps = 0;                  // all clients' bytes over their common window
  double loads_per_second = 0;                // all clients' loads over the same window
  std::vector<testing::ReportLines> reports;  // one per client, in spawn order
};

// Spawns `clients` gpu-stream roles against the daemon of `dirs`, each with
// `args` plus its own --socket, --report, --name and --device (client c on
// device c % devices), waits for all and adds them up. A client that fails
// fails the run with its reported error.
class StreamClients {
 public:
  explicit StreamClients(const testing::ScratchDirs& dirs) : dirs_(dirs) {}
  absl::StatusOr<StreamRun> Run(int clients, const std::vector<std::string>& args,
                                size_t devices = 1);

 private:
  const testing::ScratchDirs& dirs_;
  int spawned_ = 0;
};

// The gpu-stream arguments of one streaming pass: `loads` blocks of a model
// of `blocks` blocks of `block_bytes` through a ring of `slots` slots, with no
// byte comparisons (a benchmark measures the daemon, not the check). With a
// `model_id` the client opens that model instead of registering one.
std::vector<std::string> GpuStreamArgs(uint64_t block_bytes, uint32_t blocks, uint32_t slots,
                                       int loads, const std::string& model_id);

// The summary lines of one program.
class Summary {
 public:
  void Add(const std::string& id, const std::string& name, const std::string& goal, double measured,
           bool pass);
  // A metric that could not be measured: `measured=none MISS (<why>)`.
  void AddUnmeasured(const std::string& id, const std::string& name, const std::string& goal,
                     const std::string& why);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

}  // namespace blockswap::bench

#endif  // BLOCKSWAP_TESTS_BENCH_STREAM_CLIENTS_H_
