// blockswapctl: the admin CLI of blockswapd.
//
//   blockswapctl [--socket PATH] [--json] [--timeout SECONDS]
//                status|clients|models|residency|stats|health
//   blockswapctl register FILE --block-pattern REGEX [--select REGEX]
//                [--select-rank N] [--name NAME]      (prints the model id)
//   blockswapctl verify MODEL | evict MODEL   (MODEL: an id or a unique prefix of one)
//   blockswapctl help [COMMAND]
//   blockswapctl --version
//   blockswapctl plan --blocks N --swap S [--ring B] --script STEP,STEP,...
//                [--trace] [--block-bytes BYTES [--bandwidth GB/S]]
//   blockswapctl trace [--seconds N] --out run.json [--png run.png]
//                (Chrome trace-event JSON of the next N seconds, or until
//                SIGINT/SIGTERM; tools/blockswapctl/trace_json.h)
//
// The socket: --socket, else $BLOCKSWAP_SOCKET, else the system socket
// (client/core/socket_path.h), else, when that does not answer, the user's
// private daemon if one runs (client/core/private_daemon.h; never started
// here). Readable tables by default; --json prints one JSON document per
// command (tools/blockswapctl/admin_format.h says what is stable in it). `health` is what probes
// run: exit 0 and "ok" when the daemon answers and every device is healthy,
// exit 1 with the reason otherwise.
//
// One file per command group: admin_caller (what they share), plan_command
// (`plan` never talks to a daemon), trace_command, model_commands (register,
// verify, evict); the reports, `stats --watch` and `health` are here.
//
// Exit codes: 0 success, 1 a failed call or an unhealthy daemon, 2 a usage
// error.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.grpc.pb.h"
#include "client/core/connection.h"
#include "client/core/file_model.h"
#include "client/core/private_daemon.h"
#include "client/core/socket_path.h"
#include "shared/base/env_settings.h"
#include "shared/build_info/build_info.h"
#include "tools/blockswapctl/admin_caller.h"
#include "tools/blockswapctl/admin_format.h"
#include "tools/blockswapctl/model_commands.h"
#include "tools/blockswapctl/plan_command.h"
#include "tools/blockswapctl/trace_command.h"

namespace blockswap::ctl {
namespace {

// Columns of the terminal on stdout: its window size, else $COLUMNS, else 80.
size_t TerminalWidth() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const std::optional<size_t> columns = EnvNumber<size_t>(EnvSetting::kColumns);
      columns.has_value() && *columns > 0) {
    return *columns;
  }
  return 80;
}

// `stats --watch S`, every S seconds until interrupted or a call fails. The
// table shows rates over the interval since the previous call (then totals);
// on a terminal it is redrawn in place (cursor home, clear to the end of the
// screen) under a header line and fitted to the terminal's width. Into a pipe
// or a file there are no escapes: --json appends one document per line
// (NDJSON of the totals, for jq or a log shipper), the table is appended under
// its header.
int WatchStats(const Options& options, double seconds) {
  AdminCaller caller(options);
  const bool on_terminal = ::isatty(STDOUT_FILENO) == 1;
  std::optional<v1::StatsReply> previous;
  absl::Time previous_at;
  while (true) {
    absl::StatusOr<v1::StatsReply> reply = caller.Call(&v1::Admin::Stub::Stats);
    const absl::Time now = absl::Now();
    if (!reply.ok()) {
      std::cerr << "blockswapctl: stats: "
                << DescribeCallFailure(options.socket_path, reply.status()) << "\n";
      return kExitFailure;
    }
    if (options.json && !on_terminal) {
      std::cout << DumpJsonLine(StatsJson(*reply)) << "\n";
    } else {
      if (on_terminal) std::cout << "\033[H\033[J";
      std::cout << "blockswapctl stats --watch " << seconds << "  "
                << absl::FormatTime("%H:%M:%S", now, absl::LocalTimeZone()) << "\n\n";
      if (options.json) {
        PrintJson(StatsJson(*reply));
      } else {
        const size_t width = on_terminal ? TerminalWidth() : std::numeric_limits<size_t>::max();
        std::cout << StatsWatchText(*reply, previous ? &*previous : nullptr,
                                    absl::ToDoubleSeconds(now - previous_at), width)
                  << (on_terminal ? "" : "\n");
      }
    }
    std::cout << std::flush;
    previous = *std::move(reply);
    previous_at = now;
    absl::SleepFor(absl::Seconds(seconds));
  }
}

// "status, clients, ..." : the commands, for messages about an unknown one.
std::string CommandNames(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
    names.push_back(command->get_name());
  }
  return absl::StrJoin(names, ", ");
}

// `help [COMMAND]`: what --help prints, for the whole tool or one command.
int Help(CLI::App& app, const std::string& topic) {
  if (topic.empty()) {
    // Not app.help(): once `help` was parsed, that prints the selected subcommand's help.
    std::cout << app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal);
    return 0;
  }
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
    if (command->get_name() == topic) {
      std::cout << command->help(app.get_name());
      return 0;
    }
  }
  std::cerr << "blockswapctl: help: unknown command '" << topic << "' (" << CommandNames(app)
            << ")\n";
  return kExitUsage;
}

int Health(const Options& options) {
  AdminCaller caller(options);
  absl::StatusOr<v1::StatusReply> reply = caller.Call(&v1::Admin::Stub::Status);
  HealthVerdict verdict =
      reply.ok()
          ? JudgeHealth(*reply)
          : HealthVerdict{.healthy = false,
                          .reason = DescribeCallFailure(options.socket_path, reply.status())};
  if (verdict.healthy) {
    // The standard gRPC health service turns NOT_SERVING once a drain begins.
    absl::StatusOr<bool> serving = caller.Serving();
    if (!serving.ok()) {
      verdict = {
          .healthy = false,
          .reason = absl::StrCat("gRPC health check: ",
                                 DescribeCallFailure(options.socket_path, serving.status()))};
    } else if (!*serving) {
      verdict = {.healthy = false,
                 .reason = "blockswapd is not serving (gRPC health: shutting down)"};
    }
  }
  if (options.json) {
    // The document goes to stdout either way: a machine reads one place.
    PrintJson(HealthJson(options.socket_path, verdict, reply.ok() ? &*reply : nullptr));
  } else if (verdict.healthy) {
    std::cout << "ok\n";
  } else {
    std::cerr << "blockswapctl: health: " << verdict.reason << "\n";
  }
  return verdict.healthy ? 0 : kExitFailure;
}

// ResolveSocket's choice; with none configured and no system daemon
// answering, the user's private daemon where one runs (blockswapctl never
// starts one: it looks at what is there).
std::string InspectedSocket(const std::string& given) {
  const client::ResolvedSocket resolved = client::ResolveSocket(given);
  if (resolved.source != client::SocketSource::kSystemDefault || !client::AutostartEnabled())
    return resolved.path;
  absl::StatusOr<bool> system = client::SocketAnswers(resolved.path);
  absl::StatusOr<client::PrivateDaemonOptions> private_daemon =
      client::PrivateDaemonOptionsFromEnvironment();
  if (!system.ok() || *system || !private_daemon.ok()) return resolved.path;
  absl::StatusOr<bool> answers = client::SocketAnswers(private_daemon->socket_path());
  return answers.ok() && *answers ? private_daemon->socket_path() : resolved.path;
}

int Main(int argc, char** argv) {
  Options options;
  CLI::App app{"blockswapctl: status, clients, models, residency and statistics of blockswapd",
               "blockswapctl"};
  app.set_version_flag("--version", blockswap::VersionText("blockswapctl", blockswap::ThisBuild()));
  app.add_option(
      "--socket", options.socket_path,
      absl::StrCat("blockswapd's control socket (default: $", EnvName(EnvSetting::kSocket),
                   " if set, else ", client::kDefaultSocketPath,
                   ", else the user's private blockswapd if one runs)"));
  app.add_flag("--json", options.json, "print one JSON document instead of tables");
  app.add_option("--timeout", options.timeout_seconds, "seconds each call may take")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // The global options may also follow the command (`blockswapctl status --json`).
  app.fallthrough();
  app.require_subcommand(1, 1);
  app.add_subcommand("status", "version, backend, uptime, pinned bytes and devices");
  app.add_subcommand("clients", "attached sessions");
  app.add_subcommand("models", "registered models");
  app.add_subcommand("residency", "which block is in which slot of every ring");
  CLI::App* stats_command =
      app.add_subcommand("stats", "transfer statistics per device and per client");
  double watch_seconds = 0;
  stats_command
      ->add_option("--watch", watch_seconds,
                   "refresh in place every S seconds, like top, until interrupted")
      ->expected(0, 1)
      ->default_str("2")
      ->check(CLI::PositiveNumber);
  app.add_subcommand("health", "exit 0 and print ok when blockswapd answers and no device failed");
  std::string help_topic;
  app.add_subcommand("help", "print this help, or with COMMAND that command's")
      ->add_option("COMMAND", help_topic, "the command to explain");
  std::string file;
  std::string model_id;
  client::FileRegistrationOptions registration;
  CLI::App* register_command = app.add_subcommand(
      "register", "register a model from a safetensors file (or *.index.json); prints its id");
  register_command->add_option("FILE", file, "the .safetensors file or index JSON")->required();
  register_command
      ->add_option("--block-pattern", registration.block_pattern,
                   "regex with one capture group, the block index, e.g. "
                   "'^transformer_blocks\\.(\\d+)\\.'")
      ->required();
  register_command->add_option("--select", registration.select,
                               "regex of the tensors of a block to stream (default: all)");
  register_command->add_option("--select-rank", registration.select_rank,
                               "stream only tensors of this many dimensions (default: any)");
  register_command->add_option("--name", registration.name, "informational model name");
  for (const char* name : {"verify", "evict"}) {
    app.add_subcommand(name, std::string(name) == "verify"
                                 ? "re-hash a model's masters against its manifest"
                                 : "remove a model no session holds")
        ->add_option("MODEL", model_id,
                     "the model id (64 hex digits) or a prefix of exactly one registered id")
        ->required();
  }
  PlanOptions plan;
  CLI::App* plan_command = app.add_subcommand(
      "plan", "offline: the schedule of loads the client's StreamScheduler would run");
  plan_command->add_option("--blocks", plan.blocks, "transformer blocks (N)")->required();
  plan_command->add_option("--swap", plan.swap, "blocks to stream (S); 0 streams none")->required();
  plan_command->add_option("--ring", plan.ring, "ring slots (B), clamped to S")
      ->capture_default_str();
  plan_command
      ->add_option("--script", plan.script,
                   "comma-separated steps: prepare, fwd, bwd, and train/infer (switch "
                   "forward-only mode off/on; the script starts in training)")
      ->required();
  plan_command->add_flag("--trace", plan.trace, "one line per load and rebind");
  plan_command->add_option("--block-bytes", plan.block_bytes, "bytes of one streamed block")
      ->check(CLI::PositiveNumber);
  plan_command->add_option("--bandwidth", plan.bandwidth_gbps, "host-to-device GB/s (1e9 B/s)")
      ->check(CLI::PositiveNumber);
  TraceOptions trace;
  CLI::App* trace_command = app.add_subcommand(
      "trace", "record the next N seconds of loads as Chrome trace-event JSON (Perfetto)");
  trace_command->add_option("--seconds", trace.seconds, "length of the window")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  trace_command->add_option("--out", trace.out, "the trace-event JSON to write")->required();
  trace_command->add_option("--png", trace.png,
                            "also draw a per-client timeline of copies and stalls (matplotlib)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // CLI11 reports an unknown command as "A subcommand is required"; name
    // the word it did not know instead.
    if (app.get_subcommands().empty() && app.remaining_size() > 0) {
      std::cerr << "blockswapctl: unknown command '" << app.remaining().front() << "' ("
                << CommandNames(app) << ")\n";
      return kExitUsage;
    }
    // CLI11 prints the message (or the help) and returns its own codes
    // (106, 109, ...); blockswapctl's contract is 2 for any usage error.
    int code = app.exit(error);
    return code == 0 ? 0 : kExitUsage;
  }

  const std::string command = app.get_subcommands().front()->get_name();
  if (command == "help") return Help(app, help_topic);
  options.socket_path = InspectedSocket(options.socket_path);
  if (command == "plan") return Plan(options, plan);
  if (command == "trace") return Trace(options, trace);
  if (command == "register") return Register(options, file, registration);
  if (command == "verify") return Verify(options, model_id);
  if (command == "evict") return Evict(options, model_id);
  if (command == "status") {
    return Report(options, command, &v1::Admin::Stub::Status, &StatusText, &StatusJson);
  }
  if (command == "clients") {
    return Report(options, command, &v1::Admin::Stub::Clients, &ClientsText, &ClientsJson);
  }
  if (command == "models") {
    return Report(options, command, &v1::Admin::Stub::Models, &ModelsText, &ModelsJson);
  }
  if (command == "residency") {
    return Report(options, command, &v1::Admin::Stub::Residency, &ResidencyText, &ResidencyJson);
  }
  if (command == "stats") {
    if (watch_seconds > 0) return WatchStats(options, watch_seconds);
    return Report(options, command, &v1::Admin::Stub::Stats, &StatsText, &StatsJson);
  }
  return Health(options);
}

}  // namespace
}  // namespace blockswap::ctl

int main(int argc, char** argv) { return blockswap::ctl::Main(argc, argv); }
