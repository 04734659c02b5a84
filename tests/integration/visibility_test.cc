// Model visibility (daemon/session/model_visibility.h) with
// real processes: a root client registers a model from a 0600 file and
// streams another it uploaded; viewers (visibility_roles.cc) as root and as
// uids 65534 and 65533 report what they can open and what the Admin calls
// show them; the metrics exposition is scraped for ids and paths.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/core/connection.h"
#include "client/core/file_model.h"
#include "tests/integration/client_roles.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/http_get.h"
#include "tests/support/safetensors_writer.h"

namespace blockswap::testing {
namespace {

constexpr char kBlockPattern[] = R"(^transformer_blocks\.(\d+)\.)";
constexpr int kNotFound = 5;            // grpc::StatusCode::NOT_FOUND
constexpr int kFailedPrecondition = 9;  // grpc::StatusCode::FAILED_PRECONDITION

bool Has(const ReportLines& report, const std::string& key, const std::string& value) {
  auto it = report.find(key);
  return it != report.end() &&
         std::find(it->second.begin(), it->second.end(), value) != it->second.end();
}

int CodeOf(const ReportLines& report, const std::string& key) {
  int code = -1;
  return absl::SimpleAtoi(FirstValue(report, key).substr(0, FirstValue(report, key).find(' ')),
                          &code)
             ? code
             : -1;
}

class ModelVisibilityTest : public DaemonClientTest {
 protected:
  // A shared daemon (DaemonClientTest::StartSharedDaemon) with metrics on a
  // free port.
  void StartVisibilityDaemon(std::vector<std::string> args) {
    args.push_back("--metrics-listen=127.0.0.1:0");
    StartSharedDaemon({.extra_args = std::move(args), .output_path = LogPath()}, {});
  }
  std::string LogPath() const { return dirs_->temp_dir() + "/daemon.log"; }

  // The model file: 0600 and root's, so that no other uid can open it; and a
  // world-readable copy of the same content elsewhere.
  void WriteModelFiles() {
    ASSERT_TRUE(WriteSafetensorsFile(private_file(), TransformerTensors(3, 2, 8), 5).ok());
    ASSERT_EQ(::chmod(private_file().c_str(), 0600), 0);
    std::filesystem::create_directories(dirs_->temp_dir() + "/public");
    ASSERT_TRUE(WriteSafetensorsFile(public_copy(), TransformerTensors(3, 2, 8), 5).ok());
  }
  std::string private_file() const { return dirs_->temp_dir() + "/private.safetensors"; }
  std::string public_copy() const { return dirs_->temp_dir() + "/public/copy.safetensors"; }

  // Runs the viewer as `uid` (-1: root, unchanged) probing `probe`; its report.
  ReportLines View(const std::string& name, int uid, const std::string& probe,
                   std::vector<std::string> args = {}) {
    std::ofstream(ReportPath(name)).close();
    EXPECT_EQ(::chmod(ReportPath(name).c_str(), 0666), 0);
    args.push_back("--probe=" + probe);
    args.push_back(absl::StrCat("--block-pattern=", kBlockPattern));
    if (uid >= 0) args.push_back(absl::StrCat("--uid=", uid));
    EXPECT_EQ(Run("viewer", name, std::move(args)), kClientOk) << Describe(name);
    return Report(name);
  }

  // Each of OpenModel, VerifyModel and EvictModel answered `id` exactly as
  // an id nobody registered.
  void ExpectAnsweredAsUnknown(const ReportLines& seen, const std::string& id) {
    for (const std::string key : {"open", "verify", "evict"}) {
      EXPECT_EQ(CodeOf(seen, key), kNotFound) << key << ": " << FirstValue(seen, key);
      EXPECT_EQ(FirstValue(seen, key), absl::StrReplaceAll(FirstValue(seen, "unknown_" + key),
                                                           {{kUnregisteredModelId, id}}))
          << key << ": the answer differs from an unknown id's, so it tells that the model exists";
    }
  }

  uint64_t StreamerSession() {
    const v1::ClientsReply clients = Clients();
    for (const v1::ClientInfo& client : clients.clients()) {
      if (client.client_name() == "streamer") return client.session_id();
    }
    ADD_FAILURE() << "no streamer attached";
    return 0;
  }

  // GET /metrics on the port the daemon logged.
  std::string ScrapeMetrics() {
    std::ifstream in(LogPath());
    std::stringstream log;
    log << in.rdbuf();
    const std::string text = log.str();
    size_t at = text.rfind("/metrics (port ");
    int port = 0;
    if (at == std::string::npos ||
        !absl::SimpleAtoi(text.substr(at + 15, text.find(')', at) - at - 15), &port)) {
      ADD_FAILURE() << "the daemon did not log its metrics port: " << text;
      return "";
    }
    return HttpGet(port, "/metrics");
  }
};

TEST_F(ModelVisibilityTest, UnderRegistrantGroupAnotherUidSeesAModelOnlyOnceItRegistersItsContent) {
  StartVisibilityDaemon({"--model-access=registrant-group"});
  WriteModelFiles();
  auto root = client::Connection::Connect(dirs_->socket_path(), "root");
  ASSERT_TRUE(root.ok()) << root.status();
  auto file_model = client::RegisterFile(**root, private_file(), {.block_pattern = kBlockPattern});
  ASSERT_TRUE(file_model.ok()) << file_model.status();
  ASSERT_NE(file_model->extras, nullptr);
  const std::string model = file_model->model->id();
  const std::string extras = file_model->extras->id();
  const std::string stop_file = dirs_->temp_dir() + "/stop";
  ChildProcess streamer =
      Spawn("stream", "streamer", {"--passes=1000000", "--stop-file=" + stop_file});
  ASSERT_TRUE(AwaitReport("streamer", "streaming"));
  const std::string upload = FirstValue(Report("streamer"), "model");
  const std::string ring = FirstValue(Report("streamer"), "ring");
  const std::string session = absl::StrCat(StreamerSession());

  // uid 65534, in no group of root's: as if nothing were registered.
  ReportLines nobody = View("nobody", 65534, model);
  ExpectAnsweredAsUnknown(nobody, model);
  for (const std::string& id : {model, extras, upload}) {
    EXPECT_FALSE(Has(nobody, "listed", id)) << id << " listed to uid 65534";
  }
  EXPECT_FALSE(Has(nobody, "trace_session", session)) << "the streamer's trace shown to 65534";
  EXPECT_FALSE(Has(nobody, "trace_ring", ring)) << "the streamer's ring in 65534's trace";
  EXPECT_FALSE(Has(nobody, "residency_ring", ring)) << "the streamer's ring in 65534's residency";

  // Root sees all of it: the hiding above is the policy's, not an empty view.
  ReportLines admin = View("root", -1, model);
  EXPECT_EQ(CodeOf(admin, "open"), 0) << FirstValue(admin, "open");
  EXPECT_EQ(CodeOf(admin, "verify"), 0) << FirstValue(admin, "verify");
  EXPECT_EQ(CodeOf(admin, "evict"), kFailedPrecondition) << FirstValue(admin, "evict");
  EXPECT_TRUE(Has(admin, "listed", model) && Has(admin, "listed", extras) &&
              Has(admin, "listed", upload));
  EXPECT_TRUE(absl::StrContains(FirstValue(admin, "source_" + model), private_file()))
      << FirstValue(admin, "source_" + model);
  EXPECT_TRUE(Has(admin, "trace_session", session));
  EXPECT_TRUE(Has(admin, "trace_ring", ring));
  EXPECT_TRUE(Has(admin, "residency_ring", ring));

  // 65534 uploads the streamer's content and registers its own copy of the
  // file: each registration gets it access, nothing is copied again.
  ReportLines shared =
      View("nobody-registers", 65534, model, {"--upload-seed=1", "--file=" + public_copy()});
  EXPECT_EQ(FirstValue(shared, "uploaded"), upload);
  EXPECT_EQ(FirstValue(shared, "registered"), model);
  EXPECT_EQ(CodeOf(shared, "open"), 0) << FirstValue(shared, "open");
  EXPECT_EQ(CodeOf(shared, "verify"), 0) << FirstValue(shared, "verify");
  for (const std::string& id : {model, extras, upload})
    EXPECT_TRUE(Has(shared, "listed", id)) << id;
  const std::string source = FirstValue(shared, "source_" + model);
  EXPECT_TRUE(absl::StrContains(source, public_copy())) << source;
  EXPECT_FALSE(absl::StrContains(source, private_file()))
      << "root's path shown to 65534: " << source;
  // The streamer's only model is now 65534's too, but the streamer is root's.
  EXPECT_FALSE(Has(shared, "trace_session", session));
  EXPECT_FALSE(Has(shared, "residency_ring", ring));

  // The metrics name no model and no path, whoever scrapes them; under this
  // policy they leave out the store's node-wide counters (ShowsStoreCounters).
  const std::string metrics = ScrapeMetrics();
  EXPECT_TRUE(absl::StrContains(metrics, "\nblockswap_sessions ")) << metrics;
  for (const char* family : {"\nblockswap_models ", "\nblockswap_master_blocks ",
                             "\nblockswap_pinned_bytes ", "\nprocess_virtual_memory_bytes "}) {
    EXPECT_FALSE(absl::StrContains(metrics, family)) << family << " in the metrics";
  }
  for (const std::string& id : {model, extras, upload}) {
    EXPECT_FALSE(absl::StrContains(metrics, id.substr(0, 12))) << "a model id in the metrics";
  }
  EXPECT_FALSE(absl::StrContains(metrics, dirs_->temp_dir())) << "a source path in the metrics";

  // After a restart the adopted models keep their registrants.
  std::ofstream(stop_file).close();
  EXPECT_EQ(Finish(streamer, "streamer"), kClientOk);
  file_model->model.reset();
  file_model->extras.reset();
  root->reset();
  ASSERT_TRUE(daemon_->Stop(SIGTERM).ok());
  StartVisibilityDaemon({"--model-access=registrant-group"});
  ReportLines again = View("nobody-after-restart", 65534, model);
  EXPECT_EQ(CodeOf(again, "open"), 0) << FirstValue(again, "open");
  EXPECT_TRUE(Has(again, "listed", model) && Has(again, "listed", upload));
  ReportLines other = View("other-after-restart", 65533, model);
  ExpectAnsweredAsUnknown(other, model);
  EXPECT_FALSE(Has(other, "listed", model) || Has(other, "listed", upload));
}

// Shared counters leak nothing: uid 65534 uploads two blocks it guessed, which only root's model
// (hidden from it) holds; uid 65533 uploads two blocks nobody holds. Both
// see their model as sharing nothing, and the counters each can read are the
// same before and after, and the same as the other's: nothing they read
// tells whether a model they cannot see holds their content.
TEST_F(ModelVisibilityTest, GuessedBlocksHeldByAnInvisibleModelShowAsUnsharedAndMoveNoCounter) {
  StartVisibilityDaemon({"--model-access=registrant-group"});
  ReportLines owner = View("owner", -1, kUnregisteredModelId, {"--upload-seed=5", "--blocks=6"});
  ASSERT_FALSE(FirstValue(owner, "uploaded").empty()) << Describe("owner");
  ReportLines before = View("before", 65534, kUnregisteredModelId);
  ReportLines guess =
      View("guess", 65534, kUnregisteredModelId, {"--upload-seed=5", "--blocks=2"});
  ReportLines control =
      View("control", 65533, kUnregisteredModelId, {"--upload-seed=6", "--blocks=2"});
  const std::string guessed = FirstValue(guess, "uploaded");
  const std::string novel = FirstValue(control, "uploaded");
  ASSERT_EQ(guessed.size(), 64u) << Describe("guess");
  ASSERT_EQ(novel.size(), 64u) << Describe("control");
  EXPECT_EQ(FirstValue(guess, "shared_" + guessed), "0")
      << "SHARED tells 65534 that a model it cannot see holds its blocks";
  EXPECT_EQ(FirstValue(control, "shared_" + novel), "0");
  EXPECT_EQ(FirstValue(before, "counters"), FirstValue(guess, "counters"));
  EXPECT_EQ(FirstValue(guess, "counters"), FirstValue(control, "counters"));
  EXPECT_EQ(FirstValue(guess, "counters_withheld"), "model_access = registrant-group")
      << "the reply must say its zeros are withheld, not zero";
  // Root is given them: the equality above is the policy's, not a dead counter.
  ReportLines admin = View("admin", -1, kUnregisteredModelId);
  EXPECT_TRUE(absl::StrContains(FirstValue(admin, "counters"), "master_blocks=8"))
      << FirstValue(admin, "counters") << " (6 of root's model and 2 of the control's)";
  EXPECT_EQ(FirstValue(admin, "counters_withheld"), "");
  EXPECT_NE(FirstValue(admin, "shared_" + guessed), "0")
      << "root, who sees both models, sees them share the two blocks";
}

// Under registrant-group every view shows uid 65534 its own sessions only,
// even while it holds the content root streams: Clients, Stats (the device
// totals move with root's loads), Residency, Trace and the metrics' per-session
// series. Root, beside it, sees the streamer in each: the hiding is the
// policy's, not an empty view.
TEST_F(ModelVisibilityTest, UnderRegistrantGroupNoViewShowsAnotherUidRootsSessions) {
  StartVisibilityDaemon({"--model-access=registrant-group"});
  ChildProcess streamer = Spawn("stream", "streamer", {"--passes=1000000",
                                                       "--stop-file=" + dirs_->temp_dir() + "/stop"});
  ASSERT_TRUE(AwaitReport("streamer", "streaming"));
  const std::string ring = FirstValue(Report("streamer"), "ring");
  const std::string session = absl::StrCat(StreamerSession());

  // The streamer's content (seed 1), registered by 65534 too.
  ReportLines nobody = View("nobody", 65534, kUnregisteredModelId, {"--upload-seed=1"});
  ASSERT_EQ(FirstValue(nobody, "uploaded"), FirstValue(Report("streamer"), "model"));
  ASSERT_TRUE(nobody.contains("client_uid")) << "65534 does not see its own session";
  for (const std::string& uid : nobody.at("client_uid")) {
    EXPECT_EQ(uid, "65534") << "Clients shows 65534 a session of uid " << uid;
  }
  for (const std::string key : {"client", "stats_client"}) {
    for (const std::string& line : nobody[key]) {
      EXPECT_FALSE(absl::StartsWith(line, "streamer")) << key << " shows 65534 root's " << line;
    }
  }
  EXPECT_EQ(FirstValue(nobody, "stats_device_loads"), "0")
      << "Stats shows 65534 the device totals of root's loads";
  EXPECT_FALSE(Has(nobody, "trace_session", session)) << "root's streamer in 65534's trace";
  EXPECT_FALSE(Has(nobody, "residency_ring", ring)) << "root's ring in 65534's residency";

  ReportLines admin = View("root", -1, kUnregisteredModelId);
  EXPECT_TRUE(Has(admin, "client_uid", "0"));
  EXPECT_TRUE(Has(admin, "stats_client", "streamer session=" + session));
  EXPECT_NE(FirstValue(admin, "stats_device_loads"), "0");
  EXPECT_TRUE(Has(admin, "residency_ring", ring));

  // The endpoint has no caller: per-session series name other users'
  // sessions to whoever scrapes it, so under this policy there are none.
  const std::string metrics = ScrapeMetrics();
  EXPECT_TRUE(absl::StrContains(metrics, "\nblockswap_sessions ")) << metrics;
  EXPECT_FALSE(absl::StrContains(metrics, "uid=\"0\"")) << metrics;
  EXPECT_FALSE(absl::StrContains(metrics, "client=\"streamer\"")) << metrics;
  std::ofstream(dirs_->temp_dir() + "/stop").close();
  EXPECT_EQ(Finish(streamer, "streamer"), kClientOk);
}

// Root uploads a model; 65534 registers the same content under its own
// name. 65534 sees its name, not root's, and once no session holds the model
// its eviction removes its own registration only: root keeps the model and
// its name, and 65534 then answers the id as unknown again.
TEST_F(ModelVisibilityTest, UnderRegistrantGroupARegistrantSeesItsNameAndEvictsOnlyItsRegistration) {
  StartVisibilityDaemon({"--model-access=registrant-group"});
  ReportLines owner = View("owner", -1, kUnregisteredModelId,
                           {"--upload-seed=5", "--upload-name=roots-private-name"});
  const std::string id = FirstValue(owner, "uploaded");
  ASSERT_EQ(id.size(), 64u) << Describe("owner");

  ReportLines mine =
      View("mine", 65534, id, {"--upload-seed=5", "--upload-name=nobodys-name"});
  ASSERT_EQ(FirstValue(mine, "uploaded"), id);
  EXPECT_EQ(FirstValue(mine, "name_" + id), "nobodys-name") << "root's name for it shown to 65534";
  ReportLines evicts = View("nobody-evicts", 65534, id, {"--no-open=1"});
  EXPECT_EQ(CodeOf(evicts, "evict"), 0) << FirstValue(evicts, "evict");

  ReportLines admin = View("root-after", -1, id);
  EXPECT_TRUE(Has(admin, "listed", id)) << "65534's eviction removed root's model";
  EXPECT_EQ(CodeOf(admin, "open"), 0) << FirstValue(admin, "open");
  EXPECT_EQ(FirstValue(admin, "name_" + id), "roots-private-name");
  ExpectAnsweredAsUnknown(View("nobody-after", 65534, id), id);
}

// A refusal for room names the limit and the ask, never what the node holds:
// 65534's upload of more than the daemon may hold is refused in the same
// words before and while root streams a model of its own.
TEST_F(ModelVisibilityTest, UnderRegistrantGroupARefusalForRoomDoesNotMoveWithAnotherUidsModels) {
  StartVisibilityDaemon({"--model-access=registrant-group", "--max-memory-bytes=8388608",
                         "--staging-buffer-bytes=1048576", "--staging-buffers=2"});
  const std::vector<std::string> too_big = {"--upload-seed=7", "--blocks=4",
                                            "--elements=1048576"};
  const std::string before =
      FirstValue(View("before", 65534, kUnregisteredModelId, too_big), "uploaded");
  ASSERT_TRUE(absl::StartsWith(before, "8 ")) << "not refused for room: " << before;
  ChildProcess streamer = Spawn("stream", "streamer", {"--passes=1000000",
                                                       "--stop-file=" + dirs_->temp_dir() + "/stop"});
  ASSERT_TRUE(AwaitReport("streamer", "streaming"));
  const std::string during =
      FirstValue(View("during", 65534, kUnregisteredModelId, too_big), "uploaded");
  EXPECT_EQ(during, before) << "the refusal moved with root's model";
  std::ofstream(dirs_->temp_dir() + "/stop").close();
  EXPECT_EQ(Finish(streamer, "streamer"), kClientOk);
}

TEST_F(ModelVisibilityTest, ByDefaultEveryAllowedUserOpensEveryModelButNotAnotherUsersPaths) {
  StartVisibilityDaemon({});
  WriteModelFiles();
  auto root = client::Connection::Connect(dirs_->socket_path(), "root");
  ASSERT_TRUE(root.ok()) << root.status();
  auto file_model = client::RegisterFile(**root, private_file(), {.block_pattern = kBlockPattern});
  ASSERT_TRUE(file_model.ok()) << file_model.status();
  const std::string model = file_model->model->id();

  ReportLines nobody = View("nobody", 65534, model);
  EXPECT_EQ(CodeOf(nobody, "open"), 0) << FirstValue(nobody, "open");
  EXPECT_EQ(CodeOf(nobody, "verify"), 0) << FirstValue(nobody, "verify");
  EXPECT_TRUE(Has(nobody, "listed", model));
  EXPECT_EQ(FirstValue(nobody, "source_" + model), "file (another user's)");
  ReportLines admin = View("root", -1, model);
  EXPECT_TRUE(absl::StrContains(FirstValue(admin, "source_" + model), private_file()))
      << FirstValue(admin, "source_" + model);
}

}  // namespace
}  // namespace blockswap::testing
