// blockswap-bench-memory (P5, issue 8): the node's memory for one model
// shared by N streaming clients, beside the same N processes each holding a
// private copy (the reference's in-process design), in one run.
//
//   shared   blockswapd (host backend) holds the model's masters, M bytes in
//            /dev/shm; N client processes each open it and stream every
//            block in turn through a ring of their own. Once every client
//            has streamed each block once (so every master page was read),
//            and while they keep streaming: Σ PSS (/proc/PID/smaps_rollup)
//            of the daemon and the clients ÷ M. Goal <= 1.1 + (ring bytes
//            + 64 MiB per client) / M.
//   private  N processes that each hold their own filled copy of M bytes:
//            Σ PSS ÷ M (≈ N).
//
// Ends with one line per metric: `P5 <name> goal=<g> measured=<m> PASS|MISS`.
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "client/core/ring.h"
#include "shared/base/status.h"
#include "tests/bench/stream_clients.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"

namespace blockswap::bench {
namespace {

using testing::ChildProcess;
using testing::DaemonProcess;
using testing::KeyValueArgs;
using testing::RoleReport;
using testing::ScratchDirs;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint32_t kSlots = 2;

struct Options {
  uint64_t model_mib = 1024;  // at least this much (one block more), in blocks of --block-mib
  uint64_t block_mib = 32;
  int clients = 8;
};

bool Stopped(const KeyValueArgs& args) {
  struct stat st;
  return ::stat(args.Str("stop").c_str(), &st) == 0;
}

absl::Status StreamUntilStopped(const KeyValueArgs& args, const RoleReport& report) {
  BLOCKSWAP_ASSIGN_OR_RETURN(auto connection,
                             client::Connection::Connect(args.Str("socket"), "bench-memory"));
  BLOCKSWAP_ASSIGN_OR_RETURN(auto model, client::Model::Open(*connection, args.Str("model-id")));
  uint64_t slot_bytes = 0;
  for (const BlockSpec& block : model->layout().blocks) {
    slot_bytes = std::max<uint64_t>(slot_bytes, block.bytes);
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(
      auto ring,
      client::Ring::Create(*connection, connection->device_uuids().front(), kSlots, slot_bytes));
  report.Add("ring_bytes", absl::StrCat(kSlots * slot_bytes));
  const uint32_t blocks = model->block_count();
  for (uint64_t k = 0; !Stopped(args); ++k) {
    const uint32_t slot = static_cast<uint32_t>(k % kSlots);
    BLOCKSWAP_RETURN_IF_ERROR(ring->Load(slot, *model, static_cast<uint32_t>(k % blocks), nullptr));
    BLOCKSWAP_RETURN_IF_ERROR(ring->Wait(slot, nullptr, absl::Seconds(60)));
    if (k + 1 == blocks) report.Add("streaming", "1");
  }
  return ring->Drain(absl::Seconds(60));
}

// A client of the shared case: opens --model-id and streams its blocks in
// order through a two-slot ring until the file --stop exists.
int RunStreamer(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  if (absl::Status status = StreamUntilStopped(args, report); !status.ok()) {
    report.Add("error", std::string(status.message()));
    return 1;
  }
  return 0;
}
BLOCKSWAP_CHILD_ROLE("bench-memory-stream", RunStreamer);

// A process of the private case: fills --bytes of its own memory and holds
// them until the file --stop exists.
int RunPrivateCopy(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  std::unique_ptr<char[]> copy(new char[args.Int("bytes", 0)]);
  std::memset(copy.get(), 0x5a, args.Int("bytes", 0));
  report.Add("holding", "1");
  while (!Stopped(args)) absl::SleepFor(absl::Milliseconds(20));
  return copy[args.Int("bytes", 1) - 1] == 0x5a ? 0 : 1;
}
BLOCKSWAP_CHILD_ROLE("bench-memory-private", RunPrivateCopy);

// Proportional set size of a process, bytes.
absl::StatusOr<double> PssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/smaps_rollup"));
  std::string key, unit;
  double kb = 0;
  while (in >> key) {
    if (key == "Pss:" && in >> kb) return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return absl::NotFoundError(absl::StrCat("no Pss in /proc/", pid, "/smaps_rollup"));
}

// Spawns `n` processes of `role`, waits until each reported `ready_key`,
// and returns Σ PSS of them plus `extra_pids`; stops them via the stop file.
absl::StatusOr<double> SumPss(const ScratchDirs& dirs, const std::string& role, int n,
                              const std::vector<std::string>& args, const std::string& ready_key,
                              const std::vector<pid_t>& extra_pids,
                              std::vector<testing::ReportLines>* reports) {
  static int round = 0;
  const std::string stop = absl::StrCat(dirs.temp_dir(), "/stop-", ++round);
  std::vector<ChildProcess> children;
  std::vector<std::string> paths;
  for (int c = 0; c < n; ++c) {
    paths.push_back(absl::StrCat(dirs.temp_dir(), "/", role, "-", round, "-", c, ".report"));
    std::vector<std::string> role_args = {"--report=" + paths.back(), "--stop=" + stop};
    role_args.insert(role_args.end(), args.begin(), args.end());
    BLOCKSWAP_ASSIGN_OR_RETURN(ChildProcess child,
                               ChildProcess::Spawn(role, {.args = std::move(role_args)}));
    children.push_back(std::move(child));
  }
  const absl::Time deadline = absl::Now() + absl::Minutes(3);
  for (int c = 0; c < n; ++c) {
    while (true) {
      const testing::ReportLines report = testing::ReadRoleReport(paths[c]);
      if (!testing::FirstValue(report, ready_key).empty()) break;
      if (!testing::FirstValue(report, "error").empty() || children[c].TryWait().has_value() ||
          absl::Now() > deadline) {
        return absl::InternalError(absl::StrCat(role, " ", c, " never reported ", ready_key, ": ",
                                                testing::FirstValue(report, "error")));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  double total = 0;
  std::vector<pid_t> pids = extra_pids;
  for (const ChildProcess& child : children) pids.push_back(child.pid());
  for (pid_t pid : pids) {
    BLOCKSWAP_ASSIGN_OR_RETURN(double pss, PssBytes(pid));
    total += pss;
  }
  std::ofstream(stop).put('\n');
  for (int c = 0; c < n; ++c) {
    BLOCKSWAP_ASSIGN_OR_RETURN(int code, children[c].Wait(absl::Minutes(1)));
    testing::ReportLines report = testing::ReadRoleReport(paths[c]);
    if (code != 0) {
      return absl::InternalError(
          absl::StrCat(role, " ", c, " exited ", code, ": ", testing::FirstValue(report, "error")));
    }
    if (reports != nullptr) reports->push_back(std::move(report));
  }
  return total;
}

// The bytes of the daemon's masters: the files of its master directory.
double MasterBytes(const ScratchDirs& dirs) {
  double bytes = 0;
  for (const std::string& entry : dirs.ShmEntries()) {
    struct stat st;
    if (::stat((dirs.shm_dir() + "/" + entry).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      bytes += static_cast<double>(st.st_size);
    }
  }
  return bytes;
}

absl::Status Run(const Options& options, ScratchDirs& dirs) {
  BLOCKSWAP_ASSIGN_OR_RETURN(auto daemon, DaemonProcess::Start(dirs, {.backend = "host"}));
  // Register the model through one gpu-stream client that loads nothing
  // (its blocks are --block-bytes less a few KiB each, gpu_roles.cc); M is
  // then what the daemon's master files hold.
  const uint64_t blocks = options.model_mib / options.block_mib + 1;
  StreamClients registrar(dirs);
  BLOCKSWAP_ASSIGN_OR_RETURN(
      StreamRun registered,
      registrar.Run(1, {absl::StrCat("--block-bytes=", options.block_mib * kMiB),
                        absl::StrCat("--blocks=", blocks), "--slots=1", "--loads=0", "--verify=0",
                        "--timeout-ms=120000"}));
  const std::string model = testing::FirstValue(registered.reports[0], "model");
  const double m = MasterBytes(dirs);
  if (m <= 0) return absl::InternalError("no master file in the daemon's master directory");

  std::vector<testing::ReportLines> reports;
  BLOCKSWAP_ASSIGN_OR_RETURN(
      double shared, SumPss(dirs, "bench-memory-stream", options.clients,
                            {"--socket=" + dirs.socket_path(), "--model-id=" + model}, "streaming",
                            {daemon->pid()}, &reports));
  double ring_bytes = 0;
  for (const auto& report : reports) ring_bytes += testing::NumberValue(report, "ring_bytes");
  BLOCKSWAP_ASSIGN_OR_RETURN(
      double private_copies,
      SumPss(dirs, "bench-memory-private", options.clients,
             {absl::StrCat("--bytes=", static_cast<uint64_t>(m))}, "holding", {}, nullptr));
  BLOCKSWAP_ASSIGN_OR_RETURN(int code, daemon->Stop(SIGTERM));
  if (code != 0) return absl::InternalError(absl::StrCat("blockswapd exited ", code));

  const double goal = 1.1 + (ring_bytes + options.clients * 64.0 * kMiB) / m;
  std::printf("model M = %.0f MiB in %llu blocks, %d clients, rings %.0f MiB in all\n", m / kMiB,
              static_cast<unsigned long long>(blocks), options.clients, ring_bytes / kMiB);
  std::printf("%-44s %10.0f MiB  %6.2f x M\n", "shared: sum PSS of blockswapd + clients",
              shared / kMiB, shared / m);
  std::printf("%-44s %10.0f MiB  %6.2f x M\n", "private: sum PSS of processes with a copy",
              private_copies / kMiB, private_copies / m);
  Summary summary;
  summary.Add("P5", absl::StrCat("pss-shared-", options.clients, "-clients-over-M"),
              absl::StrFormat("<=%.2f", goal), shared / m, shared / m <= goal);
  summary.Add("P5", absl::StrCat("pss-private-copies-", options.clients, "-over-M"), "report",
              private_copies / m, true);
  std::printf("\n%s", summary.text().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace blockswap::bench

int main(int argc, char** argv) {
  if (int code = blockswap::testing::MaybeRunChildRole(argc, argv); code >= 0) return code;
  blockswap::bench::Options options;
  CLI::App app("node memory for one model shared by N clients, beside private copies (P5)");
  app.add_option("--model-mib", options.model_mib, "model size, at least (MiB)");
  app.add_option("--block-mib", options.block_mib, "largest block (MiB)");
  app.add_option("--clients", options.clients, "client processes");
  CLI11_PARSE(app, argc, argv);
  return blockswap::bench::RunBenchmark(
      "blockswap-bench-memory",
      [&](blockswap::testing::ScratchDirs& dirs) { return blockswap::bench::Run(options, dirs); });
}
