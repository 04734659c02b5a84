#include "shared/backend/gpu_presence.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "shared/base/env_settings.h"
#include "shared/base/test_hooks.h"

namespace blockswap {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kNvidiaVendor = "0x10de";
// PCI base class 0x03 (display): 0x0300 VGA, 0x0302 3D controller (the data
// centre GPUs). NVIDIA's audio and USB functions on the same card are not GPUs.
constexpr absl::string_view kGpuClasses[] = {"0x0300", "0x0302"};

std::string ReadTrimmed(const fs::path& path) {
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  return std::string(absl::StripAsciiWhitespace(text));
}

// Sorted, so that the evidence named is the same on every run.
std::vector<fs::path> Entries(const fs::path& dir) {
  std::vector<fs::path> entries;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    entries.push_back(it->path());
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

}  // namespace

std::optional<std::string> FindNvidiaGpu(absl::string_view root) {
  const fs::path base(std::string{root});
  for (const fs::path& device : Entries(base / "sys/bus/pci/devices")) {
    if (ReadTrimmed(device / "vendor") != kNvidiaVendor) continue;
    const std::string pci_class = ReadTrimmed(device / "class");
    for (absl::string_view gpu_class : kGpuClasses) {
      if (absl::StartsWith(pci_class, gpu_class)) {
        return absl::StrCat("PCI device ", device.filename().string(), " (NVIDIA, class ",
                            pci_class, ")");
      }
    }
  }
  for (const fs::path& gpu : Entries(base / "proc/driver/nvidia/gpus")) {
    return absl::StrCat("/proc/driver/nvidia/gpus/", gpu.filename().string());
  }
  for (const fs::path& node : Entries(base / "dev")) {
    const std::string name = node.filename().string();
    if (name.size() > 6 && absl::StartsWith(name, "nvidia") &&
        std::all_of(name.begin() + 6, name.end(), absl::ascii_isdigit)) {
      return absl::StrCat("/dev/", name);
    }
  }
  return std::nullopt;
}

std::string GpuProbeRoot() {
#if BLOCKSWAP_TEST_HOOKS
  if (std::optional<std::string> root = EnvValue(EnvSetting::kGpuProbeRoot)) return *root;
#endif
  return "/";
}

}  // namespace blockswap
