// blockswap-bench-control (P3): the control plane beside its
// ceiling, measured side by side in one run.
//
//   ceiling   a raw unix-socket ping-pong between this process and a child
//             (socketpair, blocking reads and writes of --bytes each way):
//             the round trip of the cheapest possible request/reply.
//   blockswap one gpu-stream client (tests/gpu/gpu_roles.cc) on the host
//             backend with a one-slot ring and a model of one --bytes block:
//             each load's request (Ring::Load) to its Wait returning, i.e.
//             filled_seq seen by the client, one load in flight. Twice, with
//             the same daemon and client code: requests through the ring's
//             shared-memory request ring and doorbell (the default, `shm`),
//             and as LoadRequests on the gRPC Load stream (`grpc`, the
//             reference transport), chosen by BLOCKSWAP_LOAD_TRANSPORT.
//   ratios    p50 and p99 of each ÷ the socket's. Goals <= 4x (p50) and
//             <= 10x (p99) for shm; the gRPC transport's are reported.
//   gRPC      for scale, not a goal: the unary Admin.Status round trip to
//             the same daemon over the same socket (gRPC's own floor; a
//             load's request travels on a gRPC stream).
//   loads/s   the same client loop run by 1, 4 and 16 processes at once:
//             their loads over their common wall-clock window (shm; grpc
//             with 1 client for comparison).
//   CPU/load  the daemon's CPU time per load of each one-client run, and of
//             the shm run again while another client process sits attached
//             with an open Load stream and nothing to do (a gpu-hold role).
//
// With BLOCKSWAP_COPY=trainer each client copies its block itself (copy path
// "trainer"): the same latency rows (request to usable slot) and loads per
// second, without the transports and the daemon's CPU, which it does not use.
//
// Ends with one line per metric: `P3 <name> goal=<g> measured=<m> PASS|MISS`.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"
#include "tests/bench/stream_clients.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/key_value_args.h"

namespace blockswap::bench {
namespace {

using testing::ChildProcess;
using testing::DaemonProcess;
using testing::ScratchDirs;

constexpr int kEchoFd = 3;

struct Options {
  uint64_t bytes = 4096;
  int round_trips = 20000;
  int throughput_loads = 3000;  // per client
  std::vector<int> client_counts = {1, 4, 16};
};

bool TransferAll(int fd, char* data, size_t bytes, bool write) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n =
        write ? ::write(fd, data + done, bytes - done) : ::read(fd, data + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The ceiling's other end: echoes --bytes messages on fd 3 until EOF.
int RunEcho(const std::vector<std::string>& argv) {
  const testing::KeyValueArgs args(argv);
  std::vector<char> buffer(args.Int("bytes", 4096));
  while (TransferAll(kEchoFd, buffer.data(), buffer.size(), false)) {
    if (!TransferAll(kEchoFd, buffer.data(), buffer.size(), true)) return 1;
  }
  return 0;
}
BLOCKSWAP_CHILD_ROLE("bench-echo", RunEcho);

constexpr char kShm[] = "shm";
constexpr char kGrpc[] = "grpc";

// The client processes spawned from now on send their loads over
// `transport` (client/core/ring.h): they inherit the environment.
void UseTransport(const char* transport) { ::setenv("BLOCKSWAP_LOAD_TRANSPORT", transport, 1); }

struct Percentiles {
  double p50 = 0, p99 = 0;
};

Percentiles Of(std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  return Percentiles{us[us.size() / 2], us[static_cast<size_t>(0.99 * (us.size() - 1))]};
}

// Unary Admin.Status calls on one channel, one in flight.
absl::StatusOr<Percentiles> GrpcStatus(const DaemonProcess& daemon, int calls) {
  std::unique_ptr<v1::Admin::Stub> admin = daemon.Admin();
  std::vector<double> us;
  for (int i = 0; i < calls + 100; ++i) {  // the first 100 warm up
    grpc::ClientContext context;
    v1::StatusRequest request;
    v1::StatusReply reply;
    const absl::Time start = absl::Now();
    if (grpc::Status status = admin->Status(&context, request, &reply); !status.ok()) {
      return absl::InternalError(absl::StrCat("Admin.Status: ", status.error_message()));
    }
    if (i >= 100) us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  return Of(us);
}

absl::StatusOr<Percentiles> PingPong(const Options& options) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  UniqueFd mine(fds[0]), theirs(fds[1]);
  BLOCKSWAP_ASSIGN_OR_RETURN(
      ChildProcess echo,
      ChildProcess::Spawn("bench-echo", {.args = {absl::StrCat("--bytes=", options.bytes)},
                                         .inherit = {{theirs.get(), kEchoFd}}}));
  theirs = UniqueFd();
  std::vector<char> buffer(options.bytes, 'x');
  std::vector<double> us;
  us.reserve(options.round_trips);
  for (int i = 0; i < options.round_trips + 100; ++i) {  // the first 100 warm up
    const absl::Time start = absl::Now();
    if (!TransferAll(mine.get(), buffer.data(), buffer.size(), true) ||
        !TransferAll(mine.get(), buffer.data(), buffer.size(), false)) {
      return absl::InternalError("the echo process hung up");
    }
    if (i >= 100) us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  mine = UniqueFd();
  BLOCKSWAP_ASSIGN_OR_RETURN(int code, echo.Wait(absl::Seconds(10)));
  if (code != 0) return absl::InternalError(absl::StrCat("echo exited ", code));
  return Of(us);
}

// A client attached with an open Load stream and nothing to do: a gpu-hold
// role (tests/gpu/gpu_roles.cc) with a 1 ms hold, once it says "holding".
absl::StatusOr<ChildProcess> IdleClient(const ScratchDirs& dirs) {
  const std::string report = dirs.temp_dir() + "/idle.report";
  BLOCKSWAP_ASSIGN_OR_RETURN(
      ChildProcess idle,
      ChildProcess::Spawn(
          "gpu-hold",
          {.args = {"--socket=" + dirs.socket_path(), "--report=" + report, "--name=idle",
                    "--block-bytes=4096", "--blocks=2", "--slots=1", "--hold-ms=1"}}));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (testing::FirstValue(testing::ReadRoleReport(report), "holding").empty()) {
    if (idle.TryWait().has_value() || absl::Now() > deadline) {
      return absl::InternalError(
          absl::StrCat("the idle client never held: ",
                       testing::FirstValue(testing::ReadRoleReport(report), "error")));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return idle;
}

// BLOCKSWAP_COPY=trainer (inherited by the clients): each client copies its
// block itself, so no load crosses to the daemon and the transports and the
// daemon's CPU per load do not apply.
bool TrainerCopies() {
  const char* copy = std::getenv("BLOCKSWAP_COPY");
  return copy != nullptr && std::string_view(copy) == "trainer";
}

void PrintRow(const std::string& what, const Percentiles& p, const Percentiles& raw) {
  std::printf("%-40s %10.1f %10.1f %8.2f %8.2f\n", what.c_str(), p.p50, p.p99, p.p50 / raw.p50,
              p.p99 / raw.p99);
}

// The rows of a run under trainer copies: request to usable slot, and loads
// per second, with the same names as the daemon path's so that run-all.sh
// sets them side by side (suffixed @trainer).
absl::Status RunTrainerCopies(const Options& options, const Percentiles& raw,
                              const Percentiles& latency, StreamClients& clients,
                              const std::string& model, DaemonProcess& daemon) {
  std::printf("%-40s %10s %10s %8s %8s\n", "round trip, one in flight", "p50 us", "p99 us",
              "p50 x", "p99 x");
  PrintRow(absl::StrCat("unix socket ping-pong, ", options.bytes, " B"), raw, raw);
  PrintRow("load to usable slot, trainer's own copy", latency, raw);
  Summary summary;
  summary.Add("P3", "load-round-trip-p50-vs-socket", "<=4", latency.p50 / raw.p50,
              latency.p50 / raw.p50 <= 4);
  summary.Add("P3", "load-round-trip-p99-vs-socket", "<=10", latency.p99 / raw.p99,
              latency.p99 / raw.p99 <= 10);
  std::vector<std::string> args = {absl::StrCat("--block-bytes=", options.bytes),
                                   "--blocks=1",
                                   "--slots=1",
                                   "--verify=0",
                                   "--host-waits=1",
                                   "--timeout-ms=60000",
                                   "--model-id=" + model,
                                   absl::StrCat("--loads=", options.throughput_loads)};
  for (int n : options.client_counts) {
    BLOCKSWAP_ASSIGN_OR_RETURN(StreamRun run, clients.Run(n, args));
    std::printf("%2d concurrent clients, own copies: %8.0f loads/s\n", n, run.loads_per_second);
    summary.Add("P3", absl::StrCat("loads-per-second-", n, "-clients"), "report",
                run.loads_per_second, true);
  }
  BLOCKSWAP_RETURN_IF_ERROR(StopDaemon(daemon));
  std::printf("\n%s", summary.text().c_str());
  return absl::OkStatus();
}

absl::Status Run(const Options& options, ScratchDirs& dirs) {
  BLOCKSWAP_ASSIGN_OR_RETURN(auto daemon, DaemonProcess::Start(dirs, {.backend = "host"}));
  StreamClients clients(dirs);
  const std::vector<std::string> common = {absl::StrCat("--block-bytes=", options.bytes),
                                           "--blocks=1",
                                           "--slots=1",
                                           "--verify=0",
                                           "--host-waits=1",
                                           "--timeout-ms=60000"};
  // The model first (its upload is no part of any measurement).
  std::vector<std::string> args = common;
  args.push_back("--loads=1");
  BLOCKSWAP_ASSIGN_OR_RETURN(StreamRun first, clients.Run(1, args));
  const std::string model = testing::FirstValue(first.reports[0], "model");

  BLOCKSWAP_ASSIGN_OR_RETURN(Percentiles raw, PingPong(options));
  args = common;
  args.push_back("--model-id=" + model);
  args.push_back(absl::StrCat("--loads=", options.round_trips));
  // One client's loads over `transport`: latency and the daemon's CPU per load.
  struct TransportRun {
    Percentiles latency;
    double cpu_us = 0;
  };
  auto measure = [&](const char* transport) -> absl::StatusOr<TransportRun> {
    UseTransport(transport);
    const double cpu = ProcessCpuSeconds(daemon->pid());
    BLOCKSWAP_ASSIGN_OR_RETURN(StreamRun one, clients.Run(1, args));
    return TransportRun{{testing::NumberValue(one.reports[0], "latency_p50_us"),
                         testing::NumberValue(one.reports[0], "latency_p99_us")},
                        (ProcessCpuSeconds(daemon->pid()) - cpu) * 1e6 / options.round_trips};
  };
  BLOCKSWAP_ASSIGN_OR_RETURN(TransportRun shm, measure(kShm));
  if (TrainerCopies()) return RunTrainerCopies(options, raw, shm.latency, clients, model, *daemon);
  BLOCKSWAP_ASSIGN_OR_RETURN(TransportRun grpc_loads, measure(kGrpc));
  double cpu_us_beside_idle = -1;
  {
    UseTransport(kShm);
    BLOCKSWAP_ASSIGN_OR_RETURN(ChildProcess idle, IdleClient(dirs));
    BLOCKSWAP_ASSIGN_OR_RETURN(TransportRun beside, measure(kShm));
    cpu_us_beside_idle = beside.cpu_us;
  }
  std::printf("%-40s %10s %10s %8s %8s\n", "round trip, one in flight", "p50 us", "p99 us",
              "p50 x", "p99 x");
  auto row = [&](const std::string& what, const Percentiles& p) { PrintRow(what, p, raw); };
  row(absl::StrCat("unix socket ping-pong, ", options.bytes, " B"), raw);
  row("load to filled_seq seen, shm request ring", shm.latency);
  row("load to filled_seq seen, gRPC Load stream", grpc_loads.latency);
  BLOCKSWAP_ASSIGN_OR_RETURN(Percentiles grpc, GrpcStatus(*daemon, options.round_trips / 4));
  row("for scale: gRPC Admin.Status call", grpc);
  std::printf(
      "daemon CPU per load: shm %.1f us, gRPC %.1f us; shm beside an idle attached client "
      "%.1f us (%.2fx)\n",
      shm.cpu_us, grpc_loads.cpu_us, cpu_us_beside_idle, cpu_us_beside_idle / shm.cpu_us);
  Summary summary;
  summary.Add("P3", "load-round-trip-p50-vs-socket", "<=4", shm.latency.p50 / raw.p50,
              shm.latency.p50 / raw.p50 <= 4);
  summary.Add("P3", "load-round-trip-p99-vs-socket", "<=10", shm.latency.p99 / raw.p99,
              shm.latency.p99 / raw.p99 <= 10);
  summary.Add("P3", "grpc-transport-load-round-trip-p50-vs-socket", "report",
              grpc_loads.latency.p50 / raw.p50, true);
  summary.Add("P3", "grpc-transport-load-round-trip-p99-vs-socket", "report",
              grpc_loads.latency.p99 / raw.p99, true);
  summary.Add("P3", "grpc-unary-call-p50-vs-socket", "report", grpc.p50 / raw.p50, true);
  summary.Add("P3", "daemon-cpu-us-per-load", "report", shm.cpu_us, true);
  summary.Add("P3", "grpc-transport-daemon-cpu-us-per-load", "report", grpc_loads.cpu_us, true);
  summary.Add("P3", "daemon-cpu-per-load-beside-idle-client-vs-alone", "report",
              cpu_us_beside_idle / shm.cpu_us, true);

  args = common;
  args.push_back("--model-id=" + model);
  args.push_back(absl::StrCat("--loads=", options.throughput_loads));
  for (const char* transport : {kShm, kGrpc}) {
    UseTransport(transport);
    for (int n : options.client_counts) {
      if (transport == kGrpc && n != 1) continue;  // for comparison only
      BLOCKSWAP_ASSIGN_OR_RETURN(StreamRun run, clients.Run(n, args));
      std::printf("%2d concurrent clients, %-4s: %8.0f loads/s\n", n, transport,
                  run.loads_per_second);
      summary.Add("P3",
                  absl::StrCat(transport == kGrpc ? "grpc-transport-" : "", "loads-per-second-",
                               n, "-clients"),
                  "report", run.loads_per_second, true);
    }
  }
  BLOCKSWAP_RETURN_IF_ERROR(StopDaemon(*daemon));
  std::printf("\n%s", summary.text().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace blockswap::bench

int main(int argc, char** argv) {
  blockswap::bench::Options options;
  CLI::App app("blockswapd's control plane beside a unix-socket ping-pong (P3)");
  app.add_option("--bytes", options.bytes, "block and message size");
  app.add_option("--round-trips", options.round_trips, "round trips measured each way");
  app.add_option("--throughput-loads", options.throughput_loads, "loads per client for loads/s");
  app.add_option("--clients", options.client_counts, "concurrent client counts")->delimiter(',');
  return blockswap::bench::BenchmarkMain(
      argc, argv, app, "blockswap-bench-control",
      [&](blockswap::testing::ScratchDirs& dirs) { return blockswap::bench::Run(options, dirs); });
}
