// blockswapctl end to end: the real blockswapd (host backend) on a private
// socket and master directory, the real blockswapctl binary run against it,
// exit codes and output checked. Both binaries are built beside this one
// (build/bin).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "client/core/ring.h"
#include "shared/base/unique_fd.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/read_file.h"
#include "tests/support/safetensors_writer.h"

namespace blockswap::ctl {
namespace {

using ::blockswap::testing::BinaryDirectory;
using ::blockswap::testing::ChildProcess;
using ::blockswap::testing::DaemonProcess;
using ::blockswap::testing::ScratchDirs;

constexpr absl::Duration kDaemonStartTimeout = absl::Seconds(10);
constexpr absl::Duration kCommandTimeout = absl::Seconds(30);
constexpr absl::Duration kDaemonStopTimeout = absl::Seconds(20);

::testing::AssertionResult Contains(const std::string& text, const std::string& needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << needle << "' not in:\n" << text;
}

using ::blockswap::testing::ReadFile;

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::ostream& operator<<(std::ostream& os, const CommandResult& result) {
  return os << "exit " << result.exit_code << "\n--- stdout\n"
            << result.out << "--- stderr\n"
            << result.err << "---";
}

// Runs `program` with `args`, capturing stdout and stderr through pipes
// (read together with poll, so neither can fill and stall the child). A child
// still running after `timeout` is killed (ChildProcess kills and reaps on
// every path).
absl::StatusOr<CommandResult> RunProgram(const std::string& program,
                                         const std::vector<std::string>& args,
                                         absl::Duration timeout,
                                         std::map<std::string, std::string> env = {}) {
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);

  absl::StatusOr<ChildProcess> child =
      ChildProcess::SpawnProgram(program, {.args = args,
                                           .inherit = {{out_write.get(), 1}, {err_write.get(), 2}},
                                           .env = std::move(env)});
  if (!child.ok()) return child.status();
  // Only the child may hold the write ends, or EOF never comes.
  out_write.Reset();
  err_write.Reset();

  CommandResult result;
  const absl::Time deadline = absl::Now() + timeout;
  pollfd fds[2] = {{out_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_streams = 2;
  while (open_streams > 0) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) break;
    int ready = ::poll(fds, 2, static_cast<int>(left_ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;  // poll ignores negative descriptors
        --open_streams;
      }
    }
  }
  absl::StatusOr<int> exit_code =
      child->Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!exit_code.ok()) return exit_code.status();
  result.exit_code = *exit_code;
  return result;
}

class BlockswapctlTest : public ::testing::Test {
 protected:
  // The shared ScratchDirs and DaemonProcess (tests/support): a private
  // socket and master directory, the daemon's output in a log beside the
  // socket; Start returns once the daemon accepts connections.
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ScratchDirs>> dirs = ScratchDirs::Create();
    ASSERT_TRUE(dirs.ok()) << dirs.status();
    dirs_ = *std::move(dirs);
    socket_path_ = dirs_->socket_path();
    log_path_ = dirs_->temp_dir() + "/blockswapd.log";
    testing::DaemonFlags flags;
    flags.output_path = log_path_;
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(*dirs_, flags);
    ASSERT_TRUE(daemon.ok()) << daemon.status() << "\n" << ReadFile(log_path_);
    daemon_ = *std::move(daemon);

    // Serving, and the daemon has said so (it logs after it starts listening).
    const absl::Time until = absl::Now() + kDaemonStartTimeout;
    for (;; absl::SleepFor(absl::Milliseconds(20))) {
      if (Contains(ReadFile(log_path_), "ready on " + socket_path_)) break;
      ASSERT_LT(absl::Now(), until)
          << "blockswapd not ready on " << socket_path_ << " within 10 s:\n"
          << ReadFile(log_path_);
    }
  }

  void TearDown() override {
    if (daemon_ != nullptr) {
      std::optional<int> exit_code = StopDaemon();
      EXPECT_EQ(exit_code, 0) << "blockswapd log:\n" << ReadFile(log_path_);
    }
  }

  // SIGTERM, then the daemon's exit code (nullopt when it did not exit in
  // time and was killed).
  std::optional<int> StopDaemon() {
    absl::StatusOr<int> exit_code = daemon_->Stop(SIGTERM, kDaemonStopTimeout);
    daemon_.reset();
    if (!exit_code.ok()) {
      ADD_FAILURE() << exit_code.status();
      return std::nullopt;
    }
    return *exit_code;
  }

  // blockswapctl --socket <the daemon's socket> ARGS...
  CommandResult Ctl(std::vector<std::string> args) { return CtlOn(socket_path_, std::move(args)); }

  CommandResult CtlOn(const std::string& socket_path, std::vector<std::string> args) {
    args.insert(args.begin(), {"--socket", socket_path});
    absl::StatusOr<CommandResult> result =
        RunProgram(BinaryDirectory() + "/blockswapctl", args, kCommandTimeout);
    if (!result.ok()) {
      ADD_FAILURE() << "running blockswapctl: " << result.status();
      return {};
    }
    return *std::move(result);
  }

  // blockswapctl ARGS... with `env` added to its environment and no --socket.
  CommandResult CtlWithEnvironment(std::vector<std::string> args,
                                   std::map<std::string, std::string> env) {
    absl::StatusOr<CommandResult> result =
        RunProgram(BinaryDirectory() + "/blockswapctl", args, kCommandTimeout, std::move(env));
    if (!result.ok()) {
      ADD_FAILURE() << "running blockswapctl: " << result.status();
      return {};
    }
    return *std::move(result);
  }

  // The stdout of a command that must succeed, parsed as JSON (null on any
  // failure, which is reported).
  nlohmann::json CtlJson(std::vector<std::string> args) {
    args.push_back("--json");
    CommandResult result = Ctl(args);
    EXPECT_EQ(result.exit_code, 0) << result;
    nlohmann::json json = nlohmann::json::parse(result.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(json.is_discarded()) << "not one JSON document:\n" << result;
    return json.is_discarded() ? nlohmann::json() : json;
  }

  // Members are destroyed in reverse: the daemon is gone before its
  // directories are removed.
  std::unique_ptr<ScratchDirs> dirs_;
  std::string socket_path_;
  std::string log_path_;
  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(BlockswapctlTest, StatusTableShowsTheHostBackendAndItsDevice) {
  CommandResult result = Ctl({"status"});
  ASSERT_EQ(result.exit_code, 0) << result;
  EXPECT_TRUE(Contains(result.out, "backend  host\n"));
  EXPECT_TRUE(Contains(result.out, "HOST-0"));
  EXPECT_TRUE(Contains(result.out, "version  "));
  EXPECT_TRUE(Contains(result.out, "boot id  "));
  EXPECT_TRUE(Contains(result.out, "HEALTH"));
  EXPECT_EQ(result.err, "");
}

// The proto's canonical JSON mapping: 64-bit integers as decimal strings,
// enums by name.
TEST_F(BlockswapctlTest, StatusJsonIsOneDocumentWithBackendHost) {
  nlohmann::json json = CtlJson({"status"});
  EXPECT_EQ(json["backend"], "BACKEND_HOST");
  EXPECT_TRUE(json["version"].is_string());
  uint64_t boot_id = 0;
  EXPECT_TRUE(absl::SimpleAtoi(json["boot_id"].get<std::string>(), &boot_id)) << json["boot_id"];
  EXPECT_NE(boot_id, 0u);
  EXPECT_TRUE(json["uptime_seconds"].is_number());
  EXPECT_TRUE(json["pinned_bytes"].is_string());
  ASSERT_EQ(json["devices"].size(), 1u);
  EXPECT_EQ(json["devices"][0]["uuid"], "HOST-0");
  EXPECT_EQ(json["devices"][0]["healthy"], true);
  EXPECT_TRUE(json["devices"][0]["total_memory_bytes"].is_string());
}

TEST_F(BlockswapctlTest, GlobalOptionsMayFollowTheCommand) {
  CommandResult result = Ctl({"status", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result;
  EXPECT_EQ(nlohmann::json::parse(result.out)["backend"], "BACKEND_HOST");
}

TEST_F(BlockswapctlTest, HealthPrintsOkAndExitsZero) {
  CommandResult result = Ctl({"health"});
  EXPECT_EQ(result.exit_code, 0) << result;
  EXPECT_EQ(result.out, "ok\n");
  EXPECT_EQ(result.err, "");

  nlohmann::json json = CtlJson({"health"});
  EXPECT_EQ(json["healthy"], true);
  EXPECT_EQ(json["reason"], "");
  EXPECT_EQ(json["socket"], socket_path_);
  EXPECT_EQ(json["status"]["backend"], "BACKEND_HOST");
}

TEST_F(BlockswapctlTest, HealthWithoutADaemonExitsOneNamingTheSocket) {
  const std::string nowhere = dirs_->temp_dir() + "/no-daemon.sock";
  CommandResult result = CtlOn(nowhere, {"health"});
  EXPECT_EQ(result.exit_code, 1) << result;
  EXPECT_EQ(result.out, "");
  EXPECT_TRUE(
      Contains(result.err, "blockswapctl: health: blockswapd is unreachable at " + nowhere));
  // One line, for a probe's log.
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << result;

  result = CtlOn(nowhere, {"--json", "health"});
  EXPECT_EQ(result.exit_code, 1) << result;
  nlohmann::json json = nlohmann::json::parse(result.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << result;
  EXPECT_EQ(json["healthy"], false);
  EXPECT_TRUE(Contains(json["reason"].get<std::string>(), nowhere));
  EXPECT_TRUE(json["status"].is_null());
}

TEST_F(BlockswapctlTest, AFailedCallNamesTheCommandAndExitsOne) {
  const std::string nowhere = dirs_->temp_dir() + "/no-daemon.sock";
  for (const char* command : {"status", "clients", "models", "residency", "stats"}) {
    CommandResult result = CtlOn(nowhere, {command});
    EXPECT_EQ(result.exit_code, 1) << command << ": " << result;
    EXPECT_EQ(result.out, "") << command;
    EXPECT_EQ(result.err.rfind(absl::StrCat("blockswapctl: ", command, ": "), 0), 0u) << result;
    EXPECT_TRUE(Contains(result.err, nowhere));
  }
}

TEST_F(BlockswapctlTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Ctl({}).exit_code, 2);
  CommandResult unknown = Ctl({"frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown;
  EXPECT_TRUE(Contains(unknown.err, "frobnicate"));
  EXPECT_EQ(Ctl({"--no-such-flag", "status"}).exit_code, 2);
  EXPECT_EQ(Ctl({"status", "clients"}).exit_code, 2);
  EXPECT_EQ(Ctl({"--help"}).exit_code, 0);
}

TEST_F(BlockswapctlTest, TheSocketEnvironmentVariableNamesTheDaemon) {
  CommandResult result = CtlWithEnvironment({"health"}, {{"BLOCKSWAP_SOCKET", socket_path_}});
  EXPECT_EQ(result.exit_code, 0) << result;
  EXPECT_EQ(result.out, "ok\n");
}

TEST_F(BlockswapctlTest, TheSocketFlagBeatsTheEnvironmentVariable) {
  const std::string nowhere = dirs_->temp_dir() + "/no-daemon.sock";
  CommandResult flag_wins =
      CtlWithEnvironment({"--socket", socket_path_, "health"}, {{"BLOCKSWAP_SOCKET", nowhere}});
  EXPECT_EQ(flag_wins.exit_code, 0) << flag_wins;

  CommandResult flag_to_nowhere =
      CtlWithEnvironment({"--socket", nowhere, "health"}, {{"BLOCKSWAP_SOCKET", socket_path_}});
  EXPECT_EQ(flag_to_nowhere.exit_code, 1) << flag_to_nowhere;
  EXPECT_TRUE(Contains(flag_to_nowhere.err, nowhere));
}

TEST_F(BlockswapctlTest, HelpPrintsTheToolsOrACommandsHelp) {
  CommandResult all = Ctl({"help"});
  EXPECT_EQ(all.exit_code, 0) << all;
  EXPECT_TRUE(Contains(all.out, "Usage: blockswapctl"));
  EXPECT_TRUE(Contains(all.out, "register"));
  EXPECT_TRUE(Contains(all.out, "trace"));

  CommandResult verify = Ctl({"help", "verify"});
  EXPECT_EQ(verify.exit_code, 0) << verify;
  EXPECT_TRUE(Contains(verify.out, "Usage: blockswapctl verify"));
  EXPECT_TRUE(Contains(verify.out, "MODEL"));
  EXPECT_FALSE(Contains(verify.out, "--block-pattern"));  // register's, not verify's
}

TEST_F(BlockswapctlTest, HelpOfAnUnknownCommandIsAUsageErrorNamingIt) {
  CommandResult result = Ctl({"help", "frobnicate"});
  EXPECT_EQ(result.exit_code, 2) << result;
  EXPECT_EQ(result.out, "");
  EXPECT_TRUE(Contains(result.err, "blockswapctl: help: unknown command 'frobnicate' (status,"));
}

TEST_F(BlockswapctlTest, JsonStatsWatchIntoAPipeIsOneDocumentPerLine) {
  int out_pipe[2];
  ASSERT_EQ(::pipe2(out_pipe, O_CLOEXEC), 0);
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  absl::StatusOr<ChildProcess> child = ChildProcess::SpawnProgram(
      BinaryDirectory() + "/blockswapctl",
      {.args = {"--socket", socket_path_, "--json", "stats", "--watch", "0.05"},
       .inherit = {{out_write.get(), 1}}});
  ASSERT_TRUE(child.ok()) << child.status();
  out_write.Reset();

  // Three records, then the watcher is stopped (the child's destructor reaps it).
  std::string out;
  const absl::Time deadline = absl::Now() + kCommandTimeout;
  while (std::count(out.begin(), out.end(), '\n') < 3 && absl::Now() < deadline) {
    pollfd fd = {out_read.get(), POLLIN, 0};
    if (::poll(&fd, 1, 100) <= 0) continue;
    char buffer[4096];
    ssize_t n = ::read(out_read.get(), buffer, sizeof(buffer));
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  child->Kill(SIGTERM);
  EXPECT_EQ(out.find('\033'), std::string::npos) << "an escape in:\n" << out;
  std::istringstream lines(out);
  std::string line;
  int documents = 0;
  while (documents < 3 && std::getline(lines, line)) {
    nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(json.is_discarded()) << "line " << documents << " is not a document:\n" << out;
    EXPECT_TRUE(json.contains("devices")) << line;
    ++documents;
  }
  EXPECT_EQ(documents, 3) << out;
}

TEST_F(BlockswapctlTest, AnIdleDaemonHasNoClientsModelsOrRings) {
  for (const auto& [command, says] :
       std::vector<std::pair<std::string, std::string>>{{"clients", "no clients attached\n"},
                                                        {"models", "no models registered\n"},
                                                        {"residency", "no rings\n"}}) {
    CommandResult result = Ctl({command});
    EXPECT_EQ(result.exit_code, 0) << result;
    EXPECT_EQ(result.out, says) << command;
  }
  CommandResult stats = Ctl({"stats"});
  EXPECT_EQ(stats.exit_code, 0) << stats;
  EXPECT_TRUE(Contains(stats.out, "HOST-0"));
  EXPECT_TRUE(Contains(stats.out, "no clients attached"));

  EXPECT_EQ(CtlJson({"clients"})["clients"], nlohmann::json::array());
  EXPECT_EQ(CtlJson({"models"})["models"], nlohmann::json::array());
  EXPECT_EQ(CtlJson({"residency"})["rings"], nlohmann::json::array());
  nlohmann::json json = CtlJson({"stats"});
  ASSERT_EQ(json["devices"].size(), 1u);
  EXPECT_EQ(json["devices"][0]["device_uuid"], "HOST-0");
  EXPECT_EQ(json["devices"][0]["loads"], "0");
  EXPECT_TRUE(json["devices"][0]["gb_per_second"].is_null());
  EXPECT_EQ(json["clients"], nlohmann::json::array());
}

// A real session (this process, through the client library) with a model, a
// ring holding one loaded block, and a reported pass: every command shows it.
TEST_F(BlockswapctlTest, ShowsAnAttachedClientItsModelRingAndStatistics) {
  absl::StatusOr<std::unique_ptr<client::Connection>> connection =
      client::Connection::Connect(socket_path_, "ctl-test-client");
  ASSERT_TRUE(connection.ok()) << connection.status();

  constexpr uint64_t kElements = 256;  // F32: 1 KiB per block
  std::vector<float> weights[2] = {std::vector<float>(kElements, 1.0f),
                                   std::vector<float>(kElements, 2.0f)};
  std::vector<std::vector<client::TensorUpload>> blocks;
  for (const auto& block : weights) {
    blocks.push_back({client::TensorUpload{
        .spec = {.name = "w", .dtype = "F32", .shape = {kElements}}, .data = block.data()}});
  }
  absl::StatusOr<std::unique_ptr<client::Model>> model =
      client::Model::Register(**connection, "ctl-test-model", blocks);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<client::Ring>> ring =
      client::Ring::Create(**connection, "HOST-0", /*slot_count=*/2, /*slot_bytes=*/kElements * 4);
  ASSERT_TRUE(ring.ok()) << ring.status();
  ASSERT_TRUE((*ring)->Load(0, **model, /*block=*/1, /*native_stream=*/nullptr).ok());
  absl::Status loaded = (*ring)->Wait(0, nullptr, absl::Seconds(10));
  ASSERT_TRUE(loaded.ok()) << loaded;

  v1::ReportStatsRequest report;
  report.set_session_token((*connection)->token());
  v1::PassStats* pass = report.add_passes();
  pass->set_direction("forward");
  pass->set_stall_seconds(0.25);
  pass->set_copy_seconds(0.5);
  pass->set_waits(7);
  pass->set_not_ready_waits(2);
  pass->set_self_heals(1);
  pass->set_loads(1);
  v1::ReportStatsReply reported;
  auto context = client::Connection::Context();
  grpc::Status sent = (*connection)->stub().ReportStats(context.get(), report, &reported);
  ASSERT_TRUE(sent.ok()) << sent.error_message();

  const std::string& id = (*model)->id();
  const std::string short_id = id.substr(0, 16) + "\xE2\x80\xA6";
  const std::string pid = absl::StrCat(::getpid());

  CommandResult clients = Ctl({"clients"});
  ASSERT_EQ(clients.exit_code, 0) << clients;
  EXPECT_TRUE(Contains(clients.out, "ctl-test-client"));
  EXPECT_TRUE(Contains(clients.out, "  " + pid + "  "));
  EXPECT_TRUE(Contains(clients.out, "HOST-0"));
  nlohmann::json clients_json = CtlJson({"clients"});
  ASSERT_EQ(clients_json["clients"].size(), 1u);
  EXPECT_EQ(clients_json["clients"][0]["client_name"], "ctl-test-client");
  EXPECT_EQ(clients_json["clients"][0]["pid"], ::getpid());
  EXPECT_EQ(clients_json["clients"][0]["ring_count"], 1);
  EXPECT_EQ(clients_json["clients"][0]["device_uuids"], nlohmann::json({"HOST-0"}));

  CommandResult models = Ctl({"models"});
  ASSERT_EQ(models.exit_code, 0) << models;
  EXPECT_TRUE(Contains(models.out, short_id + "  ctl-test-model  2 "));
  nlohmann::json models_json = CtlJson({"models"});
  ASSERT_EQ(models_json["models"].size(), 1u);
  EXPECT_EQ(models_json["models"][0]["model_id"], id);
  EXPECT_EQ(models_json["models"][0]["block_count"], 2);
  EXPECT_EQ(models_json["models"][0]["open_sessions"], 1);

  CommandResult residency = Ctl({"residency"});
  ASSERT_EQ(residency.exit_code, 0) << residency;
  EXPECT_TRUE(Contains(residency.out, short_id + "  1 "));  // slot 0 holds block 1
  nlohmann::json residency_json = CtlJson({"residency"});
  ASSERT_EQ(residency_json["rings"].size(), 1u);
  const nlohmann::json& slots = residency_json["rings"][0]["slots"];
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0]["model_id"], id);
  EXPECT_EQ(slots[0]["block"], 1);
  EXPECT_EQ(slots[0]["filled_seq"], 1);
  EXPECT_TRUE(slots[1]["model_id"].is_null());
  EXPECT_EQ(residency_json["rings"][0]["ring_id"], absl::StrCat((*ring)->id()));

  CommandResult stats = Ctl({"stats"});
  ASSERT_EQ(stats.exit_code, 0) << stats;
  EXPECT_TRUE(Contains(stats.out, "ctl-test-client"));
  EXPECT_TRUE(Contains(stats.out, "forward"));
  EXPECT_TRUE(Contains(stats.out, "0.250"));  // stall s of the reported pass
  nlohmann::json stats_json = CtlJson({"stats"});
  ASSERT_EQ(stats_json["devices"].size(), 1u);
  EXPECT_EQ(stats_json["devices"][0]["loads"], "1");
  EXPECT_EQ(stats_json["devices"][0]["rings"], 1);
  ASSERT_EQ(stats_json["clients"].size(), 1u);
  EXPECT_EQ(stats_json["clients"][0]["passes_reported"], 1);
  EXPECT_EQ(stats_json["clients"][0]["latest_passes"]["forward"]["waits"], "7");

  // Detach before the daemon is stopped, so that it need not wait for us.
  ring->reset();
  model->reset();
  connection->reset();
  // The session ends when the daemon has processed the detach.
  CommandResult detached;
  for (absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;
       absl::SleepFor(absl::Milliseconds(50))) {
    detached = Ctl({"clients"});
    if (detached.out == "no clients attached\n") break;
  }
  EXPECT_EQ(detached.out, "no clients attached\n") << detached;
}

TEST_F(BlockswapctlTest, DaemonExitsZeroOnSigterm) {
  ASSERT_EQ(Ctl({"health"}).exit_code, 0);
  EXPECT_EQ(StopDaemon(), 0) << ReadFile(log_path_);
  CommandResult after = Ctl({"health"});
  EXPECT_EQ(after.exit_code, 1) << after;
  EXPECT_TRUE(Contains(after.err, socket_path_));
}

// --- models from safetensors files ----------------------------------------------

constexpr char kBlockPattern[] = R"(^transformer_blocks\.(\d+)\.)";
constexpr char kWeights[] = R"(\.weight$)";
constexpr uint64_t kFileSeed = 5;

std::string WriteModelFile(const ScratchDirs& dirs, const std::string& name) {
  std::string path = dirs.temp_dir() + "/" + name;
  absl::Status written = blockswap::testing::WriteSafetensorsFile(
      path, blockswap::testing::TransformerTensors(4, 2, 16), kFileSeed);
  EXPECT_TRUE(written.ok()) << written;
  return path;
}

TEST_F(BlockswapctlTest, RegisterPrintsTheIdThatAnUploadOfTheSameBlocksGets) {
  std::string file = WriteModelFile(*dirs_, "model.safetensors");
  CommandResult registered =
      Ctl({"register", file, "--block-pattern", kBlockPattern, "--select", kWeights});
  ASSERT_EQ(registered.exit_code, 0) << registered;
  ASSERT_EQ(registered.out.size(), 65u) << registered;  // the id and a newline
  const std::string id = registered.out.substr(0, 64);
  EXPECT_TRUE(Contains(registered.err, "4 blocks"));

  // A client uploads the same blocks (the weights, packed in the layout's
  // order): the same model, nothing copied (it opens the model by its id).
  absl::StatusOr<std::unique_ptr<client::Connection>> connection =
      client::Connection::Connect(socket_path_, "uploader");
  ASSERT_TRUE(connection.ok()) << connection.status();
  std::vector<std::string> bytes;
  std::vector<std::vector<client::TensorUpload>> blocks(4);
  bytes.reserve(8);
  for (int b = 0; b < 4; ++b) {
    for (int w = 0; w < 2; ++w) {
      std::string full = absl::StrCat("transformer_blocks.", b, ".attn.w", w, ".weight");
      bytes.push_back(blockswap::testing::TensorContent(full, 16 * 64 * 4, kFileSeed));
      blocks[b].push_back(client::TensorUpload{
          .spec = {.name = absl::StrCat("attn.w", w, ".weight"), .dtype = "F32", .shape = {16, 64}},
          .data = bytes.back().data()});
    }
  }
  absl::StatusOr<std::unique_ptr<client::Model>> uploaded =
      client::Model::Register(**connection, "upload", blocks);
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_EQ((*uploaded)->id(), id);

  nlohmann::json models = CtlJson({"models"});
  ASSERT_EQ(models["models"].size(), 2u) << models;  // the blocks and the extras
  for (const nlohmann::json& model : models["models"]) {
    // The uploader hashed its blocks, found the model by id and opened it
    // (the warm path): nothing was uploaded or registered again.
    EXPECT_EQ(model["source"], "file " + file);
    EXPECT_EQ(model["pinned"], false);  // the host backend pins nothing
    if (model["model_id"] == id) {
      EXPECT_EQ(model["block_count"], 4);
      EXPECT_EQ(model["open_sessions"], 1);
      EXPECT_NE(model["references"], "0");
    }
  }
  CommandResult verified = Ctl({"verify", id});
  EXPECT_EQ(verified.exit_code, 0) << verified;
  EXPECT_TRUE(Contains(verified.out, "ok: 4 blocks"));

  CommandResult held = Ctl({"evict", id});
  EXPECT_EQ(held.exit_code, 1) << held;
  EXPECT_TRUE(Contains(held.err, "still referenced"));
  uploaded->reset();
  connection->reset();  // detaches: no session holds the model any more
  CommandResult evicted = Ctl({"evict", id});
  EXPECT_EQ(evicted.exit_code, 0) << evicted;
  models = CtlJson({"models"});
  ASSERT_EQ(models["models"].size(), 1u) << models;
  EXPECT_NE(models["models"][0]["model_id"], id);
  EXPECT_EQ(Ctl({"verify", id}).exit_code, 1);
}

TEST_F(BlockswapctlTest, VerifyAndEvictTakeAUniquePrefixOfAModelId) {
  std::string file = WriteModelFile(*dirs_, "model.safetensors");
  CommandResult registered =
      Ctl({"register", file, "--block-pattern", kBlockPattern, "--select", kWeights});
  ASSERT_EQ(registered.exit_code, 0) << registered;
  const std::string id = registered.out.substr(0, 64);
  nlohmann::json models = CtlJson({"models"});
  ASSERT_EQ(models["models"].size(), 2u) << models;  // the blocks and the extras
  std::string other;
  for (const nlohmann::json& model : models["models"]) {
    if (model["model_id"] != id) other = model["model_id"];
  }
  // The shortest prefix of `id` that `other` does not share.
  size_t unique = 1;
  while (id.substr(0, unique) == other.substr(0, unique)) ++unique;

  nlohmann::json verified = CtlJson({"verify", id.substr(0, unique)});
  EXPECT_EQ(verified["model_id"], id);
  EXPECT_EQ(verified["blocks"], 4);

  const std::string absent = other[0] == 'f' && id[0] != 'e' ? "e" : "f";
  if (id[0] != absent[0] && other[0] != absent[0]) {
    CommandResult none = Ctl({"verify", absent});
    EXPECT_EQ(none.exit_code, 1) << none;
    EXPECT_TRUE(Contains(none.err, "blockswapctl: verify: no model id starts with '" + absent));
  }
  CommandResult not_hex = Ctl({"evict", "xyz"});
  EXPECT_EQ(not_hex.exit_code, 1) << not_hex;
  EXPECT_TRUE(Contains(not_hex.err, "'xyz' is not a model id"));

  CommandResult evicted = Ctl({"evict", id.substr(0, unique)});
  EXPECT_EQ(evicted.exit_code, 0) << evicted;
  EXPECT_EQ(evicted.out, "evicted " + id + "\n");
  models = CtlJson({"models"});
  ASSERT_EQ(models["models"].size(), 1u) << models;
  EXPECT_EQ(models["models"][0]["model_id"], other);
}

TEST_F(BlockswapctlTest, EightConcurrentRegistrationsReadTheFileOnce) {
  std::string file = WriteModelFile(*dirs_, "shared.safetensors");
  std::vector<CommandResult> results(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      results[i] = Ctl({"register", file, "--block-pattern", kBlockPattern, "--select", kWeights});
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const CommandResult& result : results) {
    ASSERT_EQ(result.exit_code, 0) << result;
    EXPECT_EQ(result.out, results[0].out);
  }
  nlohmann::json status = CtlJson({"status"});
  EXPECT_EQ(status["file_reads"], "1") << status;
  EXPECT_EQ(status["file_bytes_read"],
            absl::StrCat(16u * 64 * 4 * 2 * 4 + (16 * 64 * 2 + 4 * 2 * 16 * 4 + 2)))
      << status;
  // And once more later: known, nothing read.
  CommandResult again =
      Ctl({"register", file, "--block-pattern", kBlockPattern, "--select", kWeights});
  ASSERT_EQ(again.exit_code, 0) << again;
  EXPECT_TRUE(Contains(again.err, "known already"));
  EXPECT_EQ(CtlJson({"status"})["file_reads"], "1");
}

TEST_F(BlockswapctlTest, RegisteringOverTheBudgetIsResourceExhaustedAndLeavesNothing) {
  absl::StatusOr<std::unique_ptr<ScratchDirs>> dirs = ScratchDirs::Create();
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  testing::DaemonFlags flags;
  flags.extra_args = {"--max-pinned-bytes=20000", "--pinning=always"};
  flags.output_path = (*dirs)->temp_dir() + "/small.log";
  auto small = DaemonProcess::Start(**dirs, flags);
  ASSERT_TRUE(small.ok()) << small.status();
  std::string file = WriteModelFile(**dirs, "big.safetensors");
  CommandResult refused = CtlOn((*dirs)->socket_path(), {"register", file, "--block-pattern",
                                                         kBlockPattern, "--select", kWeights});
  EXPECT_EQ(refused.exit_code, 1) << refused;
  // Refused from the declared sizes, the model's blocks and its extras
  // together, before the file is read.
  EXPECT_TRUE(Contains(refused.err,
                       "model of 40960 bytes would exceed --max-pinned-bytes=20000 (0 already "
                       "pinned)"));
  CommandResult status = CtlOn((*dirs)->socket_path(), {"status", "--json"});
  EXPECT_EQ(nlohmann::json::parse(status.out)["file_reads"], "0") << status;
  EXPECT_EQ((*dirs)->ShmEntries(), std::vector<std::string>{".lock"});
  EXPECT_EQ(CtlOn((*dirs)->socket_path(), {"models"}).out, "no models registered\n");
  EXPECT_EQ((*small)->Stop(SIGTERM).value_or(-1), 0);
}

TEST_F(BlockswapctlTest, RegisterNamesWhatIsWrongWithTheFile) {
  std::string file = WriteModelFile(*dirs_, "model.safetensors");
  CommandResult nothing = Ctl({"register", file, "--block-pattern", R"(^layers\.(\d+)\.)"});
  EXPECT_EQ(nothing.exit_code, 1) << nothing;
  EXPECT_TRUE(Contains(nothing.err, "matches none of the 18 tensors of " + file));
  std::string bad = dirs_->temp_dir() + "/bad.safetensors";
  ASSERT_TRUE(blockswap::testing::WriteFileBytes(
                  bad, blockswap::testing::SafetensorsFileBytesRaw(
                           R"({"transformer_blocks.0.w":{"dtype":"F12","shape":[1],)"
                           R"("data_offsets":[0,2]}})",
                           "ab"))
                  .ok());
  CommandResult unknown = Ctl({"register", bad, "--block-pattern", kBlockPattern});
  EXPECT_EQ(unknown.exit_code, 1) << unknown;
  EXPECT_TRUE(Contains(unknown.err, "unknown dtype 'F12'"));
  CommandResult missing =
      Ctl({"register", dirs_->temp_dir() + "/none.safetensors", "--block-pattern", kBlockPattern});
  EXPECT_EQ(missing.exit_code, 1) << missing;
  EXPECT_TRUE(Contains(missing.err, "none.safetensors"));
  EXPECT_EQ(Ctl({"register", file}).exit_code, 2);  // --block-pattern is required
  EXPECT_EQ(Ctl({"models"}).out, "no models registered\n");
}

}  // namespace
}  // namespace blockswap::ctl
