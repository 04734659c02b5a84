// blockswap-bench-h2d: host-to-device streaming through blockswapd beside
// its ceiling, measured side by side in one run (issue "GPU verification").
//
//   P1      per block size: in-process pinned H2D copies (the ceiling: the
//           same backend stream copy a trainer would do alone), then the
//           daemon streaming into one client's ring, then 2..4 clients at
//           once (aggregate over the common wall-clock window). Goal: one
//           client >= 0.97 of the ceiling at >= 64 MiB.
//   P4-GPU  pipelined passes (2 slots, kernel 1.25x and 1.0x the copy time)
//           at block sizes whose copy takes ~0.3, ~0.7 and ~1.5 ms: the
//           stall (step streaming vs the same kernels alone) through the
//           daemon minus the stall of the same pass in one process with the
//           reference's design, in percentage points, and the daemon's
//           release-to-issue latency from its trace
//           (tests/bench/pipelined_stall.h).
//   memory  the daemon's device memory with no ring allocated (its CUDA
//           context), from nvidia-smi.
//   registration  the read-only host registration a trainer that copies
//           itself makes once per master it maps, timed per GiB.
//
// With BLOCKSWAP_COPY=trainer the clients copy their blocks themselves (copy
// path "trainer"); with --compute=copies no process of the run uses the
// CUDA runtime (P4's kernels are host functions on the compute stream), so
// that it runs in the GPU check's first call, on any driver.
//
// Clients are gpu-stream roles (tests/gpu/gpu_roles.cc) spawned from this
// binary; the daemon is build/bin/blockswapd beside it. --backend=host runs
// everything on the host backend (a dry run; its numbers mean nothing for a
// GPU) and is, with its own goals, P2 and P4-host of docs/BENCHMARKS.md:
//
//   P2      host backend: the daemon's delivery into one client's ring ÷ the
//           ceiling, which on the host backend is one std::memcpy on one
//           thread (the host stream's copy). Goal >= 0.95 at >= 64 MiB.
//   P4-host the same pipelined pass, the "kernel" a sleep on the client's
//           host stream. Goal <= 2%.
//
// Ends with one line per metric: `<id> <name> goal=<g> measured=<m>
// PASS|MISS`.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
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
#include "shared/backend/backend.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"
#include "tests/bench/copy_ceiling.h"
#include "tests/bench/pipelined_stall.h"
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
  std::vector<uint64_t> sizes_mib = {1, 8, 64, 256};
  std::vector<int> client_counts = {2, 4};
  double gigabytes_per_case = 24;   // streamed per measurement
  int repeat = 1;                   // ceiling/one-client alternations, best kept
  PipelinedStallOptions pipelined;  // P4; its rounds are --repeat's
  // "copies": every client's compute and comparisons through the backend
  // only, no CUDA runtime (device_compute.h), as the GPU check's first call
  // needs; "kernels": a trainer's way.
  std::string compute = "kernels";
  // Read-only host registration (a trainer's pin of the masters it maps)
  // timed over this much memory; 0: not measured.
  double registration_gib = 1;
};

class Bench {
 public:
  Bench(Options options, ScratchDirs& dirs)
      : options_(std::move(options)),
        dirs_(dirs),
        clients_(dirs),
        host_(options_.backend == "host") {}

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
    std::printf("%-8s %10s %12s %8s %s%s\n", "block", "ceiling", "one client", "ratio",
                host_ ? "  per CPU-s: ceiling, daemon, ratio " : "",
                "aggregate over N clients (ratio to ceiling)");
    for (uint64_t mib : options_.sizes_mib) {
      const uint64_t bytes = mib * kMiB;
      const int copies = std::max<int>(8, options_.gigabytes_per_case * 1e9 / bytes);
      // Best of --repeat alternations of the ceiling and one client: on a
      // shared machine, the rounds least disturbed by other processes.
      Rate best_ceiling;
      std::vector<double> one = {0};
      double daemon_cpu_gbps = 0;
      model_id_.clear();
      for (int round = 0; round < options_.repeat; ++round) {
        BLOCKSWAP_ASSIGN_OR_RETURN(Rate rate, Ceiling(*backend->devices().front(), bytes, copies));
        best_ceiling.gbps = std::max(best_ceiling.gbps, rate.gbps);
        best_ceiling.cpu_gbps = std::max(best_ceiling.cpu_gbps, rate.cpu_gbps);
        const double cpu_start = ProcessCpuSeconds(daemon_->pid());
        BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<double> run, Clients(1, bytes, copies, devices, {}));
        // The daemon's CPU time includes its other threads (gRPC, sessions).
        daemon_cpu_gbps =
            std::max(daemon_cpu_gbps, static_cast<double>(bytes) * copies / 1e9 /
                                          (ProcessCpuSeconds(daemon_->pid()) - cpu_start));
        if (run[0] > one[0]) one = run;
      }
      const double ceiling = best_ceiling.gbps;
      std::string row =
          absl::StrFormat("%-8s %8.2f GB/s %7.2f GB/s %8.3f", absl::StrCat(mib, " MiB"), ceiling,
                          one[0], one[0] / ceiling);
      if (host_) {
        absl::StrAppend(
            &row, absl::StrFormat("  %6.2f %6.2f %6.3f ", best_ceiling.cpu_gbps, daemon_cpu_gbps,
                                  daemon_cpu_gbps / best_ceiling.cpu_gbps));
      }
      for (int n : options_.client_counts) {
        BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<double> all, Clients(n, bytes, copies, devices, {}));
        absl::StrAppend(&row, absl::StrFormat("  %d: %.2f GB/s (%.3f)", n, all[0],
                                              all[0] / (ceiling * std::min<size_t>(n, devices))));
      }
      std::printf("%s\n", row.c_str());
      std::fflush(stdout);
      if (mib >= 64) {
        const double goal = host_ ? 0.95 : 0.97;
        summary_.Add(host_ ? "P2" : "P1",
                     absl::StrCat(host_ ? "host-copy-one-client-" : "h2d-one-client-", mib, "MiB"),
                     absl::StrFormat(">=%.2f", goal), one[0] / ceiling, one[0] / ceiling >= goal);
        if (host_) {
          summary_.Add("P2", absl::StrCat("host-copy-per-cpu-second-", mib, "MiB"), "report",
                       daemon_cpu_gbps / best_ceiling.cpu_gbps, true);
        }
      }
    }
    PipelinedStallOptions pipelined = options_.pipelined;
    pipelined.rounds = options_.repeat;
    if (host_copies()) pipelined.compute = gpu_testing::ComputeKind::kHostCopies;
    BLOCKSWAP_RETURN_IF_ERROR(MeasurePipelinedStall(pipelined, backend->kind(),
                                                    *backend->devices().front(), devices, *daemon_,
                                                    clients_, summary_));
    DaemonMemory();
    BLOCKSWAP_RETURN_IF_ERROR(RegistrationTime(*backend->devices().front()));
    BLOCKSWAP_RETURN_IF_ERROR(StopDaemon(*daemon_));
    std::printf("\n%s", summary_.text().c_str());
    return absl::OkStatus();
  }

 private:
  // Runs `n` gpu-stream clients at once; returns the aggregate GB/s over
  // their common window, then each client's own.
  absl::StatusOr<std::vector<double>> Clients(int n, uint64_t bytes, int loads, size_t devices,
                                              std::vector<std::string> extra) {
    std::vector<std::string> args = GpuStreamArgs(bytes, kModelBlocks, kSlots, loads, model_id_);
    args.insert(args.end(), extra.begin(), extra.end());
    if (host_copies()) args.push_back("--compute=copies");
    BLOCKSWAP_ASSIGN_OR_RETURN(StreamRun run, clients_.Run(n, args, devices));
    std::vector<double> result = {run.aggregate_gbps};
    for (const auto& report : run.reports) {
      if (model_id_.empty()) model_id_ = testing::FirstValue(report, "model");
      result.push_back(testing::NumberValue(report, "gbps"));
    }
    return result;
  }

  bool host_copies() const { return options_.compute == "copies"; }

  // What a trainer that copies itself pays once per master it maps: the
  // read-only registration (RegisterReadOnlyHostMemory) of a read-only
  // shared mapping of --registration-gib GiB, timed, and its release.
  absl::Status RegistrationTime(Device& device) {
    if (options_.registration_gib <= 0) return absl::OkStatus();
    const size_t bytes = static_cast<size_t>(options_.registration_gib * (1ull << 30));
    UniqueFd memory(::memfd_create("blockswap-bench-registration", MFD_CLOEXEC));
    if (!memory.valid() || ::ftruncate(memory.get(), static_cast<off_t>(bytes)) != 0) {
      return ErrnoStatus(errno, "creating the memory to register");
    }
    {
      // Written first, as the daemon's masters are: registration then pins
      // pages that exist.
      void* writable =
          ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memory.get(), 0);
      if (writable == MAP_FAILED) return ErrnoStatus(errno, "mapping the memory to fill");
      std::memset(writable, 0x5a, bytes);
      ::munmap(writable, bytes);
    }
    void* view = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, memory.get(), 0);
    if (view == MAP_FAILED) return ErrnoStatus(errno, "mapping the memory read-only");
    absl::Duration registered, released;
    std::string refused;
    {
      const absl::Time start = absl::Now();
      absl::StatusOr<std::unique_ptr<HostRegistration>> pinned =
          device.RegisterReadOnlyHostMemory(view, bytes);
      registered = absl::Now() - start;
      if (pinned.ok()) {
        const absl::Time release_start = absl::Now();
        pinned->reset();
        released = absl::Now() - release_start;
      } else {
        refused = std::string(pinned.status().message());
      }
    }
    ::munmap(view, bytes);
    if (!refused.empty()) {
      std::printf("read-only registration of %.2f GiB refused: %s\n", options_.registration_gib,
                  refused.c_str());
      summary_.AddUnmeasured("P1", "read-only-registration-seconds-per-GiB", "report", refused);
      return absl::OkStatus();
    }
    const double per_gib = absl::ToDoubleSeconds(registered) / options_.registration_gib;
    std::printf("read-only registration of %.2f GiB: %.1f ms (%.3f s per GiB), release %.1f ms\n",
                options_.registration_gib, absl::ToDoubleMilliseconds(registered), per_gib,
                absl::ToDoubleMilliseconds(released));
    summary_.Add("P1", "read-only-registration-seconds-per-GiB", "report", per_gib, true);
    return absl::OkStatus();
  }

  // The daemon's own device memory once no ring exists: its CUDA contexts.
  void DaemonMemory() {
    if (options_.backend != "cuda") return;
    const std::string command =
        "nvidia-smi --query-compute-apps=pid,used_memory "
        "--format=csv,noheader,nounits 2>/dev/null";
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return;
    char line[256];
    double mib = 0;
    while (std::fgets(line, sizeof(line), pipe) != nullptr) {
      std::vector<std::string> fields =
          absl::StrSplit(line, absl::ByAnyChar(", \n"), absl::SkipEmpty());
      int pid = 0;
      double used = 0;
      if (fields.size() >= 2 && absl::SimpleAtoi(fields[0], &pid) && pid == daemon_->pid() &&
          absl::SimpleAtod(fields[1], &used)) {
        mib += used;
      }
    }
    ::pclose(pipe);
    std::printf("daemon device memory with no ring allocated (all GPUs): %.0f MiB\n", mib);
    summary_.Add("GPU", "daemon-device-memory-MiB", "report", mib, true);
  }

  const Options options_;
  ScratchDirs& dirs_;
  StreamClients clients_;
  const bool host_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::string model_id_;
  Summary summary_;
};

}  // namespace
}  // namespace blockswap::bench

int main(int argc, char** argv) {
  blockswap::bench::Options options;
  CLI::App app("blockswapd host-to-device streaming beside its ceiling (P1, P4-GPU)");
  app.add_option("--backend", options.backend, "cuda, or host for a dry run");
  app.add_option("--sizes-mib", options.sizes_mib, "block sizes in MiB")->delimiter(',');
  app.add_option("--clients", options.client_counts, "concurrent client counts")->delimiter(',');
  app.add_option("--gigabytes", options.gigabytes_per_case, "GB streamed per measurement");
  app.add_option("--stall-loads", options.pipelined.blocks, "blocks of each P4 pass");
  app.add_option("--p4-copy-ms", options.pipelined.copy_ms,
                 "P4: one copy's time on this backend, ms, per case")
      ->delimiter(',');
  app.add_option("--p4-factors", options.pipelined.compute_factors,
                 "P4: kernel time as multiples of the copy time")
      ->delimiter(',');
  app.add_option("--compute", options.compute,
                 "kernels, or copies: clients and the in-process baseline need no CUDA runtime "
                 "(P4's kernels become host functions of the same length)")
      ->check(CLI::IsMember({"kernels", "copies"}));
  app.add_option("--registration-gib", options.registration_gib,
                 "GiB of read-only mapping whose registration is timed (0: none)");
  app.add_option("--repeat", options.repeat,
                 "ceiling/one-client rounds per size and P4 rounds per case, best kept");
  return blockswap::bench::BenchmarkMain(
      argc, argv, app, "blockswap-bench-h2d",
      [&](blockswap::testing::ScratchDirs& dirs) {
        return blockswap::bench::Bench(options, dirs).Run();
      },
      /*precondition_skips=*/true);
}
