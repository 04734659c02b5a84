// What blockswapctl prints: the Admin service's replies as aligned tables for
// people and as JSON documents for machines, plus the health verdict.
//
// Pure functions of the reply messages (no gRPC calls, no I/O), so that every
// format is unit-tested on hand-built replies. Thread-safe.
//
// The JSON documents are an interface: keys are snake_case and stable,
// quantities are JSON numbers (bytes, seconds, counts), absent values are
// null. Identifiers that are not quantities and do not fit a double exactly
// (the 64-bit random boot id) are hex strings, because jq and JavaScript read
// every number as a double.
#ifndef BLOCKSWAP_TOOLS_BLOCKSWAPCTL_ADMIN_FORMAT_H_
#define BLOCKSWAP_TOOLS_BLOCKSWAPCTL_ADMIN_FORMAT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "blockswap/v1/blockswap.pb.h"

namespace blockswap::ctl {

// --- Human units -------------------------------------------------------------

// "512 B", "1.5 KiB", "22.1 GiB" (binary units, one decimal).
std::string HumanBytes(uint64_t bytes);
// "0 s", "32 µs", "850 ms", "12.3 s", "5m 03s", "2h 04m", "3d 07h"; "-" for
// a negative or non-finite value.
std::string HumanDuration(double seconds);
// Decimal gigabytes per second ("12.4"), or "-" when `seconds` is not positive
// (nothing was timed, so there is no rate).
std::string HumanRate(uint64_t bytes, double seconds);
// The first 16 hex digits and "…": enough to tell models apart in a table.
// Shorter ids are returned whole.
std::string ShortModelId(absl::string_view model_id);
// 16 lowercase hex digits, zero-padded.
std::string BootIdHex(uint64_t boot_id);
// "host", "cuda" or "unspecified".
std::string BackendName(v1::Backend backend);

// --- Tables --------------------------------------------------------------------

// Left-aligned columns separated by two spaces, widths from the widest cell
// (UTF-8 aware, so "…" counts as one column). Control characters in cells are
// shown as '?': client names are free text chosen by any attached process
// and must not be able to move the operator's cursor or forge lines.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> headers);
  // Missing trailing cells are blank; extra cells are an error of the caller
  // and are dropped.
  void AddRow(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }
  // Every line ends in '\n'; no trailing spaces.
  std::string Render() const;
  // At most `max_width` display columns a line: the rightmost columns are
  // dropped while the table is wider (so put the important ones first; the
  // first is always kept), then lines still too wide are cut, ending in "…".
  std::string Render(size_t max_width) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// --- One format per command ---------------------------------------------------
// Each command's text, and its JSON: the reply in the proto's canonical JSON
// mapping (protobuf's printer: the proto's field names, every field, 64-bit
// integers as strings, enums by name) with only derived and withheld fields
// added or nulled, as each function says.

std::string StatusText(const v1::StatusReply& reply);
// Adds `healthy` per device; counters the caller may not see are null.
nlohmann::json StatusJson(const v1::StatusReply& reply);

std::string ClientsText(const v1::ClientsReply& reply);
nlohmann::json ClientsJson(const v1::ClientsReply& reply);

std::string ModelsText(const v1::ModelsReply& reply);
nlohmann::json ModelsJson(const v1::ModelsReply& reply);

std::string ResidencyText(const v1::ResidencyReply& reply);
// A slot never filled has a null model_id and block.
nlohmann::json ResidencyJson(const v1::ResidencyReply& reply);

std::string StatsText(const v1::StatsReply& reply);
// `stats --watch` on a terminal: per device and client, loads/s and GB/s
// over the `seconds` between `before` and `now` ("-" on the first frame, for
// a session or device new since `before`, and across a daemon restart), then
// the totals; fitted to `width` columns.
std::string StatsWatchText(const v1::StatsReply& now, const v1::StatsReply* before, double seconds,
                           size_t width);
// Adds gb_per_second per device (null before any copy was timed), and
// passes_reported and latest_passes (by direction) per client.
nlohmann::json StatsJson(const v1::StatsReply& reply);

// The most recent pass of each direction, "forward" first, "backward" second,
// any other direction after them in name order. `passes` is newest last.
std::vector<const v1::PassStats*> LatestPassPerDirection(
    const google::protobuf::RepeatedPtrField<v1::PassStats>& passes);

// --- Health --------------------------------------------------------------------

struct HealthVerdict {
  bool healthy = false;
  std::string reason;  // one line; empty when healthy
};

// Healthy when no device reports an error; otherwise the reason names every
// failed device and its error.
HealthVerdict JudgeHealth(const v1::StatusReply& reply);
// `reply` is null when the daemon did not answer.
nlohmann::json HealthJson(absl::string_view socket_path, const HealthVerdict& verdict,
                          const v1::StatusReply* reply);

// One line saying why a call to the daemon at `socket_path` failed. An
// unreachable daemon is said to be so, with the path and gRPC's message; a
// refusal (PERMISSION_DENIED and the like) is the daemon's own message, which
// already says what was wrong.
std::string DescribeCallFailure(absl::string_view socket_path, const absl::Status& status);

// Serialises a document: two-space indent, invalid UTF-8 replaced rather than
// thrown on.
std::string DumpJson(const nlohmann::json& document);
// The same document on one line (no newline inside it): a record of an NDJSON
// stream (`--json stats --watch` into a pipe).
std::string DumpJsonLine(const nlohmann::json& document);

}  // namespace blockswap::ctl

#endif  // BLOCKSWAP_TOOLS_BLOCKSWAPCTL_ADMIN_FORMAT_H_
