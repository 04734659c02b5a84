// blockswapctl: the admin CLI of blockswapd.
//
//   blockswapctl [--socket PATH] [--json] [--timeout SECONDS]
//                status|clients|models|residency|stats|health
//   blockswapctl register FILE --block-pattern REGEX [--select REGEX]
//                [--select-rank N] [--name NAME]      (prints the model id)
//   blockswapctl verify MODEL | evict MODEL
//   blockswapctl plan --blocks N --swap S [--ring B] --script STEP,STEP,...
//                [--trace] [--block-bytes BYTES [--bandwidth GB/S]]
//   blockswapctl trace [--seconds N] --out run.json [--png run.png]
//                (Chrome trace-event JSON of the next N seconds, or until
//                SIGINT/SIGTERM; tools/blockswapctl/trace_json.h)
//
// Readable tables by default; --json prints one JSON document per command
// (tools/blockswapctl/admin_format.h says what is stable in it). `health` is what probes
// run: exit 0 and "ok" when the daemon answers and every device is healthy,
// exit 1 with the reason otherwise.
//
// `plan` never talks to a daemon: it runs the client's StreamScheduler on a
// recording driver and prints what it would do (Plan below).
//
// Exit codes: 0 success, 1 a failed call or an unhealthy daemon, 2 a usage
// error.
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.grpc.pb.h"
#include "tools/blockswapctl/admin_format.h"
#include "client/core/connection.h"
#include "client/core/file_model.h"
#include "client/scheduler/stream_scheduler.h"
#include "tools/blockswapctl/trace_json.h"
#include "shared/protocol/trace_log.h"
#include "shared/protocol/grpc_status.h"

namespace blockswap::client {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
// The daemon sends replies of up to 64 MiB (residency and statistics of a
// busy node can pass gRPC's 4 MiB default).
constexpr int kMaxMessageBytes = 64 << 20;

struct Options {
  std::string socket_path = kDefaultSocketPath;
  bool json = false;
  double timeout_seconds = 10;
};

class AdminCaller {
 public:
  explicit AdminCaller(const Options& options) : options_(options) {
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("unix:", options.socket_path),
                                         grpc::InsecureChannelCredentials(), arguments);
    stub_ = v1::Admin::NewStub(channel_);
  }

  // grpc.health.v1.Health/Check for the whole server (service ""): whether
  // the daemon is SERVING. Called through the generic stub with the two
  // messages written out (request: empty; reply: field 1, the enum), so that
  // the health proto need not be compiled into the client.
  absl::StatusOr<bool> Serving() {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(options_.timeout_seconds)));
    grpc::CompletionQueue queue;
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1);
    auto call = stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &queue);
    call->StartCall();
    grpc::ByteBuffer reply;
    grpc::Status status;
    call->Finish(&reply, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    queue.Next(&tag, &ok);
    queue.Shutdown();
    while (queue.Next(&tag, &ok)) {
    }
    if (!status.ok()) return FromGrpcStatus(status);
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (reply.Dump(&slices).ok()) {
      for (const grpc::Slice& slice : slices) {
        bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
      }
    }
    constexpr char kServing[] = {0x08, 0x01};  // status = SERVING
    return bytes == std::string(kServing, 2);
  }

  // Calls one unary Admin method with the per-call deadline. Not waiting for
  // the channel to become ready is deliberate: with no daemon the call fails
  // at once (UNAVAILABLE) instead of after the deadline.
  template <typename Request, typename Reply>
  absl::StatusOr<Reply> Call(grpc::Status (v1::Admin::Stub::*method)(grpc::ClientContext*,
                                                                     const Request&, Reply*),
                             const Request& request = Request()) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(options_.timeout_seconds)));
    Reply reply;
    grpc::Status status = ((*stub_).*method)(&context, request, &reply);
    if (!status.ok()) return FromGrpcStatus(status);
    return reply;
  }

 private:
  const Options& options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

void PrintJson(const nlohmann::json& document) { std::cout << DumpJson(document) << "\n"; }

// Runs one reporting command: call, then print the table or the document.
template <typename Request, typename Reply>
int Report(const Options& options, const std::string& command,
           grpc::Status (v1::Admin::Stub::*method)(grpc::ClientContext*, const Request&, Reply*),
           std::string (*text)(const Reply&), nlohmann::json (*to_json)(const Reply&)) {
  AdminCaller caller(options);
  absl::StatusOr<Reply> reply = caller.Call(method);
  if (!reply.ok()) {
    std::cerr << "blockswapctl: " << command << ": "
              << DescribeCallFailure(options.socket_path, reply.status()) << "\n";
    return kExitFailure;
  }
  if (options.json) {
    PrintJson(to_json(*reply));
  } else {
    std::cout << text(*reply);
  }
  return 0;
}

// `stats --watch S`: the table redrawn in place every S seconds (cursor home,
// clear to the end of the screen) until interrupted or a call fails.
int WatchStats(const Options& options, double seconds) {
  AdminCaller caller(options);
  while (true) {
    absl::StatusOr<v1::StatsReply> reply = caller.Call(&v1::Admin::Stub::Stats);
    if (!reply.ok()) {
      std::cerr << "blockswapctl: stats: "
                << DescribeCallFailure(options.socket_path, reply.status()) << "\n";
      return kExitFailure;
    }
    std::cout << "\033[H\033[J"
              << "blockswapctl stats --watch " << seconds << "  "
              << absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()) << "\n\n";
    if (options.json) {
      PrintJson(StatsJson(*reply));
    } else {
      std::cout << StatsText(*reply);
    }
    std::cout << std::flush;
    absl::SleepFor(absl::Seconds(seconds));
  }
}

int Health(const Options& options) {
  AdminCaller caller(options);
  absl::StatusOr<v1::StatusReply> reply = caller.Call(&v1::Admin::Stub::Status);
  HealthVerdict verdict =
      reply.ok()
          ? JudgeHealth(*reply)
          : HealthVerdict{.healthy = false,
                          .reason = DescribeCallFailure(options.socket_path, reply.status())};
  if (verdict.healthy) {
    // The standard gRPC health service turns NOT_SERVING once a drain begins.
    absl::StatusOr<bool> serving = caller.Serving();
    if (!serving.ok()) {
      verdict = {
          .healthy = false,
          .reason = absl::StrCat("gRPC health check: ",
                                 DescribeCallFailure(options.socket_path, serving.status()))};
    } else if (!*serving) {
      verdict = {.healthy = false,
                 .reason = "blockswapd is not serving (gRPC health: shutting down)"};
    }
  }
  if (options.json) {
    // The document goes to stdout either way: a machine reads one place.
    PrintJson(HealthJson(options.socket_path, verdict, reply.ok() ? &*reply : nullptr));
  } else if (verdict.healthy) {
    std::cout << "ok\n";
  } else {
    std::cerr << "blockswapctl: health: " << verdict.reason << "\n";
  }
  return verdict.healthy ? 0 : kExitFailure;
}

// --- plan ------------------------------------------------------------------------------

struct PlanOptions {
  uint32_t blocks = 0;
  uint32_t swap = 0;
  uint32_t ring = 2;  // the reference's default ring
  std::string script;
  bool trace = false;
  uint64_t block_bytes = 0;   // 0: not given
  double bandwidth_gbps = 0;  // 0: not given
};

enum class PlanStep { kPrepare, kForward, kBackward, kTrain, kInfer };

absl::StatusOr<std::vector<PlanStep>> ParseScript(absl::string_view script) {
  std::vector<PlanStep> steps;
  for (absl::string_view word : absl::StrSplit(script, ',')) {
    if (word == "prepare") {
      steps.push_back(PlanStep::kPrepare);
    } else if (word == "fwd") {
      steps.push_back(PlanStep::kForward);
    } else if (word == "bwd") {
      steps.push_back(PlanStep::kBackward);
    } else if (word == "train") {
      steps.push_back(PlanStep::kTrain);
    } else if (word == "infer") {
      steps.push_back(PlanStep::kInfer);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown script step '", word, "' (prepare, fwd, bwd, train or infer)"));
    }
  }
  return steps;
}

// What one script step (a pass) or one training step did.
struct PlanCounts {
  uint64_t loads = 0;
  uint64_t rebinds = 0;
  uint64_t self_heals = 0;

  void Add(const PlanCounts& other) {
    loads += other.loads;
    rebinds += other.rebinds;
    self_heals += other.self_heals;
  }
};

std::string CountsText(const PlanOptions& options, const PlanCounts& counts) {
  std::string text = absl::StrCat("loads=", counts.loads, " rebinds=", counts.rebinds,
                                  " self-heals=", counts.self_heals);
  if (options.block_bytes > 0) {
    const double bytes = static_cast<double>(counts.loads) * options.block_bytes;
    absl::StrAppend(&text, " bytes=", counts.loads * options.block_bytes);
    if (options.bandwidth_gbps > 0) {
      absl::StrAppend(&text,
                      absl::StrFormat(" copy=%.3fms", bytes / (options.bandwidth_gbps * 1e6)));
    }
  }
  return text;
}

// Runs the script through the very StreamScheduler trainers use, on a
// driver that only records. --trace prints every load and rebind (the
// format of the reference's ground-truth traces); otherwise a summary: each
// pass, then each training step — a forward pass with the prepare before it
// and the backward after it.
int Plan(const Options& options, const PlanOptions& plan) {
  if (options.json) {
    std::cerr << "blockswapctl: plan: prints text only (drop --json)\n";
    return kExitUsage;
  }
  if (plan.bandwidth_gbps > 0 && plan.block_bytes == 0) {
    std::cerr << "blockswapctl: plan: --bandwidth needs --block-bytes\n";
    return kExitUsage;
  }
  absl::StatusOr<std::vector<PlanStep>> steps = ParseScript(plan.script);
  if (!steps.ok()) {
    std::cerr << "blockswapctl: plan: " << steps.status().message() << "\n";
    return kExitUsage;
  }
  // The ring is clamped to S, and the driver must serve every slot the
  // scheduler may use, so size it from the same placement.
  absl::StatusOr<Placement> placement = PlaceBlocks(plan.blocks, plan.swap, plan.ring);
  if (!placement.ok()) {
    std::cerr << "blockswapctl: plan: " << placement.status().message() << "\n";
    return kExitUsage;
  }

  PlanCounts pass;
  RecordingSlotDriver driver(placement->ring_slots);
  SchedulerCallbacks callbacks;
  callbacks.on_bind = [&](const SlotEvent& event) {
    if (plan.trace) std::cout << TraceLine(event) << "\n";
    if (event.action == SlotEvent::Action::kRebind) {
      ++pass.rebinds;
    } else {
      ++pass.loads;
      pass.self_heals += event.self_heal;
    }
  };
  // As in the reference, a script starts in training mode.
  absl::StatusOr<std::unique_ptr<StreamScheduler>> scheduler = StreamScheduler::Create(
      {.num_blocks = plan.blocks, .blocks_to_swap = plan.swap, .ring_size = plan.ring}, driver,
      std::move(callbacks));
  if (!scheduler.ok()) {
    std::cerr << "blockswapctl: plan: " << scheduler.status().message() << "\n";
    return kExitUsage;
  }
  StreamScheduler& s = **scheduler;
  std::cout << "placement streaming=[" << absl::StrJoin(placement->streaming, ",") << "] resident=["
            << absl::StrJoin(placement->resident, ",") << "] ring=" << placement->ring_slots
            << "\n";

  std::vector<PlanCounts> training_steps;
  bool step_has_forward = false;
  PlanCounts total;
  for (PlanStep step : *steps) {
    // A prepare or forward pass after a forward pass begins the next training step.
    if (training_steps.empty() ||
        ((step == PlanStep::kPrepare || step == PlanStep::kForward) && step_has_forward)) {
      training_steps.emplace_back();
      step_has_forward = false;
    }
    pass = {};
    absl::Status status;
    absl::string_view name;
    switch (step) {
      case PlanStep::kTrain:
      case PlanStep::kInfer:
        s.SetForwardOnly(step == PlanStep::kInfer);
        continue;
      case PlanStep::kPrepare:
        name = "prepare";
        status = s.Prepare();
        break;
      case PlanStep::kForward:
        name = "fwd";
        step_has_forward = true;
        for (uint32_t block = 0; block < plan.blocks && status.ok(); ++block) {
          status = s.WaitForBlock(block);
          if (status.ok()) status = s.AfterForward(block);
        }
        break;
      case PlanStep::kBackward:
        // Every block takes part, and each one's hook runs right after its
        // own backward.
        name = "bwd";
        for (uint32_t block = plan.blocks; block-- > 0 && status.ok();) {
          status = s.AfterBackward(block);
        }
        break;
    }
    if (!status.ok()) {
      std::cerr << "blockswapctl: plan: " << name << ": " << status.message() << "\n";
      return kExitFailure;
    }
    training_steps.back().Add(pass);
    total.Add(pass);
    if (!plan.trace) std::cout << name << " " << CountsText(plan, pass) << "\n";
  }
  if (plan.trace) return 0;
  for (size_t i = 0; i < training_steps.size(); ++i) {
    std::cout << "step " << i + 1 << " " << CountsText(plan, training_steps[i]) << "\n";
  }
  std::cout << "total " << CountsText(plan, total) << " steps=" << training_steps.size() << "\n";
  return 0;
}

// `blockswapctl register`: this process opens the file and offers it to the
// daemon (which reads only what its client can), then detaches; the model
// stays registered, unreferenced, until its room is needed or it is evicted.
int Register(const Options& options, const std::string& file,
             const FileRegistrationOptions& registration) {
  auto fail = [&](const absl::Status& status) {
    std::cerr << "blockswapctl: register: " << DescribeCallFailure(options.socket_path, status)
              << "\n";
    return kExitFailure;
  };
  auto connection = Connection::Connect(options.socket_path, "blockswapctl register");
  if (!connection.ok()) return fail(connection.status());
  auto registered = RegisterFile(**connection, file, registration);
  if (!registered.ok()) return fail(registered.status());
  const Model& model = *registered->model;
  uint64_t bytes = 0;
  for (const BlockSpec& block : model.layout().blocks) bytes += block.bytes;
  if (options.json) {
    PrintJson({{"model_id", model.id()},
               {"extras_model_id",
                registered->extras ? nlohmann::json(registered->extras->id()) : nlohmann::json()},
               {"block_count", model.block_count()},
               {"bytes", bytes},
               {"read_file", registered->read_file}});
  } else {
    std::cout << model.id() << "\n";
    std::cerr << "blockswapctl: " << model.block_count() << " blocks, " << bytes << " bytes"
              << (registered->read_file ? ", read from the file" : ", known already");
    if (registered->extras) std::cerr << "; extras model " << registered->extras->id();
    std::cerr << "\n";
  }
  return 0;
}

int Verify(const Options& options, const std::string& model_id) {
  AdminCaller caller(options);
  v1::VerifyModelRequest request;
  request.set_model_id(model_id);
  auto reply = caller.Call(&v1::Admin::Stub::VerifyModel, request);
  if (!reply.ok()) {
    std::cerr << "blockswapctl: verify: " << DescribeCallFailure(options.socket_path, reply.status())
              << "\n";
    return kExitFailure;
  }
  if (options.json) {
    PrintJson({{"model_id", model_id}, {"blocks", reply->blocks()}, {"bytes", reply->bytes()}});
  } else {
    std::cout << "ok: " << reply->blocks() << " blocks (" << reply->bytes()
              << " bytes) match their hashes\n";
  }
  return 0;
}

int Evict(const Options& options, const std::string& model_id) {
  AdminCaller caller(options);
  v1::EvictModelRequest request;
  request.set_model_id(model_id);
  auto reply = caller.Call(&v1::Admin::Stub::EvictModel, request);
  if (!reply.ok()) {
    std::cerr << "blockswapctl: evict: " << DescribeCallFailure(options.socket_path, reply.status())
              << "\n";
    return kExitFailure;
  }
  if (!options.json) std::cout << "evicted " << model_id << "\n";
  if (options.json) PrintJson({{"model_id", model_id}, {"evicted", true}});
  return 0;
}

struct TraceOptions {
  double seconds = 5;
  std::string out;
  std::string png;
};

// The PNG drawing script: share/blockswap/trace_png.py beside bin/ — the
// same layout in the build tree (CMake copies it) and the install tree.
std::string TracePngScript() {
  char self[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) return "trace_png.py";
  std::string path(self, static_cast<size_t>(length));
  std::string bin_dir = path.substr(0, path.rfind('/'));
  return absl::StrCat(bin_dir, "/../share/blockswap/trace_png.py");
}

// The Python that draws: $BLOCKSWAP_PYTHON, else the system's python3 (where
// Debian's python3-matplotlib lives), else python3 on PATH.
std::string TracePython() {
  if (const char* python = std::getenv("BLOCKSWAP_PYTHON"); python != nullptr && *python) {
    return python;
  }
  if (::access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

// Runs the drawing script; its own messages go to stderr. Returns its status.
int DrawTracePng(const std::string& json_path, const std::string& png_path) {
  const std::string script = TracePngScript();
  const std::string python = TracePython();
  if (::access(script.c_str(), R_OK) != 0) {
    std::cerr << "blockswapctl: trace: --png: the drawing script " << script
              << " is missing (" << std::strerror(errno) << ")\n";
    return kExitFailure;
  }
  pid_t child = ::fork();
  if (child < 0) {
    std::cerr << "blockswapctl: trace: --png: fork: " << std::strerror(errno) << "\n";
    return kExitFailure;
  }
  if (child == 0) {
    const char* args[] = {python.c_str(), script.c_str(), json_path.c_str(), png_path.c_str(),
                          nullptr};
    ::execvp(args[0], const_cast<char* const*>(args));
    std::cerr << "blockswapctl: trace: --png needs python3 with matplotlib; cannot run "
              << python << ": " << std::strerror(errno) << "\n";
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  std::cerr << "blockswapctl: trace: --png: " << python << " " << script << " failed ("
            << (WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status))
                                  : absl::StrCat("signal ", WTERMSIG(status)))
            << "); " << png_path << " not written\n";
  return kExitFailure;
}

int Trace(const Options& options, const TraceOptions& trace) {
  // Blocked before gRPC starts its threads (they inherit the mask), so that
  // only the sigtimedwait below takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  AdminCaller caller(options);
  // The window starts now, on the clock every process of the host shares.
  v1::TraceRequest request;
  request.set_since_ns(MonotonicNanos());
  // Fail at once when no daemon answers, not after the window.
  if (absl::StatusOr<v1::StatusReply> probe = caller.Call(&v1::Admin::Stub::Status); !probe.ok()) {
    std::cerr << "blockswapctl: trace: " << DescribeCallFailure(options.socket_path, probe.status())
              << "\n";
    return kExitFailure;
  }
  std::cerr << "blockswapctl: trace: recording for " << trace.seconds
            << " s (SIGINT or SIGTERM ends the window early)" << std::endl;
  // The window: --seconds, or until SIGINT/SIGTERM (Ctrl-C), whichever comes
  // first; the trace is written either way.
  const absl::Time window_end = absl::Now() + absl::Seconds(trace.seconds);
  for (absl::Duration left = window_end - absl::Now(); left > absl::ZeroDuration();
       left = window_end - absl::Now()) {
    timespec timeout = absl::ToTimespec(left);
    if (::sigtimedwait(&stop_signals, nullptr, &timeout) >= 0) break;  // a stop signal
  }
  absl::StatusOr<v1::TraceReply> reply = caller.Call(&v1::Admin::Stub::Trace, request);
  if (!reply.ok()) {
    std::cerr << "blockswapctl: trace: " << DescribeCallFailure(options.socket_path, reply.status())
              << "\n";
    return kExitFailure;
  }
  nlohmann::json document = TraceToChromeJson(*reply, request.since_ns());
  {
    std::ofstream out(trace.out, std::ios::trunc);
    out << document.dump() << "\n";
    out.close();
    if (!out) {
      std::cerr << "blockswapctl: trace: cannot write " << trace.out << "\n";
      return kExitFailure;
    }
  }
  if (std::string lost = TraceLossReport(*reply); !lost.empty()) {
    std::cerr << "blockswapctl: trace: the bounded trace rings lost events of this window "
                 "(use a shorter --seconds):\n"
              << lost;
  }
  size_t spans = 0;
  for (const auto& event : document["traceEvents"]) spans += event["ph"] == "X" ? 1 : 0;
  std::cerr << "blockswapctl: trace: " << reply->clients_size() << " clients, " << spans
            << " spans over "
            << absl::StrFormat("%.1f", (reply->now_ns() - request.since_ns()) / 1e9) << " s -> "
            << trace.out << "\n";
  if (!trace.png.empty()) {
    if (int drawn = DrawTracePng(trace.out, trace.png); drawn != 0) return drawn;
    std::cerr << "blockswapctl: trace: timeline -> " << trace.png << "\n";
  }
  return 0;
}

int Main(int argc, char** argv) {
  Options options;
  CLI::App app{"blockswapctl: status, clients, models, residency and statistics of blockswapd"};
  app.add_option("--socket", options.socket_path, "blockswapd's control socket")
      ->capture_default_str();
  app.add_flag("--json", options.json, "print one JSON document instead of tables");
  app.add_option("--timeout", options.timeout_seconds, "seconds each call may take")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // The global options may also follow the command (`blockswapctl status --json`).
  app.fallthrough();
  app.require_subcommand(1, 1);
  app.add_subcommand("status", "version, backend, uptime, pinned bytes and devices");
  app.add_subcommand("clients", "attached sessions");
  app.add_subcommand("models", "registered models");
  app.add_subcommand("residency", "which block is in which slot of every ring");
  CLI::App* stats_command =
      app.add_subcommand("stats", "transfer statistics per device and per client");
  double watch_seconds = 0;
  stats_command
      ->add_option("--watch", watch_seconds,
                   "refresh in place every S seconds, like top, until interrupted")
      ->expected(0, 1)
      ->default_str("2")
      ->check(CLI::PositiveNumber);
  app.add_subcommand("health", "exit 0 and print ok when blockswapd answers and no device failed");
  std::string file;
  std::string model_id;
  FileRegistrationOptions registration;
  CLI::App* register_command = app.add_subcommand(
      "register", "register a model from a safetensors file (or *.index.json); prints its id");
  register_command->add_option("FILE", file, "the .safetensors file or index JSON")->required();
  register_command
      ->add_option("--block-pattern", registration.block_pattern,
                   "regex with one capture group, the block index, e.g. "
                   "'^transformer_blocks\\.(\\d+)\\.'")
      ->required();
  register_command->add_option("--select", registration.select,
                               "regex of the tensors of a block to stream (default: all)");
  register_command->add_option("--select-rank", registration.select_rank,
                               "stream only tensors of this many dimensions (default: any)");
  register_command->add_option("--name", registration.name, "informational model name");
  for (const char* name : {"verify", "evict"}) {
    app.add_subcommand(name, std::string(name) == "verify"
                                 ? "re-hash a model's masters against its manifest"
                                 : "remove a model no session holds")
        ->add_option("MODEL", model_id, "the model id (64 hex digits)")
        ->required();
  }
  PlanOptions plan;
  CLI::App* plan_command = app.add_subcommand(
      "plan", "offline: the schedule of loads the client's StreamScheduler would run");
  plan_command->add_option("--blocks", plan.blocks, "transformer blocks (N)")->required();
  plan_command->add_option("--swap", plan.swap, "blocks to stream (S); 0 streams none")->required();
  plan_command->add_option("--ring", plan.ring, "ring slots (B), clamped to S")
      ->capture_default_str();
  plan_command
      ->add_option("--script", plan.script,
                   "comma-separated steps: prepare, fwd, bwd, and train/infer (switch "
                   "forward-only mode off/on; the script starts in training)")
      ->required();
  plan_command->add_flag("--trace", plan.trace, "one line per load and rebind");
  plan_command->add_option("--block-bytes", plan.block_bytes, "bytes of one streamed block")
      ->check(CLI::PositiveNumber);
  plan_command->add_option("--bandwidth", plan.bandwidth_gbps, "host-to-device GB/s (1e9 B/s)")
      ->check(CLI::PositiveNumber);
  TraceOptions trace;
  CLI::App* trace_command = app.add_subcommand(
      "trace", "record the next N seconds of loads as Chrome trace-event JSON (Perfetto)");
  trace_command->add_option("--seconds", trace.seconds, "length of the window")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  trace_command->add_option("--out", trace.out, "the trace-event JSON to write")->required();
  trace_command->add_option("--png", trace.png,
                            "also draw a per-client timeline of copies and stalls (matplotlib)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // CLI11 reports an unknown command as "A subcommand is required"; name
    // the word it did not know instead.
    if (app.get_subcommands().empty() && app.remaining_size() > 0) {
      std::cerr << "blockswapctl: unknown command '" << app.remaining().front()
                << "' (status, clients, models, residency, stats, health, register, verify, evict, plan or trace)\n";
      return kExitUsage;
    }
    // CLI11 prints the message (or the help) and returns its own codes
    // (106, 109, ...); blockswapctl's contract is 2 for any usage error.
    int code = app.exit(error);
    return code == 0 ? 0 : kExitUsage;
  }

  const std::string command = app.get_subcommands().front()->get_name();
  if (command == "plan") return Plan(options, plan);
  if (command == "trace") return Trace(options, trace);
  if (command == "register") return Register(options, file, registration);
  if (command == "verify") return Verify(options, model_id);
  if (command == "evict") return Evict(options, model_id);
  if (command == "status") {
    return Report(options, command, &v1::Admin::Stub::Status, &StatusText, &StatusJson);
  }
  if (command == "clients") {
    return Report(options, command, &v1::Admin::Stub::Clients, &ClientsText, &ClientsJson);
  }
  if (command == "models") {
    return Report(options, command, &v1::Admin::Stub::Models, &ModelsText, &ModelsJson);
  }
  if (command == "residency") {
    return Report(options, command, &v1::Admin::Stub::Residency, &ResidencyText, &ResidencyJson);
  }
  if (command == "stats") {
    if (watch_seconds > 0) return WatchStats(options, watch_seconds);
    return Report(options, command, &v1::Admin::Stub::Stats, &StatsText, &StatsJson);
  }
  return Health(options);
}

}  // namespace
}  // namespace blockswap::client

int main(int argc, char** argv) { return blockswap::client::Main(argc, argv); }
