#include "shared/build_info/build_info.h"

#include "shared/build_info/build_config.h"
#include "shared/build_info/git_revision.h"

namespace blockswap {
namespace {

std::vector<std::string> SplitCommas(std::string_view list) {
  std::vector<std::string> names;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    names.emplace_back(list.substr(0, comma));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return names;
}

}  // namespace

const BuildInfo& ThisBuild() {
  static const BuildInfo* const info = new BuildInfo{
      .version = BLOCKSWAP_BUILD_VERSION,
      .git_revision = BLOCKSWAP_BUILD_GIT_REVISION,
      .abi_version = BLOCKSWAP_BUILD_ABI_VERSION,
      .cuda_toolkit = BLOCKSWAP_BUILD_CUDA_TOOLKIT,
      .backends = SplitCommas(BLOCKSWAP_BUILD_BACKENDS),
  };
  return *info;
}

std::string VersionText(std::string_view program, const BuildInfo& info) {
  std::string text(program);
  text += " " + info.version + "\n";
  text += "git revision: " + info.git_revision + "\n";
  text += "C ABI version: " + std::to_string(info.abi_version) + "\n";
  text +=
      "CUDA toolkit (headers): " + (info.cuda_toolkit.empty() ? "built without CUDA" : info.cuda_toolkit) +
      "\n";
  text += "backends: ";
  for (size_t i = 0; i < info.backends.size(); ++i) {
    text += (i == 0 ? "" : ", ") + info.backends[i];
  }
  return text;
}

}  // namespace blockswap
