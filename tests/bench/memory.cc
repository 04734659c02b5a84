// blockswap-bench-memory (P5): the node's memory for one model
// shared by N streaming clients, beside the same N processes each holding a
// private copy (the reference's in-process design), in one run.
//
//   shared   blockswapd (host backend) holds the model's masters, M bytes in
//            /dev/shm; N client processes each open it and stream every
//            block in turn through a ring of their own. Once every client
//            has streamed each block once (so every master page was read),
//            and while they keep streaming: Σ PSS (/proc/PID/smaps_rollup)
//            of the daemon and the clients ÷ M. Goal <= 1.1 + (ring bytes
//            + 64 MiB per client) / M. Measured on both copy paths in turn
//            (BLOCKSWAP_COPY=daemon, then trainer: each client's ring is then
//            its own memory, and it copies from its mapping of the masters).
//   private  N processes that each hold their own filled copy of M bytes:
//            Σ PSS ÷ M (≈ N).
//
// With --mixed (P5-mixed): trainers of one model with different
// blocks_to_swap. Client c of N streams S_c = (c+1)·B/N of the B blocks
// (2, 4, ..., 16 of 16 for 8 clients), chosen as the trainers choose them
// (client::PlaceBlocks, the reference's evenly spaced streaming blocks), and
// uploads them itself, as a trainer does:
//   same      every client's blocks are the same model's: (Σ PSS of the
//             daemon and the clients − ring bytes) ÷ bytes of the union of
//             the streamed blocks. Goal <= 1.1.
//   distinct  the same clients, each block's bytes made different per client
//             (another seed), on a fresh daemon: what the per-model layout
//             held for the "same" case, where every model had its own copy
//             of its blocks (≈ Σ S_c ÷ B).
//
// Ends with one line per metric: `P5 <name> goal=<g> measured=<m> PASS|MISS`.
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
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
#include "tests/bench/streamed_blocks.h"
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
  bool mixed = false;    // P5-mixed instead of P5
  uint32_t blocks = 16;  // P5-mixed: blocks of the model, of --block-mib at most
};

bool Stopped(const KeyValueArgs& args) {
  struct stat st;
  return ::stat(args.Str("stop").c_str(), &st) == 0;
}

// Streams `model`'s blocks in order through a two-slot ring of its own until
// the file --stop exists; reports `streaming` once each block went through.
absl::Status StreamUntilStopped(client::Connection& connection, const client::Model& model,
                                const KeyValueArgs& args, const RoleReport& report) {
  uint64_t slot_bytes = 0;
  for (const BlockSpec& block : model.layout().blocks) {
    slot_bytes = std::max<uint64_t>(slot_bytes, block.bytes);
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(
      auto ring,
      client::Ring::Create(connection, connection.device_uuids().front(), kSlots, slot_bytes));
  report.Add("ring_bytes", absl::StrCat(kSlots * slot_bytes));
  const uint32_t blocks = model.block_count();
  for (uint64_t k = 0; !Stopped(args); ++k) {
    const uint32_t slot = static_cast<uint32_t>(k % kSlots);
    BLOCKSWAP_RETURN_IF_ERROR(ring->Load(slot, model, static_cast<uint32_t>(k % blocks), nullptr));
    BLOCKSWAP_RETURN_IF_ERROR(ring->Wait(slot, nullptr, absl::Seconds(60)));
    if (k + 1 == blocks) report.Add("streaming", "1");
  }
  return ring->Drain(absl::Seconds(60));
}

absl::Status OpenAndStream(const KeyValueArgs& args, const RoleReport& report) {
  BLOCKSWAP_ASSIGN_OR_RETURN(auto connection,
                             client::Connection::Connect(args.Str("socket"), "bench-memory"));
  BLOCKSWAP_ASSIGN_OR_RETURN(auto model, client::Model::Open(*connection, args.Str("model-id")));
  return StreamUntilStopped(*connection, *model, args, report);
}

// A trainer of P5-mixed: uploads the --swap streaming blocks of a model of
// --blocks blocks (block b's bytes: BlockContent(--seed, --block-bytes, b)),
// reports each one's full-model index and size, then streams them.
absl::Status UploadSubsetAndStream(const KeyValueArgs& args, const RoleReport& report) {
  BLOCKSWAP_ASSIGN_OR_RETURN(auto connection,
                             client::Connection::Connect(args.Str("socket"), "bench-memory"));
  std::unique_ptr<client::Model> model;
  std::vector<uint32_t> indices;
  {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        StreamedBlocks blocks,
        StreamedBlocks::Make(static_cast<uint32_t>(args.Int("blocks", 16)),
                             static_cast<uint32_t>(args.Int("swap", 16)),
                             args.Int("block-bytes", 0), args.Int("seed", 1)));
    BLOCKSWAP_ASSIGN_OR_RETURN(model,
                               client::Model::Register(*connection, "bench-mixed", blocks.uploads()));
    indices = blocks.indices();
  }  // the uploaded bytes are freed before anything is measured
  for (uint32_t k = 0; k < indices.size(); ++k) {
    report.Add("block", absl::StrCat(indices[k], ":", model->layout().blocks[k].bytes));
  }
  return StreamUntilStopped(*connection, *model, args, report);
}

// A role's exit code: 0, or 1 with its error reported.
int Reported(const RoleReport& report, const absl::Status& status) {
  if (status.ok()) return 0;
  report.Add("error", std::string(status.message()));
  return 1;
}

// A client of the shared case: opens --model-id and streams its blocks.
int RunStreamer(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  return Reported(report, OpenAndStream(args, report));
}
BLOCKSWAP_CHILD_ROLE("bench-memory-stream", RunStreamer);

// A client of P5-mixed: uploads its subset and streams it.
int RunSubsetStreamer(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  return Reported(report, UploadSubsetAndStream(args, report));
}
BLOCKSWAP_CHILD_ROLE("bench-memory-subset", RunSubsetStreamer);

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

// Spawns `n` processes of `role` (process c with args_of(c)), waits until
// each reported `ready_key`, and returns Σ PSS of them plus `extra_pids`;
// stops them via the stop file.
absl::StatusOr<double> SumPss(const ScratchDirs& dirs, const std::string& role, int n,
                              const std::function<std::vector<std::string>(int)>& args_of,
                              const std::string& ready_key, const std::vector<pid_t>& extra_pids,
                              std::vector<testing::ReportLines>* reports) {
  static int round = 0;
  const std::string stop = absl::StrCat(dirs.temp_dir(), "/stop-", ++round);
  std::vector<ChildProcess> children;
  std::vector<std::string> paths;
  for (int c = 0; c < n; ++c) {
    paths.push_back(absl::StrCat(dirs.temp_dir(), "/", role, "-", round, "-", c, ".report"));
    std::vector<std::string> role_args = {"--report=" + paths.back(), "--stop=" + stop};
    const std::vector<std::string> args = args_of(c);
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

  // The same clients on each copy path (the children inherit BLOCKSWAP_COPY):
  // the daemon's rings are in its PSS, the trainers' in theirs.
  const auto shared_pss = [&](const char* copy,
                              std::vector<testing::ReportLines>* reports) -> absl::StatusOr<double> {
    ::setenv("BLOCKSWAP_COPY", copy, 1);
    absl::StatusOr<double> pss = SumPss(
        dirs, "bench-memory-stream", options.clients,
        [&](int) {
          return std::vector<std::string>{"--socket=" + dirs.socket_path(), "--model-id=" + model};
        },
        "streaming", {daemon->pid()}, reports);
    ::unsetenv("BLOCKSWAP_COPY");
    return pss;
  };
  std::vector<testing::ReportLines> reports;
  BLOCKSWAP_ASSIGN_OR_RETURN(double shared, shared_pss("daemon", &reports));
  BLOCKSWAP_ASSIGN_OR_RETURN(double shared_trainer, shared_pss("trainer", nullptr));
  double ring_bytes = 0;
  for (const auto& report : reports) ring_bytes += testing::NumberValue(report, "ring_bytes");
  BLOCKSWAP_ASSIGN_OR_RETURN(
      double private_copies,
      SumPss(
          dirs, "bench-memory-private", options.clients,
          [&](int) {
            return std::vector<std::string>{absl::StrCat("--bytes=", static_cast<uint64_t>(m))};
          },
          "holding", {}, nullptr));
  BLOCKSWAP_RETURN_IF_ERROR(StopDaemon(*daemon));

  const double goal = 1.1 + (ring_bytes + options.clients * 64.0 * kMiB) / m;
  std::printf("model M = %.0f MiB in %llu blocks, %d clients, rings %.0f MiB in all\n", m / kMiB,
              static_cast<unsigned long long>(blocks), options.clients, ring_bytes / kMiB);
  std::printf("%-44s %10.0f MiB  %6.2f x M\n", "shared: sum PSS of blockswapd + clients",
              shared / kMiB, shared / m);
  std::printf("%-44s %10.0f MiB  %6.2f x M\n", "shared, trainer copies: the same",
              shared_trainer / kMiB, shared_trainer / m);
  std::printf("%-44s %10.0f MiB  %6.2f x M\n", "private: sum PSS of processes with a copy",
              private_copies / kMiB, private_copies / m);
  Summary summary;
  summary.Add("P5", absl::StrCat("pss-shared-", options.clients, "-clients-over-M"),
              absl::StrFormat("<=%.2f", goal), shared / m, shared / m <= goal);
  summary.Add("P5", absl::StrCat("pss-shared-trainer-copies-", options.clients, "-clients-over-M"),
              absl::StrFormat("<=%.2f", goal), shared_trainer / m, shared_trainer / m <= goal);
  summary.Add("P5", absl::StrCat("pss-private-copies-", options.clients, "-over-M"), "report",
              private_copies / m, true);
  std::printf("\n%s", summary.text().c_str());
  return absl::OkStatus();
}

// One case of P5-mixed on a fresh daemon: Σ PSS of the daemon and the
// clients less their rings, ÷ the union of the streamed blocks' bytes.
struct MixedCase {
  double ratio = 0;
  double union_bytes = 0;
  double master_bytes = 0;  // the files of the daemon's master directory
};

absl::StatusOr<MixedCase> RunMixedCase(const Options& options, bool distinct_content) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<ScratchDirs> dirs, ScratchDirs::Create());
  BLOCKSWAP_ASSIGN_OR_RETURN(auto daemon, DaemonProcess::Start(*dirs, {.backend = "host"}));
  std::vector<testing::ReportLines> reports;
  BLOCKSWAP_ASSIGN_OR_RETURN(
      double pss, SumPss(
                      *dirs, "bench-memory-subset", options.clients,
                      [&](int c) {
                        const uint64_t swap = uint64_t{options.blocks} * (c + 1) / options.clients;
                        return std::vector<std::string>{
                            "--socket=" + dirs->socket_path(),
                            absl::StrCat("--blocks=", options.blocks),
                            absl::StrCat("--swap=", std::max<uint64_t>(swap, 1)),
                            absl::StrCat("--block-bytes=", options.block_mib * kMiB),
                            absl::StrCat("--seed=", distinct_content ? 1 + c : 1)};
                      },
                      "streaming", {daemon->pid()}, &reports));
  MixedCase result;
  result.master_bytes = MasterBytes(*dirs);
  BLOCKSWAP_RETURN_IF_ERROR(StopDaemon(*daemon));
  double ring_bytes = 0;
  std::map<uint64_t, double> union_blocks;  // full-model index -> bytes
  for (const testing::ReportLines& report : reports) {
    ring_bytes += testing::NumberValue(report, "ring_bytes");
    const auto blocks = report.find("block");
    if (blocks == report.end()) continue;
    for (const std::string& value : blocks->second) {
      const size_t colon = value.find(':');
      uint64_t block = 0, bytes = 0;
      if (colon == std::string::npos || !absl::SimpleAtoi(value.substr(0, colon), &block) ||
          !absl::SimpleAtoi(value.substr(colon + 1), &bytes)) {
        return absl::InternalError(absl::StrCat("a client reported block \"", value, "\""));
      }
      union_blocks[block] = static_cast<double>(bytes);
    }
  }
  for (const auto& [block, bytes] : union_blocks) result.union_bytes += bytes;
  if (result.union_bytes <= 0) return absl::InternalError("no client reported its blocks");
  result.ratio = (pss - ring_bytes) / result.union_bytes;
  return result;
}

absl::Status RunMixed(const Options& options) {
  BLOCKSWAP_ASSIGN_OR_RETURN(MixedCase same, RunMixedCase(options, /*distinct_content=*/false));
  BLOCKSWAP_ASSIGN_OR_RETURN(MixedCase distinct, RunMixedCase(options, /*distinct_content=*/true));
  std::printf(
      "%d clients, client c streaming (c+1)*%u/%d of %u blocks of <= %llu MiB;"
      " union %.0f MiB\n",
      options.clients, options.blocks, options.clients, options.blocks,
      static_cast<unsigned long long>(options.block_mib), same.union_bytes / kMiB);
  std::printf("%-50s %6.2f x union  (masters %.0f MiB)\n", "same model: (sum PSS - rings) / union",
              same.ratio, same.master_bytes / kMiB);
  std::printf("%-50s %6.2f x union  (masters %.0f MiB)\n",
              "distinct content (per-model layout): same / union", distinct.ratio,
              distinct.master_bytes / kMiB);
  Summary summary;
  summary.Add("P5-mixed", absl::StrCat("pss-less-rings-over-union-", options.clients, "-subsets"),
              "<=1.10", same.ratio, same.ratio <= 1.1);
  summary.Add("P5-mixed", "per-model-layout-over-union", "report", distinct.ratio, true);
  std::printf("\n%s", summary.text().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace blockswap::bench

int main(int argc, char** argv) {
  blockswap::bench::Options options;
  CLI::App app("node memory for one model shared by N clients, beside private copies (P5)");
  app.add_option("--model-mib", options.model_mib, "model size, at least (MiB)");
  app.add_option("--block-mib", options.block_mib, "largest block (MiB)");
  app.add_option("--clients", options.clients, "client processes");
  app.add_flag("--mixed", options.mixed,
               "P5-mixed: clients streaming different subsets of one model");
  app.add_option("--blocks", options.blocks, "P5-mixed: blocks of the model");
  return blockswap::bench::BenchmarkMain(
      argc, argv, app, "blockswap-bench-memory", [&](blockswap::testing::ScratchDirs& dirs) {
        return options.mixed ? blockswap::bench::RunMixed(options)
                             : blockswap::bench::Run(options, dirs);
      });
}
