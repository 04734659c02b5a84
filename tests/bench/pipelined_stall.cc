#include "tests/bench/pipelined_stall.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "shared/base/status.h"
#include "shared/protocol/grpc_status.h"
#include "shared/protocol/trace_log.h"
#include "tests/bench/copy_ceiling.h"
#include "tests/bench/inprocess_pipeline.h"
#include "tests/bench/release_to_issue.h"

namespace blockswap::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// Block sizes are multiples of this (the daemon's block placement does not
// need it; it keeps the sizes readable).
constexpr uint64_t kBlockGranule = 64 << 10;
// Each ceiling measurement copies for about this long.
constexpr double kCeilingSeconds = 0.1;

// The copy time of a block size on this backend (the best of the rounds:
// other processes only ever add time).
struct CopyTime {
  uint64_t bytes = 0;
  double seconds = 0;
};

absl::StatusOr<CopyTime> MeasureCopyTime(Device& device, uint64_t bytes, int rounds) {
  // About kCeilingSeconds of copies at 20 GB/s (the order of a host memcpy
  // and of a PCIe link alike), at least 16.
  const int copies = std::clamp(static_cast<int>(kCeilingSeconds * 20e9 / bytes), 16, 2000);
  double best_gbps = 0;
  for (int round = 0; round < rounds; ++round) {
    BLOCKSWAP_ASSIGN_OR_RETURN(Rate rate, Ceiling(device, bytes, copies));
    best_gbps = std::max(best_gbps, rate.gbps);
  }
  return CopyTime{bytes, static_cast<double>(bytes) / (best_gbps * 1e9)};
}

// The copy times of block sizes from kMinProbeBytes to kMaxProbeBytes in
// steps of 2x. The rate is no constant: blocks whose working set fits the
// CPU's cache copy faster on the host backend, small copies are slower per
// byte on a GPU; so a case's size is interpolated between measured sizes
// rather than extrapolated from one rate.
constexpr uint64_t kMinProbeBytes = 256 << 10;
constexpr uint64_t kMaxProbeBytes = 512 * kMiB;

absl::StatusOr<std::vector<CopyTime>> CopyTimeCurve(Device& device, double longest_seconds,
                                                    int rounds) {
  std::vector<CopyTime> curve;
  for (uint64_t bytes = kMinProbeBytes; bytes <= kMaxProbeBytes; bytes *= 2) {
    BLOCKSWAP_ASSIGN_OR_RETURN(CopyTime time, MeasureCopyTime(device, bytes, rounds));
    curve.push_back(time);
    if (time.seconds > longest_seconds) break;  // the longest case is bracketed
  }
  return curve;
}

// The size whose copy takes `seconds` by linear interpolation on the curve
// (a noisy point can make it non-monotonic: the first bracket is used),
// rounded to kBlockGranule.
uint64_t BytesTaking(const std::vector<CopyTime>& curve, double seconds) {
  double bytes = static_cast<double>(curve.back().bytes) * seconds / curve.back().seconds;
  if (seconds <= curve.front().seconds) {
    bytes = static_cast<double>(curve.front().bytes) * seconds / curve.front().seconds;
  }
  for (size_t i = 1; i < curve.size(); ++i) {
    const CopyTime &low = curve[i - 1], &high = curve[i];
    if (low.seconds <= seconds && seconds <= high.seconds) {
      const double t = (seconds - low.seconds) / (high.seconds - low.seconds);
      bytes = static_cast<double>(low.bytes) + t * static_cast<double>(high.bytes - low.bytes);
      break;
    }
  }
  return std::max<uint64_t>(
      kBlockGranule, static_cast<uint64_t>(std::llround(bytes / kBlockGranule)) * kBlockGranule);
}

// The least-disturbed step times of one case (the minimum over rounds of
// each: other processes only ever add time).
struct StepTimes {
  double streaming = std::numeric_limits<double>::infinity();
  double compute_only = std::numeric_limits<double>::infinity();
  double Stall() const { return std::max(0.0, (streaming - compute_only) / streaming); }
};

class PipelinedStall {
 public:
  PipelinedStall(const PipelinedStallOptions& options, BackendKind kind, Device& device,
                 size_t devices, const testing::DaemonProcess& daemon, StreamClients& clients,
                 Summary& summary)
      : options_(options),
        kind_(kind),
        device_(device),
        devices_(devices),
        daemon_(daemon),
        clients_(clients),
        summary_(summary),
        id_(kind == BackendKind::kCuda ? "P4-GPU" : "P4-host") {}

  absl::Status Run() {
    if (options_.copy_ms.empty()) return absl::OkStatus();
    const double longest_ms = *std::max_element(options_.copy_ms.begin(), options_.copy_ms.end());
    BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<CopyTime> curve,
                               CopyTimeCurve(device_, longest_ms / 1e3, options_.rounds));
    for (double copy_ms : options_.copy_ms) {
      // The case's copy time is measured again at its own size: the kernels
      // are multiples of that, not of the target.
      BLOCKSWAP_ASSIGN_OR_RETURN(
          CopyTime size,
          MeasureCopyTime(device_, BytesTaking(curve, copy_ms / 1e3), options_.rounds));
      BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<InProcessPipeline> pipeline,
                                 InProcessPipeline::Create(kind_, device_, size.bytes,
                                                           options_.compute));
      model_id_.clear();  // a model of this case's block size, registered by its first client
      for (double factor : options_.compute_factors) {
        BLOCKSWAP_RETURN_IF_ERROR(Case(copy_ms, size, factor, *pipeline));
      }
    }
    LatencyRows();
    return absl::OkStatus();
  }

 private:
  absl::Status Case(double copy_ms, const CopyTime& size, double factor,
                    InProcessPipeline& pipeline) {
    // Whole µs, as gpu-stream's --compute-us takes it: both sides run the
    // same kernels.
    const absl::Duration compute = absl::Microseconds(std::llround(factor * size.seconds * 1e6));
    StepTimes blockswap, in_process;
    for (int round = 0; round < options_.rounds; ++round) {
      // Alternated, so that neither side always runs right after the other
      // (a warm cache, a daemon thread still winding down).
      for (int side = 0; side < 2; ++side) {
        if ((side + round) % 2 == 0) {
          BLOCKSWAP_RETURN_IF_ERROR(BlockswapRound(size.bytes, compute, blockswap));
        } else {
          BLOCKSWAP_RETURN_IF_ERROR(InProcessRound(pipeline, compute, in_process));
        }
      }
    }
    const double points = 100 * (blockswap.Stall() - in_process.Stall());
    const std::string name =
        absl::StrFormat("%s-%gms-%s", id_, copy_ms,
                        factor == std::floor(factor) ? absl::StrFormat("%.1fx", factor)
                                                     : absl::StrFormat("%gx", factor));
    std::printf(
        "%s: %d blocks of %.2f MiB (copy %.0f us), kernel %.0f us: blockswap step %.4f s "
        "streaming, %.4f s kernels only, stall %.2f%%; in-process %.4f s, %.4f s, stall %.2f%%; "
        "difference %.2f points\n",
        name.c_str(), options_.blocks, static_cast<double>(size.bytes) / kMiB, size.seconds * 1e6,
        absl::ToDoubleMicroseconds(compute), blockswap.streaming, blockswap.compute_only,
        100 * blockswap.Stall(), in_process.streaming, in_process.compute_only,
        100 * in_process.Stall(), points);
    std::fflush(stdout);
    // Goals hold from 0.7 ms copies on (below that the daemon's per-load
    // latency is a fixed cost a short copy cannot hide; reported only).
    const double goal_points = copy_ms < 0.7 ? 0 : (factor >= 1.25 ? 1.0 : 2.0);
    if (goal_points == 0) {
      summary_.Add(name, "stall-vs-inprocess", "report", points, true);
    } else {
      summary_.Add(name, "stall-vs-inprocess", absl::StrFormat("<=%.1fpp", goal_points), points,
                   points <= goal_points);
    }
    return absl::OkStatus();
  }

  absl::Status BlockswapRound(uint64_t bytes, absl::Duration compute, StepTimes& best) {
    std::vector<std::string> args =
        GpuStreamArgs(bytes, kModelBlocks, kSlots, options_.blocks, model_id_);
    args.push_back(absl::StrCat("--compute-us=", absl::ToInt64Microseconds(compute)));
    if (options_.compute == gpu_testing::ComputeKind::kHostCopies) args.push_back("--compute=copies");
    const uint64_t since_ns = MonotonicNanos();
    BLOCKSWAP_ASSIGN_OR_RETURN(double streaming, ClientSeconds(args));
    BLOCKSWAP_ASSIGN_OR_RETURN(v1::TraceReply trace, Trace(since_ns));
    std::vector<double> latencies = ReleaseToIssueMicros(trace);
    release_to_issue_us_.insert(release_to_issue_us_.end(), latencies.begin(), latencies.end());
    args.push_back("--compute-only=1");
    BLOCKSWAP_ASSIGN_OR_RETURN(double compute_only, ClientSeconds(args));
    best.streaming = std::min(best.streaming, streaming);
    best.compute_only = std::min(best.compute_only, compute_only);
    return absl::OkStatus();
  }

  absl::Status InProcessRound(InProcessPipeline& pipeline, absl::Duration compute,
                              StepTimes& best) {
    BLOCKSWAP_ASSIGN_OR_RETURN(double streaming,
                               pipeline.StreamingSeconds(options_.blocks, compute));
    BLOCKSWAP_ASSIGN_OR_RETURN(double compute_only,
                               pipeline.ComputeOnlySeconds(options_.blocks, compute));
    best.streaming = std::min(best.streaming, streaming);
    best.compute_only = std::min(best.compute_only, compute_only);
    return absl::OkStatus();
  }

  // One gpu-stream client's step time (its "seconds"); the first registers
  // the case's model, the others open it.
  absl::StatusOr<double> ClientSeconds(const std::vector<std::string>& args) {
    BLOCKSWAP_ASSIGN_OR_RETURN(StreamRun run, clients_.Run(1, args, devices_));
    if (model_id_.empty()) model_id_ = testing::FirstValue(run.reports[0], "model");
    return testing::NumberValue(run.reports[0], "seconds");
  }

  absl::StatusOr<v1::TraceReply> Trace(uint64_t since_ns) {
    v1::TraceRequest request;
    request.set_since_ns(since_ns);
    v1::TraceReply reply;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::Status status = daemon_.Admin()->Trace(&context, request, &reply);
    if (!status.ok()) return FromGrpcStatus(status);
    return reply;
  }

  void LatencyRows() {
    const std::string p50 = "release-to-issue-p50-us", p99 = "release-to-issue-p99-us";
    if (const char* copy = std::getenv("BLOCKSWAP_COPY");
        copy != nullptr && std::string_view(copy) == "trainer") {
      // The daemon neither issues nor traces a trainer's own copies.
      std::printf("%s release-to-issue: none (BLOCKSWAP_COPY=trainer: the clients copy)\n",
                  id_.c_str());
      return;
    }
    if (release_to_issue_us_.empty()) {
      // The daemon records kReleaseNotified only once clients notify it of
      // completed releases; a daemon that polls for them has none.
      const std::string why = "no release-notified events in the trace";
      summary_.AddUnmeasured(id_, p50, "<=30", why);
      summary_.AddUnmeasured(id_, p99, "<=300", why);
      std::printf("%s release-to-issue: no release-notified events in the trace\n", id_.c_str());
      return;
    }
    const double at_50 = Percentile(release_to_issue_us_, 0.50);
    const double at_99 = Percentile(release_to_issue_us_, 0.99);
    std::printf(
        "%s release-to-issue over %zu copies that waited for their free: p50 %.1f us, "
        "p99 %.1f us\n",
        id_.c_str(), release_to_issue_us_.size(), at_50, at_99);
    summary_.Add(id_, p50, "<=30", at_50, at_50 <= 30);
    summary_.Add(id_, p99, "<=300", at_99, at_99 <= 300);
  }

  const PipelinedStallOptions& options_;
  const BackendKind kind_;
  Device& device_;
  const size_t devices_;
  const testing::DaemonProcess& daemon_;
  StreamClients& clients_;
  Summary& summary_;
  const std::string id_;
  std::string model_id_;
  std::vector<double> release_to_issue_us_;  // over every streaming pass
};

}  // namespace

absl::Status MeasurePipelinedStall(const PipelinedStallOptions& options, BackendKind kind,
                                   Device& device, size_t devices,
                                   const testing::DaemonProcess& daemon, StreamClients& clients,
                                   Summary& summary) {
  return PipelinedStall(options, kind, device, devices, daemon, clients, summary).Run();
}

}  // namespace blockswap::bench
