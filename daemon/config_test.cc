#include "daemon/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"

namespace blockswap::daemon {
namespace {

absl::Status Apply(absl::string_view text, DaemonOptions& options) {
  return ApplyConfigText(text, "test.toml", options);
}

TEST(Config, EveryFlagIsItsKeyWithDashes) {
  std::set<std::string> keys;
  for (const ConfigField& field : ConfigFields()) {
    std::string from_flag = absl::StrReplaceAll(std::string(field.flag).substr(2), {{"-", "_"}});
    // A list's flag is given once per value: --allow-uid for allow_uids.
    EXPECT_EQ(field.list ? from_flag + "s" : from_flag, field.key);
    EXPECT_TRUE(keys.insert(field.key).second) << field.key << " twice";
  }
  for (const char* key : {"socket",
                          "socket_group",
                          "backend",
                          "host_devices",
                          "shm_prefix",
                          "max_pinned_bytes",
                          "pinning",
                          "staging_buffer_bytes",
                          "staging_buffers",
                          "staging_threads",
                          "allow_uids",
                          "allow_gids",
                          "model_access",
                          "shutdown_grace",
                          "idle_exit",
                          "idle_exit_lock",
                          "log_level",
                          "metrics_listen",
                          "max_memory_bytes",
                          "device_memory_reserve_bytes",
                          "max_sessions_per_client",
                          "max_sessions_per_uid",
                          "max_rings_per_client",
                          "max_rings_per_uid",
                          "max_device_bytes_per_client",
                          "max_device_bytes_per_uid",
                          "max_staging_bytes_per_client",
                          "max_staging_bytes_per_uid",
                          "max_file_offers_per_client",
                          "max_file_offers_per_uid",
                          "max_descriptors_per_client",
                          "max_descriptors_per_uid",
                          "copy_weights"}) {
    EXPECT_TRUE(keys.contains(key)) << key;
  }
}

TEST(Config, IdleExitIsSecondsAndOffByDefault) {
  DaemonOptions o;
  EXPECT_EQ(o.idle_exit, absl::ZeroDuration());
  ASSERT_TRUE(Apply("idle_exit = 90\nidle_exit_lock = \"/dev/shm/x/start.lock\"\n", o).ok());
  EXPECT_EQ(o.idle_exit, absl::Seconds(90));
  EXPECT_EQ(o.idle_exit_lock, "/dev/shm/x/start.lock");
  absl::Status s = Apply("idle_exit = -1\n", o);
  EXPECT_TRUE(absl::StrContains(s.message(), "idle_exit: expected seconds between 0 and 604800"))
      << s;
}

TEST(Config, FileSetsEveryKindOfValue) {
  DaemonOptions o;
  ASSERT_TRUE(Apply(R"(
socket = "/run/x/blockswapd.sock"
socket_group = "trainers"
backend = "host"
host_devices = 3
shm_prefix = "/dev/shm/bs-test"
max_pinned_bytes = "2GiB"
allow_uids = [1000, 1001]
allow_gids = [50]
shutdown_grace = 2.5
log_level = "debug"
metrics_listen = "127.0.0.1:9464"
max_rings_per_client = 4
max_device_bytes_per_client = 1048576
max_staging_bytes_per_client = "1MiB"
max_memory_bytes = "3GiB"
device_memory_reserve_bytes = "512MiB"
max_sessions_per_uid = 7
max_file_offers_per_client = 5
)",
                    o)
                  .ok());
  EXPECT_EQ(o.socket_path, "/run/x/blockswapd.sock");
  EXPECT_EQ(o.socket_group, "trainers");
  EXPECT_EQ(o.backend, BackendChoice::kHost);
  EXPECT_EQ(o.host.device_count, 3);
  EXPECT_EQ(o.shm_prefix, "/dev/shm/bs-test");
  EXPECT_EQ(o.max_pinned_bytes, uint64_t{2} << 30);
  EXPECT_EQ(o.allow_uids, (std::vector<uid_t>{1000, 1001}));
  EXPECT_EQ(o.allow_gids, (std::vector<gid_t>{50}));
  EXPECT_EQ(o.shutdown_grace, absl::Milliseconds(2500));
  EXPECT_EQ(o.log_level, LogLevel::kDebug);
  EXPECT_EQ(o.metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(o.quotas.per_client.rings, 4u);
  EXPECT_EQ(o.quotas.per_client.device_bytes, 1048576u);
  EXPECT_EQ(o.quotas.per_client.staging_bytes, 1048576u);
  EXPECT_EQ(o.max_memory_bytes, uint64_t{3} << 30);
  EXPECT_EQ(o.device_memory_reserve_bytes, uint64_t{512} << 20);
  EXPECT_EQ(o.quotas.per_uid.sessions, 7u);
  EXPECT_EQ(o.quotas.per_client.file_offers, 5u);
}

TEST(Config, TheUidsRingBytesAndDescriptorsDefaultToAutoAndTakeANumber) {
  DaemonOptions o;
  EXPECT_EQ(o.quotas.per_uid.device_bytes, kAutoLimit);
  EXPECT_EQ(o.quotas.per_uid.descriptors, kAutoLimit);
  EXPECT_EQ(o.quotas.per_client.device_bytes, 0u);
  EXPECT_EQ(o.quotas.per_client.descriptors, 0u);
  ASSERT_TRUE(
      ApplyConfigText("max_device_bytes_per_uid = \"8GiB\"\nmax_descriptors_per_uid = 300\n",
                      "t.toml", o)
          .ok());
  EXPECT_EQ(o.quotas.per_uid.device_bytes, uint64_t{8} << 30);
  EXPECT_EQ(o.quotas.per_uid.descriptors, 300u);
  ASSERT_TRUE(ApplyConfigText("max_device_bytes_per_uid = \"auto\"\nmax_descriptors_per_uid = "
                              "\"auto\"\n",
                              "t.toml", o)
                  .ok());
  EXPECT_EQ(o.quotas.per_uid.device_bytes, kAutoLimit);
  EXPECT_EQ(o.quotas.per_uid.descriptors, kAutoLimit);
  EXPECT_FALSE(ApplyConfigText("max_descriptors_per_client = \"auto\"\n", "t.toml", o).ok())
      << "only the per-uid keys have an \"auto\"";
}

TEST(Config, TheMasterLimitsTakeAutoOrANumber) {
  DaemonOptions o;
  EXPECT_EQ(o.max_master_blocks, kAutoLimit);
  EXPECT_EQ(o.max_master_bytes_per_uid, kAutoLimit);
  EXPECT_EQ(o.max_master_blocks_per_uid, 4096u);
  ASSERT_TRUE(ApplyConfigText("max_master_blocks = 1000\nmax_master_bytes_per_uid = \"2GiB\"\n"
                              "max_master_blocks_per_uid = 0\n",
                              "t.toml", o)
                  .ok());
  EXPECT_EQ(o.max_master_blocks, 1000u);
  EXPECT_EQ(o.max_master_bytes_per_uid, uint64_t{2} << 30);
  EXPECT_EQ(o.max_master_blocks_per_uid, 0u);
  ASSERT_TRUE(ApplyConfigText("max_master_blocks = \"auto\"\n", "t.toml", o).ok());
  EXPECT_EQ(o.max_master_blocks, kAutoLimit);
  absl::Status bad = ApplyConfigText("max_master_blocks = \"many\"\n", "t.toml", o);
  EXPECT_TRUE(absl::StrContains(bad.message(), "max_master_blocks")) << bad;
  EXPECT_TRUE(absl::StrContains(bad.message(), "or \"auto\"")) << bad;
}

TEST(Config, PrintedConfigReadsBackToTheSameOptions) {
  DaemonOptions o;
  ASSERT_TRUE(
      Apply("allow_uids = [7, 8]\nmax_pinned_bytes = \"3K\"\nsocket = \"/a \\\"b\\\"\"\n", o).ok());
  const std::string printed = FormatConfig(o);
  DaemonOptions again;
  ASSERT_TRUE(Apply(printed, again).ok()) << printed;
  EXPECT_EQ(FormatConfig(again), printed);
  EXPECT_EQ(again.socket_path, "/a \"b\"");
  EXPECT_EQ(again.max_pinned_bytes, 3000u);
  EXPECT_TRUE(absl::StrContains(printed, "allow_uids = [7, 8]\n")) << printed;
}

TEST(Config, CopyWeightsAreUidWeightPairsAndReadBack) {
  DaemonOptions o;
  EXPECT_TRUE(o.copy_weights.empty()) << "every uid weighs the same by default";
  ASSERT_TRUE(Apply("copy_weights = [\"1000:2\", \"0:5\"]\n", o).ok());
  EXPECT_EQ(o.copy_weights, (CopyWeights{{0, 5}, {1000, 2}}));
  const std::string printed = FormatConfig(o);
  EXPECT_TRUE(absl::StrContains(printed, "copy_weights = [\"0:5\", \"1000:2\"]\n")) << printed;
  DaemonOptions again;
  ASSERT_TRUE(Apply(printed, again).ok()) << printed;
  EXPECT_EQ(again.copy_weights, o.copy_weights);
}

TEST(Config, UnknownKeyNamesTheLineTheKeyAndTheKnownKeys) {
  DaemonOptions o;
  absl::Status s = Apply("socket = \"/x\"\n\nmax_pined_bytes = 5\n", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "test.toml:3: unknown key 'max_pined_bytes'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "max_pinned_bytes")) << s;
}

TEST(Config, WrongTypeNamesTheKeyAndWhatItExpects) {
  DaemonOptions o;
  absl::Status s = Apply("host_devices = \"two\"\n", o);
  EXPECT_TRUE(absl::StrContains(
      s.message(), "test.toml:1: host_devices: expected a non-negative integer, got string"))
      << s;
  s = Apply("allow_uids = 5\n", o);
  EXPECT_TRUE(absl::StrContains(s.message(), "allow_uids: expected an array")) << s;
  s = Apply("allow_gids = [1, \"wheel\"]\n", o);
  EXPECT_TRUE(absl::StrContains(s.message(),
                                "allow_gids: expected an array of non-negative "
                                "integers, got string"))
      << s;
}

TEST(Config, BadValuesNameTheKeyAndTheValue) {
  const std::pair<const char*, const char*> cases[] = {
      {"backend = \"gpu\"", "backend: "},
      {"log_level = \"loud\"", "log_level: unknown log level 'loud'"},
      {"max_pinned_bytes = \"8 gigs\"", "max_pinned_bytes: unknown unit 'gigs'"},
      {"max_pinned_bytes = -1", "max_pinned_bytes: expected a byte count"},
      {"shutdown_grace = -3", "shutdown_grace: expected seconds between 0 and 3600"},
      {"metrics_listen = \"9464\"", "metrics_listen: expected HOST:PORT"},
      {"metrics_listen = \"localhost:99999\"", "metrics_listen: expected HOST:PORT"},
      {"host_devices = 0", "host_devices: must be at least 1"},
      {"shm_prefix = \"relative/dir\"", "shm_prefix: must be an absolute path"},
      {"socket = \"\"", "socket: the socket path must not be empty"},
      {"allow_uids = [-1]", "allow_uids: expected a non-negative integer"},
      {"max_memory_bytes = \"lots\"", "max_memory_bytes: expected a byte count"},
      {"max_rings_per_uid = \"many\"", "max_rings_per_uid: expected a non-negative integer"},
      {"copy_weights = [\"1000\"]", "copy_weights: expected UID:WEIGHT (for example \"1000:2\"), got '1000'"},
      {"copy_weights = [\"x:2\"]", "copy_weights: the uid of 'x:2': expected a non-negative integer"},
      {"copy_weights = [\"1000:0\"]", "copy_weights: the weight of '1000:0' is 0: a weight is 1 to 1000"},
      {"copy_weights = [\"1000:1001\"]", "copy_weights: the weight of '1000:1001': 1001 is larger than 1000"},
      {"copy_weights = [1000]", "copy_weights: expected an array of strings, got integer"},
      {"model_access = \"group\"",
       "model_access: expected \"allowed-users\" (every allowed user sees every model) or "
       "\"registrant-group\" (the registering uids, their groups, root and the daemon's uid), "
       "got 'group'"},
  };
  for (const auto& [text, want] : cases) {
    DaemonOptions o;
    absl::Status s = Apply(text, o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("test.toml:1: ", want)))
        << text << " -> " << s;
  }
}

TEST(Config, SyntaxErrorNamesTheLine) {
  DaemonOptions o;
  absl::Status s = Apply("socket = \"/x\"\nbackend = \n", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "test.toml:2: ")) << s;
}

TEST(Config, ByteCountsTakeDecimalAndBinaryUnits) {
  EXPECT_EQ(*ParseByteCount("4096"), 4096u);
  EXPECT_EQ(*ParseByteCount("4K"), 4000u);
  EXPECT_EQ(*ParseByteCount("4KiB"), 4096u);
  EXPECT_EQ(*ParseByteCount("96GiB"), uint64_t{96} << 30);
  EXPECT_EQ(*ParseByteCount("1 TiB"), uint64_t{1} << 40);
  EXPECT_FALSE(ParseByteCount("").ok());
  EXPECT_FALSE(ParseByteCount("GiB").ok());
  EXPECT_FALSE(ParseByteCount("99999999999TiB").ok());
}

TEST(Config, AListInTheFileReplacesTheDefaultList) {
  DaemonOptions o;
  o.allow_uids = {1};
  ASSERT_TRUE(Apply("allow_uids = [2]\n", o).ok());
  EXPECT_EQ(o.allow_uids, (std::vector<uid_t>{2}));
}

TEST(Config, MissingFileIsNotFoundNamingIt) {
  DaemonOptions o;
  absl::Status s = ApplyConfigFile("/nonexistent/blockswapd.toml", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "/nonexistent/blockswapd.toml")) << s;
}

TEST(Config, MaxMemoryBytesIsAutoByDefaultAndReadsBack) {
  DaemonOptions o;
  EXPECT_EQ(o.max_memory_bytes, kMaxMemoryBytesAuto);
  EXPECT_TRUE(absl::StrContains(FormatConfig(o), "\nmax_memory_bytes = \"auto\"\n"));
  ASSERT_TRUE(Apply("max_memory_bytes = 0", o).ok());
  EXPECT_EQ(o.max_memory_bytes, 0u);
  ASSERT_TRUE(Apply("max_memory_bytes = \"auto\"", o).ok());
  EXPECT_EQ(o.max_memory_bytes, kMaxMemoryBytesAuto);
}

// The shipped file documents the defaults: a node that runs it gets what a
// daemon without a file gets, quotas included.
TEST(Config, ShippedConfigStatesTheDefaultQuotasAndBudgets) {
  DaemonOptions shipped;
  ASSERT_TRUE(
      ApplyConfigFile(std::string(BLOCKSWAP_SOURCE_DIR) + "/deploy/blockswapd.toml", shipped).ok());
  const DaemonOptions defaults;
  for (const ConfigField& field : ConfigFields()) {
    const std::string key = field.key;
    if (!absl::StartsWith(key, "max_") && key != "device_memory_reserve_bytes") continue;
    EXPECT_EQ(field.show(shipped), field.show(defaults)) << key;
  }
  EXPECT_NE(defaults.quotas.per_client.sessions, 0u) << "a system service needs quotas";
}

TEST(Config, ShippedConfigIsValidAndSetsEveryKey) {
  DaemonOptions o;
  const std::string path = std::string(BLOCKSWAP_SOURCE_DIR) + "/deploy/blockswapd.toml";
  absl::Status s = ApplyConfigFile(path, o);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(o.socket_path, "/run/blockswap/blockswapd.sock");
  EXPECT_EQ(o.socket_group, "blockswap");
  EXPECT_EQ(o.metrics_listen, "");                        // off by default
  EXPECT_EQ(o.model_access, ModelAccess::kAllowedUsers);  // the shipped default
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  for (const ConfigField& field : ConfigFields()) {
    EXPECT_TRUE(absl::StrContains(text.str(), absl::StrCat("\n", field.key, " = ")))
        << field.key << " is not documented in deploy/blockswapd.toml";
  }
}

}  // namespace
}  // namespace blockswap::daemon
