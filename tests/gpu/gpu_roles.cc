// Client processes of the GPU tests (gpu_test.cc), spawned from the test
// binary. Each attaches to a real blockswapd through the client library,
// registers a model of pseudo-random blocks (content from --seed, so that
// clients with one seed share one model), and consumes every loaded slot
// on a stream of its own: an optional spin (the block's compute), then a
// byte comparison with what the block must hold, by kernels or, with
// --compute=copies, with no CUDA runtime (a copy to the host, compared
// there: DeviceCompute). The comparison runs after the spin, so a slot
// overwritten while the "compute" ran is caught. Results go to --report=FILE
// (tests/support/role_report.h); the exit code is a ClientExit.
#include "tests/gpu/gpu_roles.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "client/core/daemon_copy_ring.h"
#include "client/core/ring.h"
#include "shared/base/status.h"
#include "tests/gpu/device_compute.h"
#include "tests/support/become_user.h"
#include "tests/support/block_content.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"

namespace blockswap::gpu_testing {
namespace {

using testing::BlockContent;
using testing::KeyValueArgs;
using testing::RoleReport;

[[noreturn]] void Exit(const absl::Status& status, const RoleReport& report,
                       DeviceCompute* compute) {
  std::cerr << "gpu client " << ::getpid() << ": " << status << "\n";
  report.Add("error", absl::StrCat(static_cast<int>(status.code()), " ", status.message()));
  if (compute != nullptr) {
    // Whatever went wrong with the daemon, this process's own stream must
    // still be sound: no kernel faulted on memory that went away, and with
    // ready words (the watchdog released them) it drains. What it did is
    // reported: "busy" (still waiting 5 s later), "abandoned" (the backend
    // gave the wait up: the host backend fails a stream waiting on a dead
    // process's event), "ok" or "fault".
    absl::Status sync = compute->SynchronizeWithin(absl::Seconds(5));
    std::string observed = sync.ok()                        ? "ok"
                           : absl::IsDeadlineExceeded(sync) ? "busy: "
                           : absl::IsUnavailable(sync)      ? "abandoned: "
                                                            : "fault: ";
    if (!sync.ok()) absl::StrAppend(&observed, sync.message());
    report.Add("sync", observed);
  }
  // Ends the process here: unwinding would wait for the stream, the ring and
  // the connection, which may never drain after the daemon died.
  std::_Exit(absl::IsDeadlineExceeded(status) ? kGpuClientTimedOut : kGpuClientFailed);
}

struct Client {
  std::unique_ptr<client::Connection> connection;
  std::unique_ptr<client::Model> model;
  std::unique_ptr<client::Ring> ring;
  std::unique_ptr<DeviceCompute> compute;
  std::vector<const void*> kept;        // per block: its bytes on the device
  std::vector<uint64_t> tensor_offset;  // per block: where its bytes sit in a slot
  std::vector<uint64_t> tensor_bytes;
};

absl::Status Setup(const KeyValueArgs& args, const RoleReport& report, size_t checks,
                   Client& client) {
  // --as-uid=N: a trainer of another user than the daemon's, as under the
  // system service (CUDA IPC across users; gpu_test.cc's ClientUser).
  if (const int64_t uid = args.Int("as-uid", -1); uid >= 0) {
    BLOCKSWAP_RETURN_IF_ERROR(testing::BecomeUser(uid));
  }
  const uint64_t seed = args.Int("seed", 1);
  const uint32_t blocks = static_cast<uint32_t>(args.Int("blocks", 12));
  const uint64_t max_bytes = args.Int("block-bytes", 4 << 20);
  BLOCKSWAP_ASSIGN_OR_RETURN(
      client.connection,
      client::Connection::Connect(args.Str("socket"), args.Str("name", "gpu-test")));
  // The blocks' bytes, for an upload or the comparisons only: a benchmark
  // client that opens a model and never compares (--verify=0) makes none.
  const bool registering = args.Str("model-id").empty();
  const bool verify = args.Int("verify", 1) != 0;
  std::vector<std::vector<std::byte>> content;
  std::vector<std::vector<client::TensorUpload>> uploads(blocks);
  if (registering || verify) {
    for (uint32_t b = 0; b < blocks; ++b) content.push_back(BlockContent(seed, max_bytes, b));
  }
  for (uint32_t b = 0; b < blocks && registering; ++b) {
    client::TensorUpload upload;
    upload.spec.name = "weight";
    upload.spec.dtype = "U8";
    upload.spec.shape = {content[b].size()};
    upload.data = content[b].data();
    uploads[b].push_back(std::move(upload));
  }
  // --model-id: open what an earlier client registered (no upload).
  BLOCKSWAP_ASSIGN_OR_RETURN(
      client.model, registering ? client::Model::Register(*client.connection, "gpu-test", uploads)
                                : client::Model::Open(*client.connection, args.Str("model-id")));
  report.Add("model", client.model->id());
  uint64_t slot_bytes = 0;
  for (uint32_t b = 0; b < blocks; ++b) {
    const BlockSpec& block = client.model->layout().blocks[b];
    slot_bytes = std::max<uint64_t>(slot_bytes, block.bytes);
    client.tensor_offset.push_back(block.tensors.front().offset);
    client.tensor_bytes.push_back(block.tensors.front().length);
  }
  const auto& devices = client.connection->device_uuids();
  const std::string& uuid = devices[args.Int("device", 0) % devices.size()];
  report.Add("device", uuid);
  BLOCKSWAP_ASSIGN_OR_RETURN(
      client.ring, client::Ring::Create(*client.connection, uuid,
                                        static_cast<uint32_t>(args.Int("slots", 2)), slot_bytes));
  // How the client's stream waits for a fill: on the daemon's ready words
  // (a dead daemon's are released by this process's watchdog), where the
  // device has no stream memory operations on the host for landed_seq, or,
  // when the trainer copies, on its own copy stream's events.
  auto* daemon_ring = dynamic_cast<client::DaemonCopyRing*>(client.ring.get());
  report.Add("ready_path",
             daemon_ring == nullptr                                      ? "trainer"
             : daemon_ring->shared_ring_for_testing().ready_words() != nullptr ? "words"
                                                                               : "landed");
  const std::string compute = args.Str("compute", "kernels");
  if (compute != "kernels" && compute != "copies") {
    return absl::InvalidArgumentError(
        absl::StrCat("--compute=", compute, ": kernels or copies expected"));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(
      client.compute,
      DeviceCompute::Create(client.connection->backend_kind(), client.ring->device(), checks,
                            compute == "copies" ? ComputeKind::kHostCopies : ComputeKind::kKernels));
  for (uint32_t b = 0; b < blocks && verify; ++b) {
    BLOCKSWAP_ASSIGN_OR_RETURN(const void* kept, client.compute->Keep(content[b]));
    client.kept.push_back(kept);
  }
  return absl::OkStatus();
}

// Streams --loads pseudo-random blocks through the ring, loads running
// ahead by the ring size. Every --slow-every'th block's compute is a
// --slow-ms kernel, the others --compute-us. Reports loads, wrong (slots
// whose bytes differed when the kernels read them), seconds, GB/s, the
// longest host-side wait for a fill (max_wait_ms), and the wall-clock
// start/end of the streaming (Unix seconds, to add up concurrent clients),
// and the round trip of a load (its request to its Wait returning on the
// host: filled_seq seen) at the 50th and 99th percentile, in µs
// (latency_p50_us, latency_p99_us; with --slots=1 one load is in flight).
// For the benchmark: --verify=0 skips the comparisons, --compute-only=1
// runs the same kernels with no loads at all (the step time without
// streaming), --host-waits=1 loads and waits on the calling thread instead
// of the compute stream (a host trainer's way: Wait returns once the block
// is there, the next load's free record is immediate).
int RunGpuStream(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  const int64_t total = args.Int("loads", 600);
  const int64_t slow_every = args.Int("slow-every", 0);
  const absl::Duration slow = absl::Milliseconds(args.Int("slow-ms", 0));
  const absl::Duration compute_time = absl::Microseconds(args.Int("compute-us", 0));
  const absl::Duration timeout = absl::Milliseconds(args.Int("timeout-ms", 10000));
  const bool verify = args.Int("verify", 1) != 0;
  const bool compute_only = args.Int("compute-only", 0) != 0;
  const bool host_waits = args.Int("host-waits", 0) != 0;
  Client client;
  if (absl::Status s = Setup(args, report, static_cast<size_t>(total), client); !s.ok()) {
    Exit(s, report, client.compute.get());
  }
  client::Ring& ring = *client.ring;
  DeviceCompute& compute = *client.compute;
  const uint32_t slots = ring.shape().slot_count;
  const uint32_t blocks = client.model->block_count();
  std::vector<uint32_t> order(total);
  uint64_t choice = args.Int("seed", 1) + 17;
  for (int64_t k = 0; k < total; ++k) {
    choice = choice * 6364136223846793005ull + 1442695040888963407ull;
    order[k] = static_cast<uint32_t>((choice >> 33) % blocks);
  }
  std::vector<absl::Time> requested(total);
  std::vector<double> round_trip_us;
  round_trip_us.reserve(total);
  auto load = [&](int64_t k) {
    if (compute_only) return absl::OkStatus();
    requested[k] = absl::Now();
    const uint32_t slot = static_cast<uint32_t>(k % slots);
    return host_waits ? ring.Load(slot, *client.model, order[k], nullptr)
                      : ring.Load(slot, *client.model, order[k], compute.stream());
  };
  uint64_t bytes = 0;
  absl::Duration max_wait;
  const absl::Time start = absl::Now();
  for (int64_t k = 0; k < slots && k < total; ++k) {
    if (absl::Status s = load(k); !s.ok()) Exit(s, report, &compute);
  }
  for (int64_t k = 0; k < total; ++k) {
    const uint32_t slot = static_cast<uint32_t>(k % slots);
    const uint32_t block = order[k];
    const absl::Time wait_start = absl::Now();
    if (absl::Status s = compute_only ? absl::OkStatus()
                         : host_waits ? ring.Wait(slot, nullptr, timeout)
                                      : ring.Wait(slot, compute.stream(), timeout);
        !s.ok()) {
      Exit(s, report, &compute);
    }
    const absl::Time waited = absl::Now();
    max_wait = std::max(max_wait, waited - wait_start);
    if (!compute_only) round_trip_us.push_back(absl::ToDoubleMicroseconds(waited - requested[k]));
    absl::Status queued;
    if (slow_every > 0 && k % slow_every == slow_every - 1) {
      queued = compute.Spin(slow);
    } else if (compute_time > absl::ZeroDuration()) {
      queued = compute.Spin(compute_time);
    }
    if (queued.ok() && verify && !compute_only) {
      const auto* slot_bytes = static_cast<const std::byte*>(ring.slot(slot));
      queued = compute.Compare(slot_bytes + client.tensor_offset[block], client.kept[block],
                               client.tensor_bytes[block], static_cast<size_t>(k));
    }
    if (!queued.ok()) Exit(queued, report, &compute);
    bytes += client.model->layout().blocks[block].bytes;
    if (k == blocks - 1) report.Add("streaming", "1");
    if (k + slots < total) {
      if (absl::Status s = load(k + slots); !s.ok()) Exit(s, report, &compute);
    }
  }
  if (absl::Status s = ring.Drain(timeout); !s.ok()) Exit(s, report, &compute);
  absl::StatusOr<uint64_t> wrong = compute.CountMismatches();
  if (!wrong.ok()) Exit(wrong.status(), report, &compute);
  const absl::Time end = absl::Now();
  // Teardown in CUDA's order, after the compute stream's last read of a slot
  // (client::Ring::Close; the destructor would order it after the legacy
  // default stream only). Not part of the measured time.
  if (absl::Status s = ring.Close(compute.stream(), timeout); !s.ok()) Exit(s, report, &compute);
  const double seconds = absl::ToDoubleSeconds(end - start);
  report.Add("loads", absl::StrCat(total));
  report.Add("wrong", absl::StrCat(*wrong));
  report.Add("seconds", absl::StrCat(seconds));
  report.Add("gbps", absl::StrCat(static_cast<double>(bytes) / seconds / 1e9));
  report.Add("max_wait_ms", absl::StrCat(absl::ToDoubleMilliseconds(max_wait)));
  if (!round_trip_us.empty()) {
    std::sort(round_trip_us.begin(), round_trip_us.end());
    const auto percentile = [&](double p) {
      return round_trip_us[static_cast<size_t>(p * (round_trip_us.size() - 1))];
    };
    report.Add("latency_p50_us", absl::StrCat(percentile(0.50)));
    report.Add("latency_p99_us", absl::StrCat(percentile(0.99)));
  }
  report.Add("start", absl::StrFormat("%.6f", absl::ToDoubleSeconds(start - absl::UnixEpoch())));
  report.Add("end", absl::StrFormat("%.6f", absl::ToDoubleSeconds(end - absl::UnixEpoch())));
  if (*wrong > 0) {
    std::cerr << "gpu client " << ::getpid() << ": " << *wrong << " of " << total
              << " loads had wrong bytes when the kernels read them\n";
    return kGpuClientWrongBytes;
  }
  return kGpuClientOk;
}
BLOCKSWAP_CHILD_ROLE("gpu-stream", RunGpuStream);

// Loads block 0 into slot 0, starts a --hold-ms kernel on it and asks for
// the slot's next block behind that kernel (so `free` is recorded after
// it), says "holding" and sleeps: the test kills it while the kernel runs.
int RunGpuHold(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  Client client;
  if (absl::Status s = Setup(args, report, 1, client); !s.ok()) {
    Exit(s, report, client.compute.get());
  }
  client::Ring& ring = *client.ring;
  DeviceCompute& compute = *client.compute;
  absl::Status s = ring.Load(0, *client.model, 0, compute.stream());
  if (s.ok()) s = ring.Wait(0, compute.stream(), absl::Seconds(10));
  if (s.ok()) s = compute.Spin(absl::Milliseconds(args.Int("hold-ms", 2000)));
  if (s.ok()) s = ring.Load(0, *client.model, 1, compute.stream());
  if (!s.ok()) Exit(s, report, &compute);
  report.Add("holding", "1");
  while (true) absl::SleepFor(absl::Seconds(1));
}
BLOCKSWAP_CHILD_ROLE("gpu-hold", RunGpuHold);

}  // namespace
}  // namespace blockswap::gpu_testing
