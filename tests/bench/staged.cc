// blockswap-bench-staged: P2-staged, staged copies beside direct
// ones, measured side by side in one run. Two daemons on the same backend:
// one pins its masters (pinning = "always": each load one copy from the
// pinned master), one stages them (pinning = "never": each load bounced
// through the pinned staging buffers by its staging threads,
// shared/copy/staged_copier.h). One gpu-stream client streams the same
// block size through each, alternately, --repeat times; the best round of
// each is kept. The metric is staged delivered GB/s ÷ direct GB/s:
//   --backend=cuda  goal >= 0.8 (tests/gpu/device-check.sh runs it);
//   --backend=host  reported: a staged load there is two memcpys (staging
//                   thread, then the stream's) where a direct load is one,
//                   so what it shows is how much of the second one the
//                   pipeline hides.
// Ends with `P2-staged <name> goal=<g> measured=<m> PASS|MISS` lines.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "shared/backend/backend.h"
#include "shared/base/status.h"
#include "tests/bench/copy_ceiling.h"
#include "tests/bench/stream_clients.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"

namespace blockswap::bench {
namespace {

using testing::DaemonFlags;
using testing::DaemonProcess;
using testing::ScratchDirs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Options {
  std::string backend = "cuda";
  std::vector<uint64_t> sizes_mib = {64};
  double gigabytes_per_case = 8;
  int repeat = 3;
  // The staged daemon's staging_* keys; empty: the daemon's defaults.
  std::vector<std::string> staging_args;
};

// One daemon and the client that streams through it.
struct Side {
  std::unique_ptr<ScratchDirs> dirs;
  std::unique_ptr<DaemonProcess> daemon;
  std::unique_ptr<StreamClients> clients;
  std::string model_id;
  double best_gbps = 0;
};

absl::StatusOr<Side> StartSide(const std::string& backend, std::vector<std::string> args) {
  Side side;
  BLOCKSWAP_ASSIGN_OR_RETURN(side.dirs, ScratchDirs::Create());
  BLOCKSWAP_ASSIGN_OR_RETURN(
      side.daemon,
      DaemonProcess::Start(*side.dirs, DaemonFlags{.extra_args = args, .backend = backend}));
  side.clients = std::make_unique<StreamClients>(*side.dirs);
  return side;
}

absl::StatusOr<double> Stream(Side& side, uint64_t bytes, int loads) {
  BLOCKSWAP_ASSIGN_OR_RETURN(
      StreamRun run,
      side.clients->Run(1, GpuStreamArgs(bytes, kModelBlocks, kSlots, loads, side.model_id)));
  if (side.model_id.empty()) side.model_id = testing::FirstValue(run.reports[0], "model");
  return run.aggregate_gbps;
}

absl::Status Run(const Options& options) {
  BLOCKSWAP_ASSIGN_OR_RETURN(BackendChoice choice, ParseBackendChoice(options.backend));
  if (absl::StatusOr<std::unique_ptr<Backend>> opened = OpenBackend(choice); !opened.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no usable device: ", opened.status().message()));
  }
  const bool host = options.backend == "host";
  std::vector<std::string> staged_args = {"--pinning=never"};
  staged_args.insert(staged_args.end(), options.staging_args.begin(), options.staging_args.end());
  BLOCKSWAP_ASSIGN_OR_RETURN(Side direct, StartSide(options.backend, {"--pinning=always"}));
  BLOCKSWAP_ASSIGN_OR_RETURN(Side staged, StartSide(options.backend, staged_args));
  Summary summary;
  std::printf("%-8s %12s %12s %8s\n", "block", "direct", "staged", "ratio");
  for (uint64_t mib : options.sizes_mib) {
    const uint64_t bytes = mib * kMiB;
    const int loads = std::max<int>(8, options.gigabytes_per_case * 1e9 / bytes);
    direct.best_gbps = staged.best_gbps = 0;
    direct.model_id.clear();
    staged.model_id.clear();
    for (int round = 0; round < options.repeat; ++round) {
      for (Side* side : {&direct, &staged}) {
        BLOCKSWAP_ASSIGN_OR_RETURN(double gbps, Stream(*side, bytes, loads));
        side->best_gbps = std::max(side->best_gbps, gbps);
      }
    }
    const double ratio = staged.best_gbps / direct.best_gbps;
    std::printf("%-8s %7.2f GB/s %7.2f GB/s %8.3f\n", absl::StrCat(mib, " MiB").c_str(),
                direct.best_gbps, staged.best_gbps, ratio);
    std::fflush(stdout);
    const std::string name =
        absl::StrCat(host ? "host-staged-over-direct-" : "cuda-staged-over-pinned-", mib, "MiB");
    if (host) {
      summary.Add("P2-staged", name, "report", ratio, true);
    } else {
      summary.Add("P2-staged", name, ">=0.80", ratio, ratio >= 0.8);
    }
  }
  for (Side* side : {&direct, &staged}) BLOCKSWAP_RETURN_IF_ERROR(StopDaemon(*side->daemon));
  std::printf("\n%s", summary.text().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace blockswap::bench

int main(int argc, char** argv) {
  blockswap::bench::Options options;
  CLI::App app("staged copies (masters not pinned) beside direct ones from pinned masters");
  app.add_option("--backend", options.backend, "cuda, or host");
  app.add_option("--sizes-mib", options.sizes_mib, "block sizes in MiB")->delimiter(',');
  app.add_option("--gigabytes", options.gigabytes_per_case, "GB streamed per measurement");
  app.add_option("--repeat", options.repeat, "direct/staged alternations, best of each kept");
  app.add_option("--staging-arg", options.staging_args,
                 "a flag for the staged daemon, e.g. --staging-arg=--staging-threads=2");
  return blockswap::bench::BenchmarkMain(
      argc, argv, app, "blockswap-bench-staged",
      [&](blockswap::testing::ScratchDirs&) { return blockswap::bench::Run(options); },
      /*precondition_skips=*/true);
}
