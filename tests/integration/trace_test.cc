// `blockswapctl trace` end to end: a real blockswapd (host backend, jitter),
// two streaming client processes, the real blockswapctl recording them; the
// Chrome trace-event JSON it writes must account for every load of both.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/client_roles.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {
namespace {

using json = nlohmann::json;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The seconds in blockswapctl's "no activity in the S s window", or -1.
double NoActivityWindowSeconds(const std::string& err) {
  static constexpr std::string_view kBefore = "no activity in the ";
  const size_t start = err.find(kBefore);
  if (start == std::string::npos) return -1;
  const size_t number = start + kBefore.size();
  const size_t end = err.find(" s window", number);
  double seconds = -1;
  if (end == std::string::npos || !absl::SimpleAtod(err.substr(number, end - number), &seconds)) {
    return -1;
  }
  return seconds;
}

class TraceTest : public DaemonClientTest {
 protected:
  // blockswapctl --socket S trace ARGS..., its stderr in err_path_.
  ChildProcess StartCtl(std::vector<std::string> args, Env env = {}) {
    args.insert(args.begin(), {"--socket=" + dirs_->socket_path(), "trace"});
    UniqueFd err(::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    EXPECT_TRUE(err.valid());
    auto child = ChildProcess::SpawnProgram(
        BinaryDirectory() + "/blockswapctl",
        {.args = std::move(args), .inherit = {{err.get(), 2}}, .env = std::move(env)});
    EXPECT_TRUE(child.ok()) << child.status();
    return *std::move(child);
  }

  // Once blockswapctl has taken the window's start.
  bool AwaitRecording() {
    for (absl::Time until = absl::Now() + absl::Seconds(30); absl::Now() < until;
         absl::SleepFor(absl::Milliseconds(10))) {
      if (absl::StrContains(ReadAll(err_path_), "recording for")) return true;
    }
    return false;
  }

  // Runs two streaming clients inside a trace window ended by SIGINT; returns
  // blockswapctl's exit code and fills pids_ and loads_ (by client pid).
  int TraceTwoClients(const std::vector<std::string>& ctl_args, Env ctl_env = {}) {
    ChildProcess ctl = StartCtl(ctl_args, std::move(ctl_env));
    EXPECT_TRUE(AwaitRecording()) << ReadAll(err_path_);
    ChildProcess a = Spawn("stream", "a", {"--passes=10", "--slots=2"});
    ChildProcess b = Spawn("stream", "b", {"--passes=10", "--slots=3", "--seed=2"});
    for (auto [child, name] : {std::pair<ChildProcess*, std::string>{&a, "a"}, {&b, "b"}}) {
      const auto pid = static_cast<uint32_t>(child->pid());  // before Finish reaps it
      pids_[name] = pid;
      EXPECT_EQ(Finish(*child, name), kClientOk) << Describe(name);
      loads_[pid] = NumberValue(Report(name), "loads");
    }
    ctl.Kill(SIGINT);
    absl::StatusOr<int> code = ctl.Wait(absl::Seconds(60));
    EXPECT_TRUE(code.ok()) << code.status();
    return code.ok() ? *code : -1;
  }

  std::string err_path() const { return err_path_; }
  std::string out_path() const { return dirs_->temp_dir() + "/run.json"; }
  std::string png_path() const { return dirs_->temp_dir() + "/run.png"; }

  void SetUp() override {
    DaemonClientTest::SetUp();
    err_path_ = dirs_->temp_dir() + "/blockswapctl.err";
    StartDaemon();
  }

  std::string err_path_;
  std::map<std::string, uint32_t> pids_;
  std::map<uint32_t, double> loads_;
};

TEST_F(TraceTest, TheJsonHasEveryLoadOfBothClientsInProtocolOrder) {
  ASSERT_EQ(TraceTwoClients({"--seconds=120", "--out=" + out_path()}), 0) << ReadAll(err_path());
  json document = json::parse(ReadAll(out_path()), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(document.is_discarded()) << "not JSON: " << out_path();
  ASSERT_TRUE(document["traceEvents"].is_array());

  std::map<uint32_t, std::string> process_names;
  std::map<uint32_t, int> load_spans, copy_spans, stall_spans;
  for (const json& event : document["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "process_name") {
      process_names[event["pid"]] = event["args"]["name"];
    }
    if (event["ph"] != "X") continue;
    EXPECT_GE(event["dur"].get<double>(), 0.0) << event;
    if (event["cat"] == "load") {
      ++load_spans[event["pid"]];
      const json& args = event["args"];
      const double request = event["ts"].get<double>();
      const double filled = request + event["dur"].get<double>();
      ASSERT_TRUE(args.contains("copy_issued_us") && args.contains("copy_done_us")) << event;
      // request -> copy issued -> filled published (at issue) -> copy done
      EXPECT_LE(request, args["copy_issued_us"].get<double>()) << event;
      EXPECT_LE(args["copy_issued_us"].get<double>(), filled) << event;
      EXPECT_LE(args["copy_issued_us"].get<double>(), args["copy_done_us"].get<double>()) << event;
    } else if (event["cat"] == "copy") {
      ++copy_spans[event["args"]["client_pid"]];
    } else if (event["cat"] == "stall") {
      // The compute stream's idle time at a wait (kStall), on its own track.
      ++stall_spans[event["pid"]];
      EXPECT_GT(event["dur"].get<double>(), 0.0) << event;
      EXPECT_EQ(event["tid"], 2) << event;
    }
  }
  EXPECT_EQ(process_names[document["otherData"]["daemon_pid"]], "blockswapd");
  for (const auto& [name, pid] : pids_) {
    EXPECT_EQ(process_names[pid], absl::StrCat(name, " (pid ", pid, ")"));
    ASSERT_GT(loads_[pid], 0) << name << " reported no loads";
    // The window covers both clients whole, so nothing is cut at its edges.
    EXPECT_EQ(load_spans[pid], loads_[pid]) << name;
    EXPECT_EQ(copy_spans[pid], loads_[pid]) << name;
  }
  EXPECT_TRUE(absl::StrContains(ReadAll(err_path()), "2 clients")) << ReadAll(err_path());
  // With the daemon's copy stream jittered (up to ~2 ms a copy), the
  // clients' compute streams sit idle at some of their waits, and the trace
  // shows where: stalls from the clients' own timers, not the host waits.
  int stalls = 0;
  for (const auto& [name, pid] : pids_) {
    stalls += stall_spans[pid];
    EXPECT_EQ(NumberValue(Report(name), "timed_waits"), loads_[pid]) << name;
  }
  EXPECT_GT(stalls, 0) << "no compute-stream stall was traced";
}

TEST_F(TraceTest, PngIsAPictureOfTheRun) {
  ASSERT_EQ(TraceTwoClients({"--seconds=120", "--out=" + out_path(), "--png=" + png_path()}), 0)
      << ReadAll(err_path());
  std::string png = ReadAll(png_path());
  ASSERT_GT(png.size(), 1000u) << ReadAll(err_path());
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST_F(TraceTest, ClientsThatEndedBeforeTheWindowAreLeftOutAndAnIdleWindowSaysSo) {
  ASSERT_EQ(TraceTwoClients({"--seconds=120", "--out=" + out_path()}), 0) << ReadAll(err_path());
  // Both clients have exited (their rings may still be kept, retired): a
  // window after them has no client and no span.
  ChildProcess ctl = StartCtl({"--seconds=0.3", "--out=" + out_path(), "--png=" + png_path()});
  absl::StatusOr<int> code = ctl.Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << ReadAll(err_path());
  // The window named is the one the daemon saw: --seconds plus blockswapctl's
  // own calls, which take longer than 50 ms under a sanitizer.
  const std::string err = ReadAll(err_path());
  const double window_seconds = NoActivityWindowSeconds(err);
  EXPECT_GE(window_seconds, 0.3) << err;
  EXPECT_LT(window_seconds, 10.0) << err;
  json document = json::parse(ReadAll(out_path()), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(document.is_discarded());
  for (const json& event : document["traceEvents"]) {
    EXPECT_NE(event["ph"], "X") << event;
    if (event["ph"] == "M" && event["name"] == "process_name") {
      EXPECT_EQ(event["pid"], document["otherData"]["daemon_pid"]) << "a client row: " << event;
    }
  }
  EXPECT_EQ(ReadAll(png_path()).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST_F(TraceTest, PngWithoutItsPythonIsExitOneNamingIt) {
  ChildProcess ctl = StartCtl({"--seconds=0.2", "--out=" + out_path(), "--png=" + png_path()},
                              {{"BLOCKSWAP_PYTHON", "/nonexistent/python3"}});
  absl::StatusOr<int> code = ctl.Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  std::string err = ReadAll(err_path());
  EXPECT_TRUE(absl::StrContains(err, "/nonexistent/python3")) << err;
  EXPECT_TRUE(absl::StrContains(err, "not written")) << err;
  EXPECT_FALSE(ReadAll(out_path()).empty()) << "the JSON is written before drawing";
  struct stat st {};
  EXPECT_NE(::stat(png_path().c_str(), &st), 0) << "no PNG was drawn";
}

TEST_F(TraceTest, BadFlagsAreExitTwoWithAMessage) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--seconds=0", "--out=" + out_path()},
        std::vector<std::string>{"--seconds=1"},
        std::vector<std::string>{"--out=" + out_path(), "--bogus"}}) {
    ChildProcess ctl = StartCtl(args);
    absl::StatusOr<int> code = ctl.Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 2) << args.front();
    EXPECT_FALSE(ReadAll(err_path()).empty()) << args.front();
  }
}

}  // namespace
}  // namespace blockswap::testing
