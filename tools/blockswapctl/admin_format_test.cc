// blockswapctl's formats, on hand-built Admin replies.
#include "tools/blockswapctl/admin_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace blockswap::ctl {
namespace {

// The test binaries link GoogleTest without gmock; this stands in for
// HasSubstr.
::testing::AssertionResult Contains(const std::string& text, const std::string& needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << needle << "' not in:\n" << text;
}

const std::string kModelId = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kOtherModelId =
    "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// The column (in code points) where `needle` starts in `line`.
size_t ColumnOf(const std::string& line, const std::string& needle) {
  size_t byte = line.find(needle);
  EXPECT_NE(byte, std::string::npos) << needle << " not in: " << line;
  size_t column = 0;
  for (size_t i = 0; i < byte; ++i) column += (line[i] & 0xC0) != 0x80;
  return column;
}

v1::PassStats Pass(const std::string& direction, double stall, double copy, uint64_t waits) {
  v1::PassStats pass;
  pass.set_direction(direction);
  pass.set_stall_seconds(stall);
  pass.set_host_wait_seconds(stall + 1);  // a number of its own, shown in its own column
  pass.set_copy_seconds(copy);
  pass.set_waits(waits);
  pass.set_not_ready_waits(waits / 2);
  pass.set_self_heals(1);
  pass.set_loads(waits);
  return pass;
}

// --- units -------------------------------------------------------------------------

TEST(HumanBytes, UsesBinaryUnitsWithOneDecimal) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.0 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(uint64_t{5} << 29), "2.5 GiB");
  EXPECT_EQ(HumanBytes(uint64_t{25276059648}), "23.5 GiB");
}

TEST(HumanBytes, NeverPrints1024OfAUnit) {
  EXPECT_EQ(HumanBytes((uint64_t{1} << 20) - 1), "1.0 MiB");
  EXPECT_EQ(HumanBytes(std::numeric_limits<uint64_t>::max()), "16.0 EiB");
}

TEST(HumanDuration, PicksAUnitForTheMagnitude) {
  EXPECT_EQ(HumanDuration(0), "0 s");
  EXPECT_EQ(HumanDuration(3.2e-5), "32 \u00b5s");
  EXPECT_EQ(HumanDuration(0.0009996), "1 ms");
  EXPECT_EQ(HumanDuration(0.85), "850 ms");
  EXPECT_EQ(HumanDuration(0.9996), "1.0 s");
  EXPECT_EQ(HumanDuration(12.34), "12.3 s");
  EXPECT_EQ(HumanDuration(59.96), "1m 00s");
  EXPECT_EQ(HumanDuration(183), "3m 03s");
  EXPECT_EQ(HumanDuration(2 * 3600 + 4 * 60 + 10), "2h 04m");
  EXPECT_EQ(HumanDuration(3 * 86400 + 7 * 3600), "3d 07h");
}

TEST(HumanDuration, NegativeOrNonFiniteIsADash) {
  EXPECT_EQ(HumanDuration(-1), "-");
  EXPECT_EQ(HumanDuration(std::nan("")), "-");
  EXPECT_EQ(HumanDuration(std::numeric_limits<double>::infinity()), "-");
  EXPECT_NE(HumanDuration(1e300), "-");  // absurd but finite: no overflow
}

TEST(HumanRate, IsBytesOverCopySecondsInGigabytes) {
  EXPECT_EQ(HumanRate(uint64_t{10'000'000'000}, 1.0), "10.0");
  EXPECT_EQ(HumanRate(uint64_t{24'600'000'000}, 2.0), "12.3");
  EXPECT_EQ(HumanRate(uint64_t{250'000'000'000}, 1.0), "250");
  EXPECT_EQ(HumanRate(500'000'000, 1.0), "0.50");
  EXPECT_EQ(HumanRate(1'000'000, 1.0), "<0.01");
  EXPECT_EQ(HumanRate(0, 1.0), "0.0");
}

TEST(HumanRate, IsADashWhenNothingWasTimed) {
  EXPECT_EQ(HumanRate(1'000'000'000, 0), "-");
  EXPECT_EQ(HumanRate(1'000'000'000, -1), "-");
  EXPECT_EQ(HumanRate(1'000'000'000, std::nan("")), "-");
}

TEST(ShortModelId, KeepsSixteenHexDigitsAndAnEllipsis) {
  EXPECT_EQ(ShortModelId(kModelId), "0123456789abcdef\xE2\x80\xA6");
  EXPECT_EQ(ShortModelId("abc"), "abc");
  EXPECT_EQ(ShortModelId("0123456789abcdef"), "0123456789abcdef");
}

TEST(BootIdHex, IsSixteenZeroPaddedDigits) {
  EXPECT_EQ(BootIdHex(0x3eb), "00000000000003eb");
  EXPECT_EQ(BootIdHex(0xfedcba9876543210), "fedcba9876543210");
}

// --- tables ------------------------------------------------------------------------

TEST(TextTable, AlignsColumnsOnTheWidestCell) {
  TextTable table({"A", "LONG HEADER", "C"});
  table.AddRow({"wide cell", "x", "1"});
  table.AddRow({"y", "z", "22"});
  std::vector<std::string> lines = Lines(table.Render());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "A          LONG HEADER  C");
  EXPECT_EQ(lines[1], "wide cell  x            1");
  EXPECT_EQ(lines[2], "y          z            22");
}

TEST(TextTable, CountsAnEllipsisAsOneColumn) {
  TextTable table({"ID", "NAME"});
  table.AddRow({ShortModelId(kModelId), "m"});
  std::vector<std::string> lines = Lines(table.Render());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(ColumnOf(lines[0], "NAME"), ColumnOf(lines[1], "m"));
  EXPECT_EQ(ColumnOf(lines[0], "NAME"), 17u + 2u);
}

TEST(TextTable, LeavesNoTrailingSpaces) {
  TextTable table({"A", "B"});
  table.AddRow({"long value", ""});
  table.AddRow({"x"});  // a short row is padded with blank cells
  for (const std::string& line : Lines(table.Render())) {
    EXPECT_NE(line.back(), ' ') << "'" << line << "'";
  }
}

TEST(TextTable, DropsRightmostColumnsToFitAWidth) {
  TextTable table({"FIRST", "SECOND", "THIRD"});
  table.AddRow({"aaaaa", "bbbbbb", "ccccc"});
  EXPECT_EQ(table.Render(80), "FIRST  SECOND  THIRD\naaaaa  bbbbbb  ccccc\n");
  EXPECT_EQ(table.Render(20), "FIRST  SECOND  THIRD\naaaaa  bbbbbb  ccccc\n");  // exactly
  EXPECT_EQ(table.Render(19), "FIRST  SECOND\naaaaa  bbbbbb\n");
  EXPECT_EQ(table.Render(5), "FIRST\naaaaa\n");
}

TEST(TextTable, CutsTheFirstColumnWhenNothingElseFits) {
  TextTable table({"DEVICE", "LOADS/s"});
  table.AddRow({"GPU-0123456789abcdef", "12"});
  // One column is always kept; its lines end in an ellipsis at the width.
  EXPECT_EQ(table.Render(8), "DEVICE\nGPU-012\xE2\x80\xA6\n");
}

TEST(TextTable, ShowsControlCharactersAsQuestionMarks) {
  TextTable table({"NAME"});
  table.AddRow({"evil\x1b[2J\nline"});
  table.AddRow({"c1\u009b31m"});  // U+009B, the C1 control sequence introducer
  std::string text = table.Render();
  EXPECT_EQ(text, "NAME\nevil?[2J?line\nc1?31m\n");
}

// --- status ------------------------------------------------------------------------

v1::StatusReply SampleStatus() {
  v1::StatusReply reply;
  reply.set_version("0.1.0");
  reply.set_backend(v1::BACKEND_CUDA);
  reply.set_boot_id(0xfedcba9876543210);
  reply.set_uptime_seconds(183);
  reply.set_pinned_bytes(uint64_t{5} << 29);
  reply.set_master_blocks(12);
  reply.set_staged_bytes(uint64_t{3} << 30);
  reply.set_staged_blocks(3);
  reply.set_pinning("auto");
  v1::Device* good = reply.add_devices();
  good->set_uuid("GPU-11111111-2222-3333-4444-555555555555");
  good->set_name("NVIDIA H200");
  good->set_total_memory_bytes(uint64_t{141} << 30);
  v1::Device* bad = reply.add_devices();
  bad->set_uuid("GPU-66666666-7777-8888-9999-000000000000");
  bad->set_name("NVIDIA H200");
  bad->set_total_memory_bytes(uint64_t{141} << 30);
  bad->set_error("cudaErrorIllegalAddress: an illegal memory access\nwas encountered");
  return reply;
}

TEST(StatusText, ShowsTheDaemonAndADeviceTable) {
  std::string text = StatusText(SampleStatus());
  EXPECT_TRUE(Contains(text, "version  0.1.0\n"));
  EXPECT_TRUE(Contains(text, "backend  cuda\n"));
  EXPECT_TRUE(Contains(text, "boot id  fedcba9876543210\n"));
  EXPECT_TRUE(Contains(text, "uptime   3m 03s\n"));
  EXPECT_TRUE(Contains(text, "pinned   2.5 GiB\n"));
  EXPECT_TRUE(Contains(text, "blocks   12\n"));
  EXPECT_TRUE(Contains(text, "staged   3 of 12 blocks (3.0 GiB)\n"));
  EXPECT_TRUE(Contains(text, "pinning  auto\n"));
  std::vector<std::string> lines = Lines(text);
  auto header = std::find_if(lines.begin(), lines.end(),
                             [](const std::string& l) { return l.rfind("DEVICE", 0) == 0; });
  ASSERT_NE(header, lines.end());
  ASSERT_EQ(lines.end() - header, 3);
  EXPECT_TRUE(Contains(header[1], "141.0 GiB"));
  EXPECT_TRUE(header[1].ends_with("  ok")) << header[1];
  // A multi-line error stays on its device's line.
  EXPECT_TRUE(
      Contains(header[2], "cudaErrorIllegalAddress: an illegal memory access was encountered"));
  EXPECT_EQ(ColumnOf(header[0], "HEALTH"), ColumnOf(header[2], "cudaError"));
}

// What a script can rely on: the proto's field names and its canonical JSON
// mapping (64-bit integers as decimal strings, 32-bit ones and doubles as
// numbers, enums by name), with `healthy` derived per device.
TEST(StatusJson, IsTheProtosCanonicalJsonWithHealthPerDevice) {
  nlohmann::json json = StatusJson(SampleStatus());
  EXPECT_EQ(json["version"], "0.1.0");
  EXPECT_EQ(json["backend"], "BACKEND_CUDA");
  EXPECT_EQ(json["boot_id"], absl::StrCat(uint64_t{0xfedcba9876543210}));
  EXPECT_TRUE(json["uptime_seconds"].is_number());
  EXPECT_EQ(json["pinned_bytes"], absl::StrCat(uint64_t{5} << 29));
  EXPECT_EQ(json["staged_bytes"], absl::StrCat(uint64_t{3} << 30));
  EXPECT_TRUE(json["staged_blocks"].is_number()) << "a uint32 is a number";
  EXPECT_EQ(json["pinning"], "auto");
  EXPECT_EQ(json["store_counters_withheld"], "") << "every field, its default too";
  ASSERT_EQ(json["devices"].size(), 2u);
  EXPECT_EQ(json["devices"][0]["uuid"], "GPU-11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(json["devices"][0]["total_memory_bytes"], absl::StrCat(uint64_t{141} << 30));
  EXPECT_EQ(json["devices"][0]["healthy"], true);
  EXPECT_EQ(json["devices"][0]["error"], "");
  EXPECT_EQ(json["devices"][1]["healthy"], false);
  // The document survives a round trip through text.
  EXPECT_EQ(nlohmann::json::parse(DumpJson(json)), json);
}

// What a caller that may not see the store's counters gets: the daemon leaves
// them unset (reading 0) and says why.
v1::StatusReply WithheldStatus() {
  v1::StatusReply reply = SampleStatus();
  for (const char* field : {"pinned_bytes", "file_reads", "file_bytes_read", "evictions",
                            "master_blocks", "staged_bytes", "staged_blocks"}) {
    reply.GetReflection()->ClearField(&reply, reply.GetDescriptor()->FindFieldByName(field));
  }
  reply.set_store_counters_withheld("model_access = registrant-group");
  return reply;
}

TEST(StatusText, SaysWithheldCountersAreWithheldNotZero) {
  std::string text = StatusText(WithheldStatus());
  EXPECT_TRUE(Contains(text, "pinned   withheld (model_access = registrant-group)\n")) << text;
  EXPECT_TRUE(Contains(text, "blocks   withheld (model_access = registrant-group)\n")) << text;
  EXPECT_TRUE(Contains(text, "staged   withheld (model_access = registrant-group)\n")) << text;
  EXPECT_FALSE(Contains(text, "0 B")) << text;
  EXPECT_TRUE(Contains(text, "pinning  auto\n")) << "what is not withheld is still shown";
}

TEST(StatusJson, WithheldCountersAreNullAndSayWhy) {
  nlohmann::json json = StatusJson(WithheldStatus());
  for (const char* key : {"pinned_bytes", "master_blocks", "staged_bytes", "staged_blocks",
                          "file_reads", "file_bytes_read", "evictions"}) {
    EXPECT_TRUE(json[key].is_null()) << key << ": " << json[key];
  }
  EXPECT_EQ(json["store_counters_withheld"], "model_access = registrant-group");
  EXPECT_EQ(StatusJson(SampleStatus())["store_counters_withheld"], "");
  EXPECT_EQ(StatusJson(SampleStatus())["master_blocks"], "12");
}

// --- health ------------------------------------------------------------------------

TEST(JudgeHealth, HealthyWhenNoDeviceReportsAnError) {
  v1::StatusReply reply = SampleStatus();
  reply.mutable_devices()->RemoveLast();
  HealthVerdict verdict = JudgeHealth(reply);
  EXPECT_TRUE(verdict.healthy);
  EXPECT_EQ(verdict.reason, "");
}

TEST(JudgeHealth, NamesTheFailedDeviceAndItsErrorOnOneLine) {
  HealthVerdict verdict = JudgeHealth(SampleStatus());
  EXPECT_FALSE(verdict.healthy);
  EXPECT_EQ(verdict.reason,
            "device GPU-66666666-7777-8888-9999-000000000000 (NVIDIA H200): "
            "cudaErrorIllegalAddress: an illegal memory access was encountered");
}

TEST(JudgeHealth, NamesEveryFailedDevice) {
  v1::StatusReply reply = SampleStatus();
  reply.mutable_devices(0)->set_error("ECC error");
  HealthVerdict verdict = JudgeHealth(reply);
  EXPECT_FALSE(verdict.healthy);
  EXPECT_TRUE(Contains(verdict.reason, "GPU-11111111-2222-3333-4444-555555555555"));
  EXPECT_TRUE(Contains(verdict.reason, "; device GPU-66666666"));
  EXPECT_EQ(verdict.reason.find('\n'), std::string::npos);
}

TEST(HealthJson, CarriesTheVerdictTheSocketAndTheStatus) {
  v1::StatusReply reply = SampleStatus();
  nlohmann::json json = HealthJson("/run/x.sock", JudgeHealth(reply), &reply);
  EXPECT_EQ(json["healthy"], false);
  EXPECT_TRUE(Contains(json["reason"].get<std::string>(), "GPU-66666666"));
  EXPECT_EQ(json["socket"], "/run/x.sock");
  EXPECT_EQ(json["status"]["backend"], "BACKEND_CUDA");
}

TEST(HealthJson, StatusIsNullWhenTheDaemonDidNotAnswer) {
  nlohmann::json json =
      HealthJson("/run/x.sock", {.healthy = false, .reason = "unreachable"}, nullptr);
  EXPECT_EQ(json["healthy"], false);
  EXPECT_TRUE(json["status"].is_null());
}

TEST(DescribeCallFailure, AnUnreachableDaemonNamesTheSocketAndGrpcsMessage) {
  std::string text = DescribeCallFailure(
      "/run/blockswap/blockswapd.sock",
      absl::UnavailableError("failed to connect to all addresses; last error: UNKNOWN: "
                             "unix:/run/blockswap/blockswapd.sock: No such file or directory"));
  EXPECT_EQ(text.rfind("blockswapd is unreachable at /run/blockswap/blockswapd.sock: ", 0), 0u)
      << text;
  EXPECT_TRUE(Contains(text, "No such file or directory"));
}

TEST(DescribeCallFailure, PassesTheDaemonsRefusalThrough) {
  EXPECT_EQ(DescribeCallFailure(
                "/s", absl::PermissionDeniedError("uid 1001 is not allowed (allowed uids: 0)")),
            "uid 1001 is not allowed (allowed uids: 0)");
}

TEST(DescribeCallFailure, IsOneLineAndNeverEmpty) {
  EXPECT_EQ(DescribeCallFailure("/s", absl::InternalError("a\nb")), "a b");
  EXPECT_EQ(DescribeCallFailure("/s", absl::Status(absl::StatusCode::kInternal, "")),
            "INTERNAL from blockswapd at /s");
  EXPECT_TRUE(Contains(DescribeCallFailure("/s", absl::DeadlineExceededError("Deadline Exceeded")),
                       "/s did not answer in time"));
}

// --- clients -----------------------------------------------------------------------

v1::ClientsReply SampleClients() {
  v1::ClientsReply reply;
  v1::ClientInfo* a = reply.add_clients();
  a->set_session_id(3);
  a->set_client_name("trainer-rank0");
  a->set_pid(4242);
  a->set_uid(1000);
  a->set_gid(1000);
  a->set_copy(v1::COPY_PATH_DAEMON);
  a->set_ring_count(2);
  a->set_loads(1523);
  a->add_device_uuids("HOST-0");
  a->add_device_uuids("HOST-1");
  a->set_attached_seconds(302);
  v1::ClientInfo* b = reply.add_clients();
  b->set_session_id(17);
  b->set_pid(7);
  b->set_copy(v1::COPY_PATH_TRAINER);
  b->set_attached_seconds(0.25);
  return reply;
}

TEST(ClientsText, ShowsOneAlignedLinePerSession) {
  std::vector<std::string> lines = Lines(ClientsText(SampleClients()));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "SESSION  PID   UID   NAME           COPY     RINGS  LOADS  DEVICES        ATTACHED");
  EXPECT_EQ(lines[1],
            "3        4242  1000  trainer-rank0  daemon   2      1523   HOST-0,HOST-1  5m 02s");
  EXPECT_EQ(lines[2],
            "17       7     0     -              trainer  0      0      -              250 ms");
}

TEST(ClientsText, SaysSoWhenNoneIsAttached) {
  EXPECT_EQ(ClientsText(v1::ClientsReply()), "no clients attached\n");
}

TEST(ClientsJson, ListsEveryField) {
  nlohmann::json json = ClientsJson(SampleClients());
  ASSERT_EQ(json["clients"].size(), 2u);
  const nlohmann::json& a = json["clients"][0];
  EXPECT_EQ(a["session_id"], "3");
  EXPECT_EQ(a["client_name"], "trainer-rank0");
  EXPECT_EQ(a["pid"], 4242);
  EXPECT_EQ(a["uid"], 1000);
  EXPECT_EQ(a["gid"], 1000);
  EXPECT_EQ(a["copy"], "COPY_PATH_DAEMON");
  EXPECT_EQ(json["clients"][1]["copy"], "COPY_PATH_TRAINER");
  EXPECT_EQ(a["ring_count"], 2);
  EXPECT_EQ(a["loads"], "1523");
  EXPECT_EQ(a["device_uuids"], nlohmann::json({"HOST-0", "HOST-1"}));
  EXPECT_EQ(a["attached_seconds"], 302.0);
  EXPECT_TRUE(json["clients"][1]["device_uuids"].is_array());
  EXPECT_TRUE(ClientsJson(v1::ClientsReply())["clients"].is_array());
}

// --- models ------------------------------------------------------------------------

v1::ModelsReply SampleModels() {
  v1::ModelsReply reply;
  v1::ModelInfo* model = reply.add_models();
  model->set_model_id(kModelId);
  model->set_name("flux-dev");
  model->set_block_count(57);
  model->set_bytes(uint64_t{23729694310});
  model->set_shared_bytes(uint64_t{3} << 30);
  model->set_open_sessions(2);
  model->set_source("file /models/flux-dev.safetensors");
  model->set_pinned(true);
  model->set_references(3);
  return reply;
}

TEST(ModelsText, ShortensTheIdInTheTable) {
  std::vector<std::string> lines = Lines(ModelsText(SampleModels()));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "ID                 NAME      BLOCKS  BYTES     SHARED   OPEN  REFS  PINNED  COPY    "
            "SOURCE");
  EXPECT_EQ(
      lines[1],
      "0123456789abcdef\xE2\x80\xA6  flux-dev  57      22.1 GiB  3.0 GiB  2     3     yes     "
      "direct  file /models/flux-dev.safetensors");
  EXPECT_EQ(ModelsText(v1::ModelsReply()), "no models registered\n");
}

TEST(ModelsJson, KeepsTheFullId) {
  nlohmann::json json = ModelsJson(SampleModels());
  ASSERT_EQ(json["models"].size(), 1u);
  EXPECT_EQ(json["models"][0]["model_id"], kModelId);
  EXPECT_EQ(json["models"][0]["name"], "flux-dev");
  EXPECT_EQ(json["models"][0]["block_count"], 57);
  EXPECT_EQ(json["models"][0]["bytes"], "23729694310");
  EXPECT_EQ(json["models"][0]["shared_bytes"], absl::StrCat(uint64_t{3} << 30));
  EXPECT_EQ(json["models"][0]["open_sessions"], 2);
  EXPECT_EQ(json["models"][0]["source"], "file /models/flux-dev.safetensors");
  EXPECT_EQ(json["models"][0]["pinned"], true);
  EXPECT_EQ(json["models"][0]["staged_blocks"], 0);
  EXPECT_EQ(json["models"][0]["references"], "3");
}

TEST(ModelsText, SaysWhichModelsAreStaged) {
  v1::ModelsReply reply = SampleModels();
  reply.mutable_models(0)->set_pinned(false);
  reply.mutable_models(0)->set_staged_blocks(57);
  std::vector<std::string> lines = Lines(ModelsText(reply));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find(" no      staged  file "), std::string::npos) << lines[1];
  EXPECT_EQ(ModelsJson(reply)["models"][0]["staged_blocks"], 57);
  reply.mutable_models(0)->set_staged_blocks(5);
  lines = Lines(ModelsText(reply));
  EXPECT_NE(lines[1].find(" no      5/57 staged  file "), std::string::npos) << lines[1];
}

TEST(StatusText, SaysNoneOrAllStaged) {
  v1::StatusReply reply = SampleStatus();
  reply.set_staged_blocks(0);
  reply.set_staged_bytes(0);
  EXPECT_TRUE(Contains(StatusText(reply), "staged   none\n"));
  reply.set_staged_blocks(12);
  reply.set_staged_bytes(uint64_t{3} << 30);
  EXPECT_TRUE(Contains(StatusText(reply), "staged   all (3.0 GiB)\n"));
}

// --- residency ---------------------------------------------------------------------

v1::ResidencyReply SampleResidency() {
  v1::ResidencyReply reply;
  // Reported out of order: the table sorts by device, session, ring.
  v1::RingResidency* later = reply.add_rings();
  later->set_device_uuid("HOST-1");
  later->set_session_id(3);
  later->set_ring_id(9);
  v1::SlotResidency* slot = later->add_slots();
  slot->set_slot(0);
  slot->set_model_id(kOtherModelId);
  slot->set_block(0);
  slot->set_filled_seq(1);
  slot->set_consumed_seq(0);

  v1::RingResidency* first = reply.add_rings();
  first->set_device_uuid("HOST-0");
  first->set_session_id(3);
  first->set_ring_id(4);
  slot = first->add_slots();
  slot->set_slot(0);
  slot->set_model_id(kModelId);
  slot->set_block(6);
  slot->set_filled_seq(12);
  slot->set_consumed_seq(11);
  slot = first->add_slots();
  slot->set_slot(1);  // never filled
  return reply;
}

TEST(ResidencyText, ShowsOneLinePerSlotGroupedByRing) {
  std::vector<std::string> lines = Lines(ResidencyText(SampleResidency()));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "DEVICE  SESSION  RING  SLOT  MODEL              BLOCK  FILLED  CONSUMED");
  EXPECT_EQ(lines[1],
            "HOST-0  3        4     0     0123456789abcdef\xE2\x80\xA6  6      12      11");
  EXPECT_EQ(lines[2], "HOST-0  3        4     1     -                  -      0       0");
  EXPECT_EQ(lines[3],
            "HOST-1  3        9     0     fedcba9876543210\xE2\x80\xA6  0      1       0");
  EXPECT_EQ(ResidencyText(v1::ResidencyReply()), "no rings\n");
}

TEST(ResidencyJson, NeverFilledIsNullAndBlockZeroIsZero) {
  nlohmann::json json = ResidencyJson(SampleResidency());
  ASSERT_EQ(json["rings"].size(), 2u);
  const nlohmann::json& host1 = json["rings"][0];
  EXPECT_EQ(host1["device_uuid"], "HOST-1");
  EXPECT_EQ(host1["ring_id"], "9");
  EXPECT_EQ(host1["slots"][0]["model_id"], kOtherModelId);
  EXPECT_EQ(host1["slots"][0]["block"], 0);
  const nlohmann::json& host0 = json["rings"][1];
  EXPECT_EQ(host0["session_id"], "3");
  EXPECT_EQ(host0["slots"][0]["filled_seq"], 12);
  EXPECT_EQ(host0["slots"][0]["consumed_seq"], 11);
  EXPECT_TRUE(host0["slots"][1]["model_id"].is_null());
  EXPECT_TRUE(host0["slots"][1]["block"].is_null());
}

// --- stats -------------------------------------------------------------------------

v1::StatsReply SampleStats() {
  v1::StatsReply reply;
  v1::DeviceStats* busy = reply.add_devices();
  busy->set_device_uuid("HOST-0");
  busy->set_loads(1200);
  busy->set_bytes_copied(uint64_t{24'600'000'000});
  busy->set_copy_seconds(2.0);
  busy->set_queue_depth(1);
  busy->set_protocol_errors(0);
  busy->set_rings(2);
  busy->set_releases_at_request(3);
  busy->set_releases_notified(1190);
  v1::DeviceStats* idle = reply.add_devices();
  idle->set_device_uuid("HOST-1");

  v1::ClientStats* trainer = reply.add_clients();
  trainer->set_session_id(3);
  trainer->set_client_name("trainer");
  trainer->set_loads(1200);
  trainer->set_rejected_loads(1);
  trainer->set_bytes(uint64_t{24'600'000'000});
  *trainer->add_passes() = Pass("forward", 0.5, 1.0, 10);  // superseded
  *trainer->add_passes() = Pass("backward", 0.25, 0.75, 20);
  *trainer->add_passes() = Pass("forward", 0.125, 1.5, 30);  // the latest forward
  v1::ClientStats* quiet = reply.add_clients();
  quiet->set_session_id(4);
  quiet->set_client_name("quiet");
  return reply;
}

TEST(LatestPassPerDirection, ForwardThenBackwardThenOthersByName) {
  google::protobuf::RepeatedPtrField<v1::PassStats> passes;
  *passes.Add() = Pass("sample", 0, 0, 1);
  *passes.Add() = Pass("backward", 0, 0, 2);
  *passes.Add() = Pass("forward", 0, 0, 3);
  *passes.Add() = Pass("backward", 0, 0, 4);
  *passes.Add() = Pass("eval", 0, 0, 5);
  std::vector<const v1::PassStats*> latest = LatestPassPerDirection(passes);
  ASSERT_EQ(latest.size(), 4u);
  EXPECT_EQ(latest[0]->waits(), 3u);
  EXPECT_EQ(latest[1]->waits(), 4u);
  EXPECT_EQ(latest[2]->direction(), "eval");
  EXPECT_EQ(latest[3]->direction(), "sample");
}

TEST(StatsText, DeviceTableComputesGigabytesPerSecond) {
  std::vector<std::string> lines = Lines(StatsText(SampleStats()));
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "DEVICE  LOADS  BYTES     COPY TIME  GB/s  QUEUE  PROTOCOL ERRORS  RINGS  "
            "RELEASES REQ/NOTIFIED");
  EXPECT_EQ(lines[1],
            "HOST-0  1200   22.9 GiB  2.0 s      12.3  1      0                2      3/1190");
  EXPECT_EQ(lines[2],
            "HOST-1  0      0 B       0 s        -     0      0                0      0/0");
}

TEST(StatsText, ClientTableShowsTheLatestPassOfEachDirection) {
  std::vector<std::string> lines = Lines(StatsText(SampleStats()));
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[3], "");
  EXPECT_EQ(lines[4],
            "SESSION  NAME     LOADS  REJECTED  BYTES     PASSES  LAST PASS  STALL S  HOST WAIT S  "
            "COPY S  WAITS  NOT-READY  SELF-HEALS");
  EXPECT_EQ(lines[5],
            "3        trainer  1200   1         22.9 GiB  3       forward    0.125    1.125        "
            "1.500   30     15         1");
  // The second direction's line leaves the client's own columns blank.
  EXPECT_EQ(lines[6].find_first_not_of(' '), ColumnOf(lines[4], "LAST PASS"));
  EXPECT_EQ(lines[6].substr(ColumnOf(lines[4], "LAST PASS")),
            "backward   0.250    1.250        0.750   20     10         1");
  EXPECT_EQ(lines[7],
            "4        quiet    0      0         0 B       0       -          -        -            "
            "-       -      -          -");
}

TEST(StatsText, SaysSoWhenNoClientIsAttached) {
  v1::StatsReply reply = SampleStats();
  reply.clear_clients();
  EXPECT_TRUE(Contains(StatsText(reply), "\n\nno clients attached\n"));
  EXPECT_FALSE(Contains(StatsText(reply), "SESSION"));
}

TEST(StatsJson, HasRatesCountsAndTheLatestPasses) {
  nlohmann::json json = StatsJson(SampleStats());
  ASSERT_EQ(json["devices"].size(), 2u);
  EXPECT_EQ(json["devices"][0]["device_uuid"], "HOST-0");
  EXPECT_EQ(json["devices"][0]["bytes_copied"], "24600000000");
  EXPECT_DOUBLE_EQ(json["devices"][0]["gb_per_second"].get<double>(), 12.3);
  EXPECT_EQ(json["devices"][0]["queue_depth"], "1");
  EXPECT_EQ(json["devices"][0]["protocol_errors"], "0");
  EXPECT_EQ(json["devices"][0]["rings"], 2);
  EXPECT_EQ(json["devices"][0]["releases_notified"], "1190");
  EXPECT_TRUE(json["devices"][1]["gb_per_second"].is_null());

  ASSERT_EQ(json["clients"].size(), 2u);
  const nlohmann::json& trainer = json["clients"][0];
  EXPECT_EQ(trainer["session_id"], "3");
  EXPECT_EQ(trainer["client_name"], "trainer");
  EXPECT_EQ(trainer["rejected_loads"], "1");
  EXPECT_EQ(trainer["passes_reported"], 3);
  EXPECT_EQ(trainer["passes"].size(), 3u);
  EXPECT_EQ(trainer["latest_passes"]["forward"]["waits"], "30");
  EXPECT_EQ(trainer["latest_passes"]["forward"]["stall_seconds"], 0.125);
  EXPECT_EQ(trainer["latest_passes"]["forward"]["host_wait_seconds"], 1.125);
  EXPECT_EQ(trainer["latest_passes"]["backward"]["not_ready_waits"], "10");
  EXPECT_EQ(trainer["latest_passes"]["backward"]["self_heals"], "1");
  EXPECT_TRUE(json["clients"][1]["latest_passes"].is_object());
  EXPECT_TRUE(json["clients"][1]["latest_passes"].empty());
}

TEST(DumpJson, ReplacesInvalidUtf8InsteadOfThrowing) {
  nlohmann::json json = {{"name", std::string("bad\xFF")}};
  std::string text;
  ASSERT_NO_THROW(text = DumpJson(json));
  EXPECT_TRUE(nlohmann::json::accept(text)) << text;
}

TEST(StatsWatchText, RatesOverTheIntervalThenTotals) {
  v1::StatsReply before = SampleStats();
  v1::StatsReply now = SampleStats();
  now.mutable_devices(0)->set_loads(1200 + 500);
  now.mutable_devices(0)->set_bytes_copied(uint64_t{24'600'000'000} + 10'000'000'000);
  now.mutable_clients(0)->set_loads(1200 + 250);
  std::vector<std::string> lines = Lines(StatsWatchText(now, &before, 2.0, 200));
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0], "DEVICE  LOADS/s  GB/s  QUEUE  RINGS  LOADS  BYTES     PROTOCOL ERRORS");
  EXPECT_EQ(lines[1], "HOST-0  250      5.0   1      2      1700   32.2 GiB  0");
  EXPECT_EQ(lines[2], "HOST-1  0.0      0.0   0      0      0      0 B       0");
  EXPECT_EQ(lines[4],
            "SESSION  NAME     LOADS/s  GB/s  STALL S  HOST WAIT S  LOADS  BYTES     "
            "REJECTED");
  EXPECT_EQ(lines[5], "3        trainer  125      0.0   0.125    1.125        1450   22.9 GiB  1");
}

TEST(StatsWatchText, NoRateWithoutABaselineOrAcrossARestart) {
  v1::StatsReply now = SampleStats();
  std::vector<std::string> first = Lines(StatsWatchText(now, nullptr, 0, 200));
  EXPECT_EQ(first[1], "HOST-0  -        -     1      2      1200   22.9 GiB  0");
  v1::StatsReply restarted = SampleStats();
  restarted.mutable_devices(0)->set_loads(5);  // counters began again
  restarted.mutable_devices(0)->set_bytes_copied(5);
  std::vector<std::string> lines = Lines(StatsWatchText(restarted, &now, 2.0, 200));
  EXPECT_EQ(lines[1], "HOST-0  -        -     1      2      5      5 B    0");
}

TEST(StatsWatchText, FitsANarrowTerminal) {
  v1::StatsReply now = SampleStats();
  for (const std::string& line : Lines(StatsWatchText(now, &now, 2.0, 40))) {
    EXPECT_LE(line.size(), 40u) << line;
  }
  std::vector<std::string> lines = Lines(StatsWatchText(now, &now, 2.0, 40));
  EXPECT_EQ(lines[0], "DEVICE  LOADS/s  GB/s  QUEUE  RINGS");
}

}  // namespace
}  // namespace blockswap::ctl
