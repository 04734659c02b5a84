// blockswapd: the node-local block-swap daemon.
//
//   blockswapd [--socket PATH] [--backend auto|host|cuda] [--shm-prefix DIR]
//              [--max-pinned-bytes N] [--allow-uid UID]... [--allow-gid GID]...
//   blockswapd --list-devices [--backend ...]
//
// SIGTERM or SIGINT shut it down gracefully (Daemon::Shutdown); it exits 0.
#include <signal.h>

#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "daemon/daemon.h"
#include "shared/load_protocol.h"

namespace {

int ListDevices(blockswap::BackendChoice choice, const blockswap::HostBackendOptions& host) {
  auto backend = blockswap::OpenBackend(choice, host);
  if (!backend.ok()) {
    std::cerr << "blockswapd: " << backend.status() << "\n";
    return 1;
  }
  std::cout << "backend " << blockswap::BackendKindName((*backend)->kind()) << "\n";
  for (const auto& device : (*backend)->devices()) {
    const auto& info = device->info();
    std::cout << "device " << info.uuid << " \"" << info.name << "\" "
              << info.total_memory_bytes << " bytes\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  blockswap::daemon::DaemonOptions options;
  options.host = blockswap::HostBackendOptions::FromEnvironment();
  std::string backend_name = "auto";
  double grace_seconds = absl::ToDoubleSeconds(options.shutdown_grace);
  bool list_devices = false;

  CLI::App app{"blockswapd: one pinned copy of every frozen block per node, streamed to GPU rings"};
  app.add_option("--socket", options.socket_path, "control socket path")->capture_default_str();
  app.add_option("--backend", backend_name, "auto, host or cuda")->capture_default_str();
  app.add_option("--host-devices", options.host.device_count,
                 "simulated devices of the host backend")
      ->capture_default_str();
  app.add_option("--shm-prefix", options.shm_prefix,
                 "directory of the master files (mode 0700, on a tmpfs)")
      ->capture_default_str();
  app.add_option("--max-pinned-bytes", options.max_pinned_bytes,
                 "bytes of masters the daemon may hold pinned (0: the tmpfs decides)")
      ->capture_default_str();
  app.add_option("--allow-uid", options.allow_uids,
                 "also allow this uid (default: the daemon's uid, root, the socket's group)");
  app.add_option("--allow-gid", options.allow_gids, "also allow this gid");
  app.add_option("--shutdown-grace", grace_seconds,
                 "seconds attached clients get to detach on SIGTERM")
      ->capture_default_str();
  app.add_flag("--list-devices", list_devices, "print the backend and its devices, then exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help exits 0; every usage error exits 2 (CLI11's own codes are 1xx).
    return app.exit(error) == 0 ? 0 : 2;
  }

  auto choice = blockswap::ParseBackendChoice(backend_name);
  if (!choice.ok()) {
    std::cerr << "blockswapd: " << choice.status().message() << "\n";
    return 2;
  }
  options.backend = *choice;
  options.shutdown_grace = absl::Seconds(grace_seconds);
  if (list_devices) return ListDevices(options.backend, options.host);
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
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto daemon = blockswap::daemon::Daemon::Start(std::move(options));
  if (!daemon.ok()) {
    std::cerr << "blockswapd: " << daemon.status() << "\n";
    return 1;
  }
  int received = 0;
  sigwait(&signals, &received);
  std::cerr << "blockswapd: " << (received == SIGTERM ? "SIGTERM" : "SIGINT")
            << ": shutting down\n";
  (*daemon)->Shutdown();
  return 0;
}
