// blockswapctl: the admin CLI of blockswapd.
//
//   blockswapctl [--socket PATH] [--json] [--timeout SECONDS]
//                status|clients|models|residency|stats|health
//
// Readable tables by default; --json prints one JSON document per command
// (client/admin_format.h says what is stable in it). `health` is what probes
// run: exit 0 and "ok" when the daemon answers and every device is healthy,
// exit 1 with the reason otherwise.
//
// Exit codes: 0 success, 1 a failed call or an unhealthy daemon, 2 a usage
// error.
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.grpc.pb.h"
#include "client/admin_format.h"
#include "client/connection.h"
#include "shared/grpc_status.h"

namespace blockswap::client {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
// The daemon sends replies of up to 64 MiB (residency and statistics of a
// busy node can pass gRPC's 4 MiB default).
constexpr int kMaxMessageBytes = 64 << 20;

struct Options {
  std::string socket_path = kDefaultSocketPath;
  bool json = false;
  double timeout_seconds = 10;
};

class AdminCaller {
 public:
  explicit AdminCaller(const Options& options) : options_(options) {
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
    stub_ = v1::Admin::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("unix:", options.socket_path), grpc::InsecureChannelCredentials(), arguments));
  }

  // Calls one unary Admin method with the per-call deadline. Not waiting for
  // the channel to become ready is deliberate: with no daemon the call fails
  // at once (UNAVAILABLE) instead of after the deadline.
  template <typename Request, typename Reply>
  absl::StatusOr<Reply> Call(grpc::Status (v1::Admin::Stub::*method)(grpc::ClientContext*,
                                                                     const Request&, Reply*)) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(options_.timeout_seconds)));
    Reply reply;
    grpc::Status status = ((*stub_).*method)(&context, Request(), &reply);
    if (!status.ok()) return FromGrpcStatus(status);
    return reply;
  }

 private:
  const Options& options_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

void PrintJson(const nlohmann::json& document) { std::cout << DumpJson(document) << "\n"; }

// Runs one reporting command: call, then print the table or the document.
template <typename Request, typename Reply>
int Report(const Options& options, const std::string& command,
           grpc::Status (v1::Admin::Stub::*method)(grpc::ClientContext*, const Request&, Reply*),
           std::string (*text)(const Reply&), nlohmann::json (*to_json)(const Reply&)) {
  AdminCaller caller(options);
  absl::StatusOr<Reply> reply = caller.Call(method);
  if (!reply.ok()) {
    std::cerr << "blockswapctl: " << command << ": "
              << DescribeCallFailure(options.socket_path, reply.status()) << "\n";
    return kExitFailure;
  }
  if (options.json) {
    PrintJson(to_json(*reply));
  } else {
    std::cout << text(*reply);
  }
  return 0;
}

int Health(const Options& options) {
  AdminCaller caller(options);
  absl::StatusOr<v1::StatusReply> reply = caller.Call(&v1::Admin::Stub::Status);
  HealthVerdict verdict =
      reply.ok()
          ? JudgeHealth(*reply)
          : HealthVerdict{.healthy = false,
                          .reason = DescribeCallFailure(options.socket_path, reply.status())};
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

int Main(int argc, char** argv) {
  Options options;
  CLI::App app{"blockswapctl: status, clients, models, residency and statistics of blockswapd"};
  app.add_option("--socket", options.socket_path, "blockswapd's control socket")
      ->capture_default_str();
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
  app.add_subcommand("stats", "transfer statistics per device and per client");
  app.add_subcommand("health", "exit 0 and print ok when blockswapd answers and no device failed");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // CLI11 reports an unknown command as "A subcommand is required"; name
    // the word it did not know instead.
    if (app.get_subcommands().empty() && app.remaining_size() > 0) {
      std::cerr << "blockswapctl: unknown command '" << app.remaining().front()
                << "' (status, clients, models, residency, stats or health)\n";
      return kExitUsage;
    }
    // CLI11 prints the message (or the help) and returns its own codes
    // (106, 109, ...); blockswapctl's contract is 2 for any usage error.
    int code = app.exit(error);
    return code == 0 ? 0 : kExitUsage;
  }

  const std::string command = app.get_subcommands().front()->get_name();
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
    return Report(options, command, &v1::Admin::Stub::Stats, &StatsText, &StatsJson);
  }
  return Health(options);
}

}  // namespace
}  // namespace blockswap::client

int main(int argc, char** argv) { return blockswap::client::Main(argc, argv); }
