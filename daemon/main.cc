// blockswapd: the node-local block-swap daemon.
//
//   blockswapd [--config FILE] [--socket PATH] [--backend auto|host|cuda] ...
//   blockswapd --config FILE --check-config   validate, print the effective config and
//                                             what this machine would trip the daemon on
//                                             (as the calling uid: run it as the service's)
//   blockswapd --list-devices [--backend ...]
//
// Every option is also a key of the config file (daemon/config.h); the
// command line overrides the file. Under systemd (Type=notify) it reports
// READY=1 once serving, STATUS= lines, and STOPPING=1 on SIGTERM. SIGTERM or
// SIGINT drain and shut down (Daemon::Shutdown), exit 0; SIGHUP reloads the
// log level and the per-client quotas from the config file. With --idle-exit
// it also shuts down (exit 0) once no session has been attached for that long
// (daemon/idle_exit.h).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/budget/descriptor_model.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/idle_exit.h"
#include "daemon/preflight.h"
#include "daemon/runtime/logging.h"
#include "daemon/runtime/notify.h"
#include "daemon/runtime/process_stats.h"
#include "shared/build_info/build_info.h"
#include "shared/protocol/load_protocol.h"

namespace {

using blockswap::daemon::DaemonOptions;

int ListDevices(blockswap::BackendChoice choice, const blockswap::HostBackendOptions& host) {
  auto backend = blockswap::OpenBackend(choice, host);
  if (!backend.ok()) {
    std::cerr << "blockswapd: " << backend.status() << "\n";
    return 1;
  }
  std::cout << "backend " << blockswap::BackendKindName((*backend)->kind());
  if (const std::string driver = (*backend)->driver(); !driver.empty()) {
    std::cout << " (" << driver << ")";
  }
  std::cout << "\n";
  for (const auto& device : (*backend)->devices()) {
    const auto& info = device->info();
    std::cout << "device " << info.uuid << " \"" << info.name << "\" " << info.total_memory_bytes
              << " bytes\n";
  }
  return 0;
}

// The command line, kept as text per config key until the file is read.
struct CommandLine {
  std::string config_path = blockswap::daemon::kDefaultConfigPath;
  bool config_given = false;
  bool check_config = false;
  bool no_preflight = false;
  bool list_devices = false;
  std::map<std::string, std::vector<std::string>> values;  // by config key
};

// Defaults, then the config file, then the command line.
absl::StatusOr<DaemonOptions> Resolve(const CommandLine& line) {
  DaemonOptions options;
  options.host = blockswap::HostBackendOptions::FromEnvironment();
  absl::Status file = blockswap::daemon::ApplyConfigFile(line.config_path, options);
  // The default path may be absent (a daemon run by hand); a named one may not.
  if (!file.ok() && !(absl::IsNotFound(file) && !line.config_given)) return file;
  for (const auto& field : blockswap::daemon::ConfigFields()) {
    auto given = line.values.find(field.key);
    if (given == line.values.end() || given->second.empty()) continue;
    if (field.list) field.clear(options);
    for (const std::string& value : given->second) {
      if (absl::Status s = field.set(options, value); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(field.flag, ": ", s.message()));
      }
    }
  }
  return options;
}

// The next of `signals`, or 0 when the idle exit's poll interval passed
// without one.
int WaitForSignal(const sigset_t& signals, const blockswap::daemon::IdleExit& idle) {
  if (!idle.enabled()) {
    int received = 0;
    sigwait(&signals, &received);
    return received;
  }
  const timespec interval = absl::ToTimespec(idle.poll_interval());
  int received = sigtimedwait(&signals, nullptr, &interval);
  return received > 0 ? received : 0;  // EAGAIN (the interval) or EINTR
}

// --check-config: the effective config on stdout; each preflight problem on
// stderr. Exit 2 is left to a config that does not parse.
int CheckConfig(const CommandLine& line, const DaemonOptions& options) {
  std::cout << "# blockswapd: the effective configuration (defaults, " << line.config_path
            << " where it exists, then the command line)\n"
            << blockswap::daemon::FormatConfig(options);
  if (line.no_preflight) return 0;
  const blockswap::daemon::PreflightReport report = blockswap::daemon::Preflight(options);
  for (const std::string& warning : report.warnings) {
    std::cerr << "blockswapd: warning: " << warning << "\n";
  }
  if (!report.masters_directory.empty()) {
    std::cout << "# masters directory: " << report.masters_directory << "\n";
  }
  for (const std::string& note : report.notes) std::cout << "# note: " << note << "\n";
  for (const absl::Status& error : report.errors) {
    std::cerr << "blockswapd: error: " << error.message() << "\n";
  }
  return report.errors.empty() ? 0 : 1;
}

void Notify(absl::string_view state) {
  if (absl::Status sent = blockswap::daemon::NotifySystemd(state); !sent.ok()) {
    blockswap::daemon::Log(blockswap::daemon::LogLevel::kWarning, sent.ToString());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine line;
  CLI::App app{"blockswapd: one pinned copy of every frozen block per node, streamed to GPU rings"};
  app.set_version_flag("--version", blockswap::VersionText("blockswapd", blockswap::ThisBuild()));
  app.add_option("--config", line.config_path, "config file (TOML); options given here override it")
      ->capture_default_str();
  app.add_flag("--check-config", line.check_config,
               "validate the config file and options, print the effective config, check what "
               "this machine would trip the daemon on (the socket group, the socket's directory, "
               "max_pinned_bytes against the tmpfs, allowed accounts), exit 0, or 1 on a problem");
  app.add_flag("--no-preflight", line.no_preflight,
               "with --check-config: the syntax only, for a config meant for another machine");
  app.add_flag("--list-devices", line.list_devices, "print the backend and its devices, then exit");
  for (const auto& field : blockswap::daemon::ConfigFields()) {
    CLI::Option* option = app.add_option(field.flag, line.values[field.key], field.help);
    if (!field.list) option->expected(1);  // one value; given twice, the last counts
    option->multi_option_policy(field.list ? CLI::MultiOptionPolicy::TakeAll
                                           : CLI::MultiOptionPolicy::TakeLast);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help exits 0; every usage error exits 2 (CLI11's own codes are 1xx).
    return app.exit(error) == 0 ? 0 : 2;
  }
  line.config_given = app.count("--config") > 0;

  absl::StatusOr<DaemonOptions> resolved = Resolve(line);
  if (!resolved.ok()) {
    std::cerr << "blockswapd: " << resolved.status().message() << "\n";
    return 2;
  }
  DaemonOptions options = *std::move(resolved);
  // Before the check too, so that it judges the limit the daemon runs with.
  blockswap::daemon::RaiseOpenFilesLimit();
  if (line.check_config) return CheckConfig(line, options);
  if (line.list_devices) return ListDevices(options.backend, options.host);
  if (absl::Status skips = blockswap::SkipProtocolStepsFromEnvironment(); !skips.ok()) {
    std::cerr << "blockswapd: " << skips << "\n";
    return 2;
  }

  // Every thread the daemon starts inherits this mask, so the signals reach
  // only the sigwait below. SIGPIPE: a vanished client is an error return.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto daemon = blockswap::daemon::Daemon::Start(options);
  if (!daemon.ok()) {
    std::cerr << "blockswapd: " << daemon.status() << "\n";
    Notify(absl::StrCat("STATUS=failed to start: ", daemon.status().message()));
    return 1;
  }
  absl::StatusOr<blockswap::daemon::IdleExit> idle =
      blockswap::daemon::IdleExit::Create(options.idle_exit, options.idle_exit_lock);
  if (!idle.ok()) {
    std::cerr << "blockswapd: " << idle.status() << "\n";
    return 1;
  }
  Notify(absl::StrCat("READY=1\nSTATUS=", (*daemon)->Describe()));
  int received = 0;
  while (true) {
    received = WaitForSignal(signals, *idle);
    if (received == 0) {
      if (!idle->ShouldExit([&] { return (*daemon)->session_count(); }, absl::Now())) continue;
      blockswap::daemon::Log(
          blockswap::daemon::LogLevel::kInfo,
          absl::StrCat("no session for ", absl::FormatDuration(options.idle_exit),
                       " (--idle-exit): shutting down"));
      break;
    }
    if (received != SIGHUP) break;
    // Reload what can change without a restart; everything else needs one.
    Notify("RELOADING=1");
    if (absl::StatusOr<DaemonOptions> again = Resolve(line); again.ok()) {
      (*daemon)->Reload(again->log_level, again->quotas);
    } else {
      blockswap::daemon::Log(
          blockswap::daemon::LogLevel::kError,
          absl::StrCat("SIGHUP: the config was not reloaded: ", again.status().message()));
    }
    Notify(absl::StrCat("READY=1\nSTATUS=", (*daemon)->Describe()));
  }
  if (received != 0) {
    blockswap::daemon::Log(
        blockswap::daemon::LogLevel::kInfo,
        absl::StrCat(received == SIGTERM ? "SIGTERM" : "SIGINT", ": shutting down"));
  }
  Notify(absl::StrCat("STOPPING=1\nSTATUS=shutting down (", (*daemon)->Describe(), ")"));
  (*daemon)->Shutdown();
  return 0;
}
