// blockswap-bench-warm-start (P6-warm): how long a trainer waits
// before its first step, for the ways a process meets a node: from the moment
// it hands its blocks to blockswap to its model open (registered, or found),
// per GiB of its blocks; and beside it, the fixed cost after that, making its
// ring and loading its first block:
//
//   first          uploads B blocks the daemon has never seen (the cold cost)
//   later          another process uploads the same B blocks
//   later-subset   another process uploads half of them (a different
//                  blocks_to_swap: another model of blocks the node holds)
//   file-first     registers a safetensors file of B blocks the daemon reads
//   file-later     another process registers the same file
//
// Each is a fresh process against one host-backend daemon, in this order, in
// one run; the blocks' bytes are made before the clock starts (a trainer
// holds its weights already). Goal: a later process pays at most 0.3 s per
// GiB it streams to have its model. The ring is not per GiB: a trainer makes
// one whatever its weights (the host backend's is a shared-memory mapping the
// daemon populates; on CUDA a cudaMalloc), so it is reported, not divided.
//
// Ends with one line per metric: `P6-warm <name> goal=<g> measured=<m> PASS|MISS`.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/core/connection.h"
#include "client/core/file_model.h"
#include "client/core/model.h"
#include "client/core/ring.h"
#include "shared/base/status.h"
#include "tests/bench/stream_clients.h"
#include "tests/bench/streamed_blocks.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"
#include "tests/support/safetensors_writer.h"

namespace blockswap::bench {
namespace {

using testing::ChildProcess;
using testing::DaemonProcess;
using testing::KeyValueArgs;
using testing::RoleReport;
using testing::ScratchDirs;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr double kGiB = 1024.0 * kMiB;
constexpr int kTensorsPerFileBlock = 4;
constexpr char kFileBlockPattern[] = R"(transformer_blocks\.(\d+)\.)";

struct Options {
  uint32_t blocks = 16;
  uint64_t block_mib = 64;
};

// The model of --swap of --blocks blocks (StreamedBlocks), registered by
// upload; or, with --file, that file's.
// `weights` keeps the uploaded bytes: a trainer holds its weights on, and
// freeing a GiB (munmap) would add ~0.1 s that no trainer pays here.
absl::StatusOr<std::unique_ptr<client::Model>> RegisterTimed(
    const KeyValueArgs& args, client::Connection& connection, absl::Time* start,
    std::optional<StreamedBlocks>* weights) {
  if (!args.Str("file").empty()) {
    client::FileRegistrationOptions options;
    options.block_pattern = kFileBlockPattern;
    *start = absl::Now();
    BLOCKSWAP_ASSIGN_OR_RETURN(client::FileRegistration registration,
                               client::RegisterFile(connection, args.Str("file"), options));
    return std::move(registration.model);
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(
      StreamedBlocks blocks,
      StreamedBlocks::Make(static_cast<uint32_t>(args.Int("blocks", 16)),
                           static_cast<uint32_t>(args.Int("swap", 16)), args.Int("block-bytes", 0),
                           /*seed=*/1));
  const StreamedBlocks& held = weights->emplace(std::move(blocks));
  *start = absl::Now();
  return client::Model::Register(connection, "bench-warm-start", held.uploads());
}

// Registers, then loads the model's first block into a one-slot ring and
// waits for it: reports the seconds from the registration's start to the
// model open, from there to the first block loaded, and the model's bytes.
absl::Status StartOnce(const KeyValueArgs& args, const RoleReport& report) {
  BLOCKSWAP_ASSIGN_OR_RETURN(auto connection,
                             client::Connection::Connect(args.Str("socket"), "bench-warm-start"));
  absl::Time start;
  std::optional<StreamedBlocks> weights;
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<client::Model> model,
                             RegisterTimed(args, *connection, &start, &weights));
  const absl::Time open = absl::Now();
  uint64_t bytes = 0, slot_bytes = 0;
  for (const BlockSpec& block : model->layout().blocks) {
    bytes += block.bytes;
    slot_bytes = std::max<uint64_t>(slot_bytes, block.bytes);
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(
      auto ring,
      client::Ring::Create(*connection, connection->device_uuids().front(), 1, slot_bytes));
  BLOCKSWAP_RETURN_IF_ERROR(ring->Load(0, *model, 0, nullptr));
  BLOCKSWAP_RETURN_IF_ERROR(ring->Wait(0, nullptr, absl::Seconds(60)));
  report.Add("register_seconds", absl::StrCat(absl::ToDoubleSeconds(open - start)));
  report.Add("first_load_seconds", absl::StrCat(absl::ToDoubleSeconds(absl::Now() - open)));
  report.Add("bytes", absl::StrCat(bytes));
  return ring->Drain(absl::Seconds(60));
}

int RunStartOnce(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  if (absl::Status status = StartOnce(args, report); !status.ok()) {
    report.Add("error", std::string(status.message()));
    return 1;
  }
  return 0;
}
BLOCKSWAP_CHILD_ROLE("bench-warm-start", RunStartOnce);

struct Start {
  double register_seconds = 0;
  double first_load_seconds = 0;
  double bytes = 0;
  double SecondsPerGiB() const { return register_seconds / (bytes / kGiB); }
};

absl::StatusOr<Start> StartProcess(const ScratchDirs& dirs, const std::string& name,
                                   std::vector<std::string> args) {
  const std::string path = absl::StrCat(dirs.temp_dir(), "/", name, ".report");
  args.push_back("--socket=" + dirs.socket_path());
  args.push_back("--report=" + path);
  BLOCKSWAP_ASSIGN_OR_RETURN(ChildProcess child,
                             ChildProcess::Spawn("bench-warm-start", {.args = std::move(args)}));
  BLOCKSWAP_ASSIGN_OR_RETURN(int code, child.Wait(absl::Minutes(5)));
  const testing::ReportLines report = testing::ReadRoleReport(path);
  if (code != 0) {
    return absl::InternalError(
        absl::StrCat(name, " exited ", code, ": ", testing::FirstValue(report, "error")));
  }
  return Start{testing::NumberValue(report, "register_seconds"),
               testing::NumberValue(report, "first_load_seconds"),
               testing::NumberValue(report, "bytes")};
}

absl::Status Run(const Options& options, ScratchDirs& dirs) {
  // The file: B blocks of kTensorsPerFileBlock F32 [rows, 64] tensors (plus
  // a small bias each) of about --block-mib together.
  const std::string file = dirs.temp_dir() + "/model.safetensors";
  const uint64_t rows = options.block_mib * kMiB / (kTensorsPerFileBlock * 64 * sizeof(float));
  BLOCKSWAP_RETURN_IF_ERROR(testing::WriteSafetensorsFile(
      file, testing::TransformerTensors(options.blocks, kTensorsPerFileBlock, rows), /*seed=*/7));
  BLOCKSWAP_ASSIGN_OR_RETURN(auto daemon, DaemonProcess::Start(dirs, {.backend = "host"}));
  const std::vector<std::string> all = {absl::StrCat("--blocks=", options.blocks),
                                        absl::StrCat("--swap=", options.blocks),
                                        absl::StrCat("--block-bytes=", options.block_mib * kMiB)};
  std::vector<std::string> half = all;
  half[1] = absl::StrCat("--swap=", std::max<uint32_t>(options.blocks / 2, 1));
  struct Case {
    const char* name;
    std::vector<std::string> args;
    const char* goal;  // seconds per GiB, or "report"
  };
  const std::vector<Case> cases = {
      {"first", all, "report"},
      {"later", all, "<=0.30"},
      {"later-subset", half, "<=0.30"},
      {"file-first", {"--file=" + file}, "report"},
      {"file-later", {"--file=" + file}, "report"},
  };
  Summary summary;
  std::printf("%u blocks of <= %llu MiB, one host-backend daemon, a fresh process per line\n",
              options.blocks, static_cast<unsigned long long>(options.block_mib));
  std::printf("%-14s %12s %14s %12s %16s\n", "", "model", "model open", "per GiB",
              "ring + 1st load");
  for (const Case& c : cases) {
    BLOCKSWAP_ASSIGN_OR_RETURN(Start start, StartProcess(dirs, c.name, c.args));
    std::printf("%-14s %8.0f MiB %12.3f s %8.3f s/GiB %14.3f s\n", c.name, start.bytes / kMiB,
                start.register_seconds, start.SecondsPerGiB(), start.first_load_seconds);
    const bool reported = std::string(c.goal) == "report";
    summary.Add("P6-warm", absl::StrCat(c.name, "-seconds-per-gib"), c.goal, start.SecondsPerGiB(),
                reported || start.SecondsPerGiB() <= 0.30);
  }
  BLOCKSWAP_RETURN_IF_ERROR(StopDaemon(*daemon));
  std::printf("\n%s", summary.text().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace blockswap::bench

int main(int argc, char** argv) {
  blockswap::bench::Options options;
  CLI::App app("seconds before a trainer's first step: first, later and file-model processes");
  app.add_option("--blocks", options.blocks, "blocks of the model");
  app.add_option("--block-mib", options.block_mib, "largest block (MiB)");
  return blockswap::bench::BenchmarkMain(
      argc, argv, app, "blockswap-bench-warm-start",
      [&](blockswap::testing::ScratchDirs& dirs) { return blockswap::bench::Run(options, dirs); });
}
