// LatencyHistogram: counts of durations in fixed buckets, Prometheus-style
// (cumulative on output: a bucket counts every sample at or below its bound),
// with their sum, so that `rate(_sum) / rate(_count)` and quantiles over any
// interval can be computed by whoever scrapes it.
//
// The bounds span a GPU's 64 MiB copy (~1 ms) to a host-backend copy queued
// behind others (~1 s). Thread-compatible: its owner locks.
#ifndef BLOCKSWAP_DAEMON_DEVICE_LATENCY_HISTOGRAM_H_
#define BLOCKSWAP_DAEMON_DEVICE_LATENCY_HISTOGRAM_H_

#include <array>
#include <cstdint>

namespace blockswap::daemon {

class LatencyHistogram {
 public:
  // Upper bounds in seconds; a last, implicit bucket is +Inf.
  static constexpr std::array<double, 14> kBounds = {50e-6,  100e-6, 250e-6, 500e-6, 1e-3,
                                                     2.5e-3, 5e-3,   10e-3,  25e-3,  50e-3,
                                                     100e-3, 250e-3, 500e-3, 1.0};

  void Observe(double seconds) {
    size_t bucket = 0;
    while (bucket < kBounds.size() && seconds > kBounds[bucket]) ++bucket;
    ++counts_[bucket];
    sum_ += seconds;
  }

  // Samples at or below kBounds[bucket]; bucket == kBounds.size() is +Inf.
  uint64_t CumulativeCount(size_t bucket) const {
    uint64_t total = 0;
    for (size_t b = 0; b <= bucket && b < counts_.size(); ++b) total += counts_[b];
    return total;
  }
  uint64_t count() const { return CumulativeCount(kBounds.size()); }
  double sum() const { return sum_; }

 private:
  std::array<uint64_t, kBounds.size() + 1> counts_{};
  double sum_ = 0;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_LATENCY_HISTOGRAM_H_
