// blockswap-bench-h2d: host-to-device streaming through blockswapd beside
// its ceiling, measured side by side in one run (issue "GPU verification").
//
//   P1      per block size: in-process pinned H2D copies (the ceiling: the
//           same backend stream copy a trainer would do alone), then the
//           daemon streaming into one client's ring, then 2..4 clients at
//           once (aggregate over the common wall-clock window). Goal: one
//           client >= 0.97 of the ceiling at >= 64 MiB.
//   P4-GPU  a pipelined pass whose per-block kernel takes 1.25x the copy
//           time: (step time streaming - step time with the same kernels
//           and no loads) / step time streaming. Goal <= 1%.
//   memory  the daemon's device memory with no ring allocated (its CUDA
//           context), from nvidia-smi.
//
// Clients are gpu-stream roles (tests/gpu/gpu_roles.cc) spawned from this
// binary; the daemon is build/bin/blockswapd beside it. --backend=host runs
// everything on the host backend (a dry run; its numbers mean nothing for a
// GPU). Ends with one line per metric: `<id> <name> goal=<g> measured=<m>
// PASS|MISS`.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "shared/backend.h"
#include "shared/shared_memory.h"
#include "shared/status.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/role_report.h"

namespace blockswap::bench {
namespace {

using testing::ChildProcess;
using testing::DaemonFlags;
using testing::DaemonProcess;
using testing::ReportLines;
using testing::ScratchDirs;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint32_t kModelBlocks = 4;
constexpr uint32_t kSlots = 2;

struct Options {
  std::string backend = "cuda";
  std::vector<uint64_t> sizes_mib = {1, 8, 64, 256};
  std::vector<int> client_counts = {2, 4};
  double gigabytes_per_case = 24;  // streamed per measurement
};

double Number(const ReportLines& report, const std::string& key) {
  double value = -1;
  return absl::SimpleAtod(testing::FirstValue(report, key), &value) ? value : -1;
}

// The ceiling: `bytes` copies from one pinned host buffer into two device
// buffers in turn on one stream of this process, as a trainer pinning its
// own copy would do.
absl::StatusOr<double> CeilingGbps(Device& device, uint64_t bytes, int copies) {
  BLOCKSWAP_ASSIGN_OR_RETURN(SharedMemory host, SharedMemory::Create("bench-h2d", bytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, host.Map(Access::kReadWrite));
  std::fill_n(static_cast<char*>(mapping.data()), bytes, 7);
  BLOCKSWAP_ASSIGN_OR_RETURN(auto pinned, device.RegisterHostMemory(mapping.data(), bytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(auto target, device.Allocate(2 * bytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(auto stream, device.CreateStream());
  auto copy = [&](int i) {
    return stream->CopyHostToDevice(target->data() + (i % 2) * bytes, mapping.data(), bytes);
  };
  for (int i = 0; i < 2; ++i) BLOCKSWAP_RETURN_IF_ERROR(copy(i));  // warm-up
  BLOCKSWAP_RETURN_IF_ERROR(stream->Synchronize());
  const absl::Time start = absl::Now();
  for (int i = 0; i < copies; ++i) BLOCKSWAP_RETURN_IF_ERROR(copy(i));
  BLOCKSWAP_RETURN_IF_ERROR(stream->Synchronize());
  return static_cast<double>(bytes) * copies / absl::ToDoubleSeconds(absl::Now() - start) / 1e9;
}

class Bench {
 public:
  Bench(Options options, ScratchDirs& dirs) : options_(std::move(options)), dirs_(dirs) {}

  absl::Status Run() {
    BLOCKSWAP_ASSIGN_OR_RETURN(BackendChoice choice, ParseBackendChoice(options_.backend));
    absl::StatusOr<std::unique_ptr<Backend>> opened = OpenBackend(choice);
    if (!opened.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("no usable device: ", opened.status().message()));
    }
    std::unique_ptr<Backend> backend = *std::move(opened);
    const size_t devices = backend->devices().size();
    BLOCKSWAP_ASSIGN_OR_RETURN(
        daemon_, DaemonProcess::Start(dirs_, DaemonFlags{.backend = options_.backend}));
    std::printf("%-8s %10s %12s %8s %s\n", "block", "ceiling", "one client", "ratio",
                "aggregate over N clients (ratio to ceiling)");
    for (uint64_t mib : options_.sizes_mib) {
      const uint64_t bytes = mib * kMiB;
      const int copies = std::max<int>(8, options_.gigabytes_per_case * 1e9 / bytes);
      BLOCKSWAP_ASSIGN_OR_RETURN(double ceiling,
                                 CeilingGbps(*backend->devices().front(), bytes, copies));
      model_id_.clear();
      BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<double> one, Clients(1, bytes, copies, devices, {}));
      std::string row = absl::StrFormat("%-8s %8.2f GB/s %7.2f GB/s %8.3f",
                                        absl::StrCat(mib, " MiB"), ceiling, one[0],
                                        one[0] / ceiling);
      for (int n : options_.client_counts) {
        BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<double> all, Clients(n, bytes, copies, devices, {}));
        absl::StrAppend(&row, absl::StrFormat("  %d: %.2f GB/s (%.3f)", n, all[0],
                                              all[0] / (ceiling * std::min<size_t>(n, devices))));
      }
      std::printf("%s\n", row.c_str());
      std::fflush(stdout);
      if (mib >= 64) {
        Summary("P1", absl::StrCat("h2d-one-client-", mib, "MiB"), ">=0.97", one[0] / ceiling,
                one[0] / ceiling >= 0.97);
      }
      if (mib == 64 || (options_.sizes_mib.size() == 1)) {
        BLOCKSWAP_RETURN_IF_ERROR(StallFraction(bytes, ceiling, devices));
      }
    }
    DaemonMemory();
    BLOCKSWAP_ASSIGN_OR_RETURN(int code, daemon_->Stop(SIGTERM));
    if (code != 0) return absl::InternalError(absl::StrCat("blockswapd exited ", code));
    std::printf("\n%s", summary_.c_str());
    return absl::OkStatus();
  }

 private:
  // Runs `n` gpu-stream clients at once; returns the aggregate GB/s over
  // their common window, then each client's own.
  absl::StatusOr<std::vector<double>> Clients(int n, uint64_t bytes, int loads, size_t devices,
                                              std::vector<std::string> extra) {
    std::vector<ChildProcess> children;
    std::vector<std::string> reports;
    for (int c = 0; c < n; ++c) {
      const std::string name = absl::StrCat("client-", ++spawned_);
      reports.push_back(dirs_.temp_dir() + "/" + name + ".report");
      std::vector<std::string> args = {
          "--socket=" + dirs_.socket_path(), "--report=" + reports.back(), "--name=" + name,
          absl::StrCat("--block-bytes=", bytes), absl::StrCat("--blocks=", kModelBlocks),
          absl::StrCat("--slots=", kSlots), absl::StrCat("--loads=", loads), "--verify=0",
          "--timeout-ms=60000", absl::StrCat("--device=", c % devices)};
      if (!model_id_.empty()) args.push_back("--model-id=" + model_id_);
      args.insert(args.end(), extra.begin(), extra.end());
      BLOCKSWAP_ASSIGN_OR_RETURN(ChildProcess child,
                                 ChildProcess::Spawn("gpu-stream", {.args = std::move(args)}));
      children.push_back(std::move(child));
    }
    double first_start = 1e300, last_end = 0, total_bytes = 0;
    std::vector<double> result(1);
    for (int c = 0; c < n; ++c) {
      BLOCKSWAP_ASSIGN_OR_RETURN(int code, children[c].Wait(absl::Minutes(5)));
      const ReportLines report = testing::ReadRoleReport(reports[c]);
      if (code != 0) {
        return absl::InternalError(absl::StrCat("client exited ", code, ": ",
                                                testing::FirstValue(report, "error")));
      }
      if (model_id_.empty()) model_id_ = testing::FirstValue(report, "model");
      const double start = Number(report, "start"), end = Number(report, "end");
      first_start = std::min(first_start, start);
      last_end = std::max(last_end, end);
      total_bytes += Number(report, "gbps") * 1e9 * (end - start);
      result.push_back(Number(report, "gbps"));
      seconds_.push_back(Number(report, "seconds"));
    }
    result[0] = total_bytes / (last_end - first_start) / 1e9;
    return result;
  }

  // P4-GPU: the same kernels with and without streaming.
  absl::Status StallFraction(uint64_t bytes, double ceiling_gbps, size_t devices) {
    const double copy_us = static_cast<double>(bytes) / (ceiling_gbps * 1e9) * 1e6;
    const int64_t compute_us = static_cast<int64_t>(1.25 * copy_us) + 1;
    const int loads = 300;
    const std::vector<std::string> compute = {absl::StrCat("--compute-us=", compute_us)};
    seconds_.clear();
    BLOCKSWAP_RETURN_IF_ERROR(Clients(1, bytes, loads, devices, compute).status());
    std::vector<std::string> compute_only = compute;
    compute_only.push_back("--compute-only=1");
    BLOCKSWAP_RETURN_IF_ERROR(Clients(1, bytes, loads, devices, compute_only).status());
    const double streaming = seconds_[0], alone = seconds_[1];
    const double stall = std::max(0.0, (streaming - alone) / streaming);
    std::printf("P4-GPU: %d blocks of %.0f MiB, kernel %lld us (copy %.0f us): step %.4f s "
                "streaming, %.4f s without loads: stall %.2f%%\n",
                loads, bytes / double(kMiB), static_cast<long long>(compute_us), copy_us,
                streaming, alone, 100 * stall);
    Summary("P4-GPU", "stall-per-step", "<=0.01", stall, stall <= 0.01);
    return absl::OkStatus();
  }

  // The daemon's own device memory once no ring exists: its CUDA contexts.
  void DaemonMemory() {
    if (options_.backend != "cuda") return;
    const std::string command = "nvidia-smi --query-compute-apps=pid,used_memory "
                                "--format=csv,noheader,nounits 2>/dev/null";
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return;
    char line[256];
    double mib = 0;
    while (std::fgets(line, sizeof(line), pipe) != nullptr) {
      std::vector<std::string> fields = absl::StrSplit(line, absl::ByAnyChar(", \n"),
                                                       absl::SkipEmpty());
      int pid = 0;
      double used = 0;
      if (fields.size() >= 2 && absl::SimpleAtoi(fields[0], &pid) && pid == daemon_->pid() &&
          absl::SimpleAtod(fields[1], &used)) {
        mib += used;
      }
    }
    ::pclose(pipe);
    std::printf("daemon device memory with no ring allocated (all GPUs): %.0f MiB\n", mib);
    Summary("GPU", "daemon-device-memory-MiB", "report", mib, true);
  }

  void Summary(const std::string& id, const std::string& name, const std::string& goal,
               double measured, bool pass) {
    absl::StrAppend(&summary_, absl::StrFormat("%s %s goal=%s measured=%.4g %s\n", id, name, goal,
                                               measured, pass ? "PASS" : "MISS"));
  }

  const Options options_;
  ScratchDirs& dirs_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::string model_id_;
  int spawned_ = 0;
  std::vector<double> seconds_;
  std::string summary_;
};

}  // namespace
}  // namespace blockswap::bench

int main(int argc, char** argv) {
  if (int code = blockswap::testing::MaybeRunChildRole(argc, argv); code >= 0) return code;
  blockswap::bench::Options options;
  CLI::App app("blockswapd host-to-device streaming beside its ceiling (P1, P4-GPU)");
  app.add_option("--backend", options.backend, "cuda, or host for a dry run");
  app.add_option("--sizes-mib", options.sizes_mib, "block sizes in MiB")->delimiter(',');
  app.add_option("--clients", options.client_counts, "concurrent client counts")->delimiter(',');
  app.add_option("--gigabytes", options.gigabytes_per_case, "GB streamed per measurement");
  CLI11_PARSE(app, argc, argv);
  auto dirs = blockswap::testing::ScratchDirs::Create();
  if (!dirs.ok()) {
    std::cerr << "blockswap-bench-h2d: " << dirs.status() << "\n";
    return 1;
  }
  blockswap::bench::Bench bench(options, **dirs);
  if (absl::Status status = bench.Run(); !status.ok()) {
    std::cerr << "blockswap-bench-h2d: " << status << "\n";
    // 77: skipped (ctest's SKIP_RETURN_CODE); device-check.sh counts it as
    // a failure on a GPU machine.
    return absl::IsFailedPrecondition(status) ? 77 : 1;
  }
  return 0;
}
