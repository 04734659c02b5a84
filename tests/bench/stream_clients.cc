#include "tests/bench/stream_clients.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "shared/base/status.h"
#include "tests/support/child_process.h"

namespace blockswap::bench {

using testing::ChildProcess;
using testing::ReportLines;

int BenchmarkMain(int argc, char** argv, CLI::App& app, const char* program,
                  const std::function<absl::Status(testing::ScratchDirs&)>& bench,
                  bool precondition_skips) {
  if (int code = testing::MaybeRunChildRole(argc, argv); code >= 0) return code;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  absl::StatusOr<std::unique_ptr<testing::ScratchDirs>> dirs = testing::ScratchDirs::Create();
  absl::Status status = dirs.ok() ? bench(**dirs) : dirs.status();
  if (status.ok()) return 0;
  std::cerr << program << ": " << status << "\n";
  return precondition_skips && absl::IsFailedPrecondition(status) ? 77 : 1;
}

absl::Status StopDaemon(testing::DaemonProcess& daemon) {
  BLOCKSWAP_ASSIGN_OR_RETURN(int code, daemon.Stop(SIGTERM));
  if (code != 0) return absl::InternalError(absl::StrCat("blockswapd exited ", code));
  return absl::OkStatus();
}

absl::StatusOr<StreamRun> StreamClients::Run(int clients, const std::vector<std::string>& args,
                                             size_t devices) {
  std::vector<ChildProcess> children;
  std::vector<std::string> paths;
  for (int c = 0; c < clients; ++c) {
    const std::string name = absl::StrCat("client-", ++spawned_);
    paths.push_back(dirs_.temp_dir() + "/" + name + ".report");
    std::vector<std::string> role_args = {
        "--socket=" + dirs_.socket_path(), "--report=" + paths.back(), "--name=" + name,
        absl::StrCat("--device=", c % std::max<size_t>(devices, 1))};
    role_args.insert(role_args.end(), args.begin(), args.end());
    BLOCKSWAP_ASSIGN_OR_RETURN(ChildProcess child,
                               ChildProcess::Spawn("gpu-stream", {.args = std::move(role_args)}));
    children.push_back(std::move(child));
  }
  StreamRun run;
  double first_start = 1e300, last_end = 0, total_bytes = 0, total_loads = 0;
  for (int c = 0; c < clients; ++c) {
    BLOCKSWAP_ASSIGN_OR_RETURN(int code, children[c].Wait(absl::Minutes(5)));
    ReportLines report = testing::ReadRoleReport(paths[c]);
    if (code != 0) {
      return absl::InternalError(
          absl::StrCat("client exited ", code, ": ", testing::FirstValue(report, "error")));
    }
    const double start = testing::NumberValue(report, "start"),
                 end = testing::NumberValue(report, "end");
    first_start = std::min(first_start, start);
    last_end = std::max(last_end, end);
    total_bytes += testing::NumberValue(report, "gbps") * 1e9 * (end - start);
    total_loads += testing::NumberValue(report, "loads");
    run.reports.push_back(std::move(report));
  }
  const double window = last_end - first_start;
  run.aggregate_gbps = total_bytes / window / 1e9;
  run.loads_per_second = total_loads / window;
  return run;
}

std::vector<std::string> GpuStreamArgs(uint64_t block_bytes, uint32_t blocks, uint32_t slots,
                                       int loads, const std::string& model_id) {
  std::vector<std::string> args = {absl::StrCat("--block-bytes=", block_bytes),
                                   absl::StrCat("--blocks=", blocks),
                                   absl::StrCat("--slots=", slots),
                                   absl::StrCat("--loads=", loads),
                                   "--verify=0",
                                   "--timeout-ms=60000"};
  if (!model_id.empty()) args.push_back("--model-id=" + model_id);
  return args;
}

void Summary::Add(const std::string& id, const std::string& name, const std::string& goal,
                  double measured, bool pass) {
  absl::StrAppend(&text_, absl::StrFormat("%s %s goal=%s measured=%.4g %s\n", id, name, goal,
                                          measured, pass ? "PASS" : "MISS"));
}

void Summary::AddUnmeasured(const std::string& id, const std::string& name, const std::string& goal,
                            const std::string& why) {
  absl::StrAppend(&text_,
                  absl::StrFormat("%s %s goal=%s measured=none MISS (%s)\n", id, name, goal, why));
}

}  // namespace blockswap::bench
