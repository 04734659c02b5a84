// blockswapd entry point (first cut): `blockswapd --list-devices
// [--backend=auto|host|cuda]` opens the backend exactly as the daemon will
// and prints it with its devices, or says precisely why it cannot.
#include <cstring>
#include <iostream>

#include "shared/backend.h"


int main(int argc, char** argv) {
  absl::string_view backend_name = "auto";
  bool list_devices = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--list-devices") {
      list_devices = true;
    } else if (arg.rfind("--backend=", 0) == 0) {
      backend_name = arg.substr(std::strlen("--backend="));
    } else {
      std::cerr << "blockswapd: unknown argument '" << arg << "'\n";
      return 2;
    }
  }
  if (!list_devices) {
    std::cerr << "blockswapd: serving is not built yet; this version only supports "
                 "--list-devices [--backend=auto|host|cuda]\n";
    return 2;
  }
  auto choice = blockswap::ParseBackendChoice(backend_name);
  if (!choice.ok()) {
    std::cerr << "blockswapd: " << choice.status().message() << "\n";
    return 2;
  }
  auto backend =
      blockswap::OpenBackend(*choice, blockswap::HostBackendOptions::FromEnvironment());
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
