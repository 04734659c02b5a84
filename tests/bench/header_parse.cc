// blockswap-bench-header (P10): the safetensors header parser's time per
// 10,000 tensors at several tensor counts, measured side by side in one run:
// a parse whose cost grows faster than the header holds one of the daemon's
// work threads for minutes on a checkpoint of many tensors.
//
//   blockswap-bench-header [--tensors 10000,40000,200000] [--rounds 5]
//
// Each header is what a mixture-of-experts checkpoint has: one-byte U8
// tensors "layers.<b>.experts.<e>.weight", 100 to a block
// (testing::ManyTinyTensors), about 85 bytes of JSON each. A round parses
// every size once, in turn, so that a change in the machine's load falls on
// all of them; the row is the median over the rounds of this thread's CPU
// time (wall time is printed beside it). Ends with
// `P10 header-parse-per-10k-largest-vs-smallest goal=<=2 measured=<m> PASS|MISS`:
// the time per 10,000 tensors at the largest count over that at the
// smallest, 1 for a parse linear in the header.
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "shared/base/safetensors_header.h"
#include "tests/support/safetensors_writer.h"

namespace blockswap {
namespace {

constexpr size_t kTensorsPerBlock = 100;

double ThreadCpuSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Size {
  size_t tensors = 0;
  std::string header;
  uint64_t file_size = 0;
  std::vector<double> cpu_seconds = {};
  std::vector<double> wall_seconds = {};
};

int Run(std::vector<size_t> counts, int rounds) {
  std::sort(counts.begin(), counts.end());
  std::vector<Size> sizes;
  for (size_t count : counts) {
    auto header = testing::SafetensorsHeaderJson(testing::ManyTinyTensors(count, kTensorsPerBlock));
    if (!header.ok()) {
      std::fprintf(stderr, "blockswap-bench-header: %s\n", header.status().ToString().c_str());
      return 1;
    }
    // The data section holds one byte per tensor.
    const uint64_t file_size = kSafetensorsPrefixBytes + header->size() + count;
    sizes.push_back({.tensors = count, .header = *std::move(header), .file_size = file_size});
  }
  for (int r = 0; r < rounds; ++r) {
    for (Size& size : sizes) {
      const absl::Time start = absl::Now();
      const double cpu_start = ThreadCpuSeconds();
      auto parsed = ParseSafetensorsHeader(size.header, size.file_size);
      size.cpu_seconds.push_back(ThreadCpuSeconds() - cpu_start);
      size.wall_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
      if (!parsed.ok() || parsed->tensors.size() != size.tensors) {
        std::fprintf(stderr, "blockswap-bench-header: %zu tensors: %s\n", size.tensors,
                     parsed.ok() ? "wrong tensor count" : parsed.status().ToString().c_str());
        return 1;
      }
    }
  }
  for (const Size& size : sizes) {
    const double cpu = Median(size.cpu_seconds);
    std::printf("P10 %zu tensors (%.1f MB of header): %.4f s CPU (%.4f s wall), %.4f s per 10k\n",
                size.tensors, static_cast<double>(size.header.size()) / 1e6, cpu,
                Median(size.wall_seconds), cpu * 1e4 / static_cast<double>(size.tensors));
  }
  auto per_10k = [](const Size& size) {
    return Median(size.cpu_seconds) / static_cast<double>(size.tensors);
  };
  const double ratio = per_10k(sizes.back()) / per_10k(sizes.front());
  std::printf("%s", absl::StrFormat("P10 header-parse-per-10k-largest-vs-smallest goal=<=2 "
                                    "measured=%.4g %s\n",
                                    ratio, ratio <= 2 ? "PASS" : "MISS")
                        .c_str());
  return 0;
}

}  // namespace
}  // namespace blockswap

int main(int argc, char** argv) {
  CLI::App app("blockswap-bench-header: safetensors header parse time per 10k tensors");
  std::vector<size_t> counts = {10000, 40000, 200000};
  int rounds = 5;
  app.add_option("--tensors", counts, "tensor counts, comma-separated")->delimiter(',');
  app.add_option("--rounds", rounds, "rounds over every count (the median is reported)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (counts.empty() || *std::min_element(counts.begin(), counts.end()) == 0) {
    std::fprintf(stderr, "blockswap-bench-header: --tensors needs positive counts\n");
    return 2;
  }
  return blockswap::Run(counts, rounds);
}
