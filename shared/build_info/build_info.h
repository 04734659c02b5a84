// What this build of blockswap is, for `--version` on every binary
// (blockswapd, blockswapctl, blockswap-demo, blockswap-torch-demo): written
// once here so that the four agree field for field. Standard C++ only (the
// torch demo links it and must not meet our abseil).
#ifndef BLOCKSWAP_SHARED_BUILD_INFO_BUILD_INFO_H_
#define BLOCKSWAP_SHARED_BUILD_INFO_BUILD_INFO_H_

#include <string>
#include <string_view>
#include <vector>

namespace blockswap {

struct BuildInfo {
  std::string version;       // the project version (CMake's project())
  std::string git_revision;  // `git describe --always --dirty` at build time, or "unknown"
  unsigned abi_version = 0;  // BS_ABI_VERSION of client/include/blockswap/blockswap.h
  std::string cuda_toolkit;  // the CUDA toolkit it was built with; empty: built without CUDA
  std::vector<std::string> backends;  // the backends this build can run ("host", "cuda")
};

// This binary's build (fixed when it was compiled).
const BuildInfo& ThisBuild();

// The `--version` text, one field a line, without a final newline (CLI11's
// --version adds one):
//   blockswapd 0.1.0
//   git revision: 4a5b215c0d1e
//   C ABI version: 4
//   CUDA toolkit (headers): 12.4  (or "... built without CUDA")
//   backends: host, cuda
std::string VersionText(std::string_view program, const BuildInfo& info);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BUILD_INFO_BUILD_INFO_H_
