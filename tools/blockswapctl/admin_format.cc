#include "tools/blockswapctl/admin_format.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"

namespace blockswap::ctl {
namespace {

using nlohmann::json;

constexpr char kEllipsis[] = "\xE2\x80\xA6";  // U+2026, one column wide
constexpr size_t kShortIdDigits = 16;

// Columns a UTF-8 string takes: one per code point (continuation bytes are
// 10xxxxxx). Wide characters are rare enough in names not to matter.
size_t DisplayWidth(absl::string_view text) {
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// The first `width` - 1 columns of `text` and an ellipsis (never a code point
// cut in half).
std::string CutToWidth(absl::string_view text, size_t width) {
  if (width == 0) return "";
  std::string out;
  size_t columns = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool starts_code_point = (text[i] & 0xC0) != 0x80;
    if (starts_code_point && ++columns == width) break;
    out.push_back(text[i]);
  }
  return out + kEllipsis;
}

// Replaces C0 controls, DEL and the C1 controls (U+0080..U+009F, which some
// terminals obey like ESC sequences) with '?'.
std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 || byte == 0x7F) {
      out.push_back('?');
    } else if (byte == 0xC2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      out.push_back('?');
      ++i;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

// Messages may span lines (a CUDA error with context, gRPC's debug string);
// a probe's reason and a table cell must not.
std::string OneLine(absl::string_view text) {
  std::string out(text);
  std::replace_if(
      out.begin(), out.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; }, ' ');
  return out;
}

std::string OrDash(absl::string_view text) { return text.empty() ? "-" : std::string(text); }

// "label  value" lines with the values aligned.
std::string KeyValues(const std::vector<std::pair<std::string, std::string>>& lines) {
  size_t width = 0;
  for (const auto& [key, value] : lines) width = std::max(width, DisplayWidth(key));
  std::string out;
  for (const auto& [key, value] : lines) {
    absl::StrAppend(&out, key, std::string(width - DisplayWidth(key) + 2, ' '), Printable(value),
                    "\n");
  }
  return out;
}

// The message as protobuf's JSON printer writes it, in the proto's canonical
// JSON mapping: the proto's field names, every field (those at their
// defaults too), 64-bit integers as strings and enums by name, as every
// protobuf tool prints them. The views add only what is derived or withheld.
json ProtoJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string text;
  const auto printed = google::protobuf::util::MessageToJsonString(message, &text, options);
  // It fails only on what these messages do not hold (Any, maps of
  // unprintable keys): a bug here, said in place of the document.
  if (!printed.ok()) return {{"error", std::string(printed.message())}};
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::string Seconds3(double seconds) { return absl::StrFormat("%.3f", seconds); }

// A model's COPY column: "direct", "staged" or "3/12 staged".
std::string CopyText(uint32_t staged_blocks, uint32_t block_count) {
  if (staged_blocks == 0) return "direct";
  if (staged_blocks == block_count) return "staged";
  return absl::StrCat(staged_blocks, "/", block_count, " staged");
}

// The status's "staged" line: "none", "all (1.5 GiB)" or "3 of 12 blocks
// (1.5 GiB)".
std::string StagedText(uint32_t staged, uint64_t blocks, uint64_t bytes) {
  if (staged == 0) return "none";
  return absl::StrCat(staged == blocks ? "all" : absl::StrCat(staged, " of ", blocks, " blocks"),
                      " (", HumanBytes(bytes), ")");
}

}  // namespace

std::string HumanBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // Move up a unit before the value would print as "1024.0".
  while (value >= 1023.95 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string HumanDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds == 0) return "0 s";
  // A host-backend copy of a small block takes microseconds; "0 ms" would
  // read as "not measured".
  if (seconds < 1e-3) {
    long microseconds = std::lround(seconds * 1e6);
    if (microseconds < 1000) return absl::StrCat(microseconds, " \u00b5s");
  }
  if (seconds < 1) {
    long milliseconds = std::lround(seconds * 1000);
    if (milliseconds < 1000) return absl::StrCat(milliseconds, " ms");
  }
  if (seconds < 59.95) return absl::StrFormat("%.1f s", seconds);
  // Beyond ~31,000 years the integer conversions below would overflow.
  if (seconds >= 1e12) return absl::StrFormat("%.0fd", seconds / 86400);
  const auto total = static_cast<uint64_t>(std::llround(seconds));
  if (total < 3600) return absl::StrFormat("%dm %02ds", total / 60, total % 60);
  if (total < 86400) return absl::StrFormat("%dh %02dm", total / 3600, total / 60 % 60);
  return absl::StrFormat("%dd %02dh", total / 86400, total / 3600 % 24);
}

std::string HumanRate(uint64_t bytes, double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0) return "-";
  const double rate = static_cast<double>(bytes) / seconds / 1e9;
  if (rate == 0) return "0.0";
  if (rate >= 100) return absl::StrFormat("%.0f", rate);
  if (rate >= 1) return absl::StrFormat("%.1f", rate);
  if (rate >= 0.005) return absl::StrFormat("%.2f", rate);
  return "<0.01";
}

std::string ShortModelId(absl::string_view model_id) {
  if (model_id.size() <= kShortIdDigits) return std::string(model_id);
  return absl::StrCat(model_id.substr(0, kShortIdDigits), kEllipsis);
}

std::string BootIdHex(uint64_t boot_id) { return absl::StrFormat("%016x", boot_id); }

std::string BackendName(v1::Backend backend) {
  switch (backend) {
    case v1::BACKEND_HOST:
      return "host";
    case v1::BACKEND_CUDA:
      return "cuda";
    default:
      return "unspecified";
  }
}

// --- TextTable -------------------------------------------------------------------

TextTable::TextTable(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  for (std::string& cell : cells) cell = Printable(cell);
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render() const { return Render(std::numeric_limits<size_t>::max()); }

std::string TextTable::Render(size_t max_width) const {
  std::vector<size_t> widths(headers_.size(), 0);
  auto measure = [&widths](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  };
  measure(headers_);
  for (const auto& row : rows_) measure(row);

  // Columns [0, shown) fit: each is as wide as its widest cell, 2 spaces apart.
  size_t shown = headers_.size();
  auto total = [&widths](size_t columns) {
    size_t sum = 0;
    for (size_t c = 0; c < columns; ++c) sum += widths[c] + (c > 0 ? 2 : 0);
    return sum;
  };
  while (shown > 1 && total(shown) > max_width) --shown;

  std::string out;
  auto render = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < shown; ++c) {
      if (c > 0) line.append(2, ' ');
      line += row[c];
      if (c + 1 < shown) line.append(widths[c] - DisplayWidth(row[c]), ' ');
    }
    // Blank trailing cells would otherwise leave trailing spaces.
    line.erase(line.find_last_not_of(' ') + 1);
    if (DisplayWidth(line) > max_width) line = CutToWidth(line, max_width);
    absl::StrAppend(&out, line, "\n");
  };
  render(headers_);
  for (const auto& row : rows_) render(row);
  return out;
}

// --- status ------------------------------------------------------------------------

std::string StatusText(const v1::StatusReply& reply) {
  // Withheld counters are unset, and an unset counter reads 0: say so
  // instead of printing a 0 that is not true.
  const std::string withheld =
      reply.store_counters_withheld().empty()
          ? ""
          : absl::StrCat("withheld (", reply.store_counters_withheld(), ")");
  auto counter = [&withheld](std::string value) { return withheld.empty() ? value : withheld; };
  std::string out = KeyValues(
      {{"version", reply.version()},
       {"backend", BackendName(reply.backend())},
       {"boot id", BootIdHex(reply.boot_id())},
       {"uptime", HumanDuration(reply.uptime_seconds())},
       {"pinned", counter(HumanBytes(reply.pinned_bytes()))},
       {"blocks", counter(absl::StrCat(reply.master_blocks()))},
       {"staged",
        counter(StagedText(reply.staged_blocks(), reply.master_blocks(), reply.staged_bytes()))},
       {"pinning", OrDash(reply.pinning())}});
  out += "\n";
  if (reply.devices().empty()) return out + "no devices\n";
  TextTable devices({"DEVICE", "NAME", "MEMORY", "HEALTH"});
  for (const v1::Device& device : reply.devices()) {
    devices.AddRow({device.uuid(), OrDash(device.name()), HumanBytes(device.total_memory_bytes()),
                    device.error().empty() ? "ok" : OneLine(device.error())});
  }
  return out + devices.Render();
}

json StatusJson(const v1::StatusReply& reply) {
  json document = ProtoJson(reply);
  for (json& device : document["devices"]) device["healthy"] = device["error"] == "";
  // Withheld counters are null, never a 0 that a script would believe.
  if (reply.store_counters_withheld().empty()) return document;
  for (const char* counter : {"pinned_bytes", "master_blocks", "staged_bytes", "staged_blocks",
                              "file_reads", "file_bytes_read", "evictions"}) {
    document[counter] = nullptr;
  }
  return document;
}

// --- clients -----------------------------------------------------------------------

// A client's copy path as its column and JSON field say it.
std::string CopyName(const v1::ClientInfo& client) {
  switch (client.copy()) {
    case v1::COPY_PATH_DAEMON:
      return "daemon";
    case v1::COPY_PATH_TRAINER:
      return "trainer";
    default:
      return absl::StrCat("unknown (", client.copy(), ")");
  }
}

std::string ClientsText(const v1::ClientsReply& reply) {
  if (reply.clients().empty()) return "no clients attached\n";
  TextTable table(
      {"SESSION", "PID", "UID", "NAME", "COPY", "RINGS", "LOADS", "DEVICES", "ATTACHED"});
  for (const v1::ClientInfo& client : reply.clients()) {
    table.AddRow({absl::StrCat(client.session_id()), absl::StrCat(client.pid()),
                  absl::StrCat(client.uid()), OrDash(client.client_name()), CopyName(client),
                  absl::StrCat(client.ring_count()), absl::StrCat(client.loads()),
                  OrDash(absl::StrJoin(client.device_uuids(), ",")),
                  HumanDuration(client.attached_seconds())});
  }
  return table.Render();
}

json ClientsJson(const v1::ClientsReply& reply) { return ProtoJson(reply); }

// --- models ------------------------------------------------------------------------

std::string ModelsText(const v1::ModelsReply& reply) {
  if (reply.models().empty()) return "no models registered\n";
  // COPY: "direct" from pinned masters, or "staged" through the daemon's
  // pinned staging buffers (blocks the pinning policy left pageable); "k/n
  // staged" when only k of its n blocks are.
  TextTable table(
      {"ID", "NAME", "BLOCKS", "BYTES", "SHARED", "OPEN", "REFS", "PINNED", "COPY", "SOURCE"});
  for (const v1::ModelInfo& model : reply.models()) {
    // SHARED: of its bytes, the blocks other models name too (held once).
    table.AddRow({ShortModelId(model.model_id()), OrDash(model.name()),
                  absl::StrCat(model.block_count()), HumanBytes(model.bytes()),
                  HumanBytes(model.shared_bytes()), absl::StrCat(model.open_sessions()),
                  absl::StrCat(model.references()), model.pinned() ? "yes" : "no",
                  CopyText(model.staged_blocks(), model.block_count()),
                  OneLine(OrDash(model.source()))});
  }
  return table.Render();
}

json ModelsJson(const v1::ModelsReply& reply) { return ProtoJson(reply); }

// --- residency ---------------------------------------------------------------------

std::string ResidencyText(const v1::ResidencyReply& reply) {
  if (reply.rings().empty()) return "no rings\n";
  // Grouped by device, then session, then ring, whatever order the daemon's
  // workers reported them in, so that repeated runs line up.
  std::vector<const v1::RingResidency*> rings;
  for (const v1::RingResidency& ring : reply.rings()) rings.push_back(&ring);
  std::stable_sort(rings.begin(), rings.end(), [](const auto* a, const auto* b) {
    return std::forward_as_tuple(a->device_uuid(), a->session_id(), a->ring_id()) <
           std::forward_as_tuple(b->device_uuid(), b->session_id(), b->ring_id());
  });
  TextTable table({"DEVICE", "SESSION", "RING", "SLOT", "MODEL", "BLOCK", "FILLED", "CONSUMED"});
  for (const v1::RingResidency* ring : rings) {
    for (const v1::SlotResidency& slot : ring->slots()) {
      const bool loaded = !slot.model_id().empty();
      table.AddRow({ring->device_uuid(), absl::StrCat(ring->session_id()),
                    absl::StrCat(ring->ring_id()), absl::StrCat(slot.slot()),
                    loaded ? ShortModelId(slot.model_id()) : "-",
                    loaded ? absl::StrCat(slot.block()) : "-", absl::StrCat(slot.filled_seq()),
                    absl::StrCat(slot.consumed_seq())});
    }
  }
  return table.Render();
}

json ResidencyJson(const v1::ResidencyReply& reply) {
  json document = ProtoJson(reply);
  // Block 0 is a real block, so a slot never filled has a null model and
  // block, not "" and 0.
  for (json& ring : document["rings"]) {
    for (json& slot : ring["slots"]) {
      if (slot["model_id"] != "") continue;
      slot["model_id"] = nullptr;
      slot["block"] = nullptr;
    }
  }
  return document;
}

// --- stats -------------------------------------------------------------------------

std::vector<const v1::PassStats*> LatestPassPerDirection(
    const google::protobuf::RepeatedPtrField<v1::PassStats>& passes) {
  auto rank = [](const std::string& direction) {
    if (direction == "forward") return 0;
    if (direction == "backward") return 1;
    return 2;
  };
  // Keyed by (rank, name): forward, backward, then the rest by name.
  std::map<std::pair<int, std::string>, const v1::PassStats*> latest;
  for (const v1::PassStats& pass : passes) {
    latest[{rank(pass.direction()), pass.direction()}] = &pass;  // newest last wins
  }
  std::vector<const v1::PassStats*> out;
  for (const auto& [key, pass] : latest) out.push_back(pass);
  return out;
}

std::string StatsText(const v1::StatsReply& reply) {
  std::string out;
  if (reply.devices().empty()) {
    out = "no devices\n";
  } else {
    // RELEASES: when the daemon learnt that each copy's slot was free —
    // already at the request / later, by the client's release.
    TextTable devices({"DEVICE", "LOADS", "BYTES", "COPY TIME", "GB/s", "QUEUE", "PROTOCOL ERRORS",
                       "RINGS", "RELEASES REQ/NOTIFIED"});
    for (const v1::DeviceStats& device : reply.devices()) {
      devices.AddRow({device.device_uuid(), absl::StrCat(device.loads()),
                      HumanBytes(device.bytes_copied()), HumanDuration(device.copy_seconds()),
                      HumanRate(device.bytes_copied(), device.copy_seconds()),
                      absl::StrCat(device.queue_depth()), absl::StrCat(device.protocol_errors()),
                      absl::StrCat(device.rings()),
                      absl::StrCat(device.releases_at_request(), "/",
                                   device.releases_notified())});
    }
    out = devices.Render();
  }
  out += "\n";
  if (reply.clients().empty()) return out + "no clients attached\n";
  // One line per direction of each client's latest passes; the client's own
  // columns are on its first line only.
  TextTable clients({"SESSION", "NAME", "LOADS", "REJECTED", "BYTES", "PASSES", "LAST PASS",
                     "STALL S", "HOST WAIT S", "COPY S", "WAITS", "NOT-READY", "SELF-HEALS"});
  for (const v1::ClientStats& client : reply.clients()) {
    std::vector<std::string> own = {
        absl::StrCat(client.session_id()), OrDash(client.client_name()),
        absl::StrCat(client.loads()),      absl::StrCat(client.rejected_loads()),
        HumanBytes(client.bytes()),        absl::StrCat(client.passes_size())};
    std::vector<const v1::PassStats*> latest = LatestPassPerDirection(client.passes());
    if (latest.empty()) {
      own.insert(own.end(), 7, "-");
      clients.AddRow(std::move(own));
      continue;
    }
    for (const v1::PassStats* pass : latest) {
      std::vector<std::string> row = own;
      row.insert(row.end(), {OrDash(pass->direction()), Seconds3(pass->stall_seconds()),
                             Seconds3(pass->host_wait_seconds()), Seconds3(pass->copy_seconds()),
                             absl::StrCat(pass->waits()), absl::StrCat(pass->not_ready_waits()),
                             absl::StrCat(pass->self_heals())});
      clients.AddRow(std::move(row));
      std::fill(own.begin(), own.end(), "");
    }
  }
  return out + clients.Render();
}

// --- stats --watch ---------------------------------------------------------------

namespace {

// A device's or a client's counters in one frame.
struct Counters {
  uint64_t loads = 0;
  uint64_t bytes = 0;
};

// Loads/s and GB/s since `before` over `seconds`; "-" where there is no
// baseline (first frame, a new device or session) or a counter went
// backwards (the daemon restarted).
std::pair<std::string, std::string> Rates(const Counters& now, std::optional<Counters> before,
                                          double seconds) {
  if (!before.has_value() || before->loads > now.loads || before->bytes > now.bytes ||
      !(seconds > 0)) {
    return {"-", "-"};
  }
  const double loads = static_cast<double>(now.loads - before->loads) / seconds;
  return {loads >= 10 ? absl::StrFormat("%.0f", loads) : absl::StrFormat("%.1f", loads),
          HumanRate(now.bytes - before->bytes, seconds)};
}

template <typename Key>
std::optional<Counters> Find(const std::map<Key, Counters>& frame, const Key& key) {
  auto it = frame.find(key);
  if (it == frame.end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::string StatsWatchText(const v1::StatsReply& now, const v1::StatsReply* before, double seconds,
                           size_t width) {
  std::map<std::string, Counters> devices_before;
  std::map<uint64_t, Counters> clients_before;
  if (before != nullptr) {
    for (const v1::DeviceStats& d : before->devices()) {
      devices_before[d.device_uuid()] = {d.loads(), d.bytes_copied()};
    }
    for (const v1::ClientStats& c : before->clients()) {
      clients_before[c.session_id()] = {c.loads(), c.bytes()};
    }
  }
  std::string out;
  if (now.devices().empty()) {
    out = "no devices\n";
  } else {
    // Most telling first: columns on the right go first on a narrow terminal.
    TextTable devices(
        {"DEVICE", "LOADS/s", "GB/s", "QUEUE", "RINGS", "LOADS", "BYTES", "PROTOCOL ERRORS"});
    for (const v1::DeviceStats& device : now.devices()) {
      auto [loads, bytes] = Rates({device.loads(), device.bytes_copied()},
                                  Find(devices_before, device.device_uuid()), seconds);
      devices.AddRow({device.device_uuid(), loads, bytes, absl::StrCat(device.queue_depth()),
                      absl::StrCat(device.rings()), absl::StrCat(device.loads()),
                      HumanBytes(device.bytes_copied()), absl::StrCat(device.protocol_errors())});
    }
    out = devices.Render(width);
  }
  out += "\n";
  if (now.clients().empty()) return out + "no clients attached\n";
  TextTable clients({"SESSION", "NAME", "LOADS/s", "GB/s", "STALL S", "HOST WAIT S", "LOADS",
                     "BYTES", "REJECTED"});
  for (const v1::ClientStats& client : now.clients()) {
    auto [loads, bytes] =
        Rates({client.loads(), client.bytes()}, Find(clients_before, client.session_id()), seconds);
    // The latest forward pass (else whichever came last) stands for the client.
    std::vector<const v1::PassStats*> latest = LatestPassPerDirection(client.passes());
    const v1::PassStats* pass = latest.empty() ? nullptr : latest.front();
    clients.AddRow({absl::StrCat(client.session_id()), OrDash(client.client_name()), loads, bytes,
                    pass ? Seconds3(pass->stall_seconds()) : "-",
                    pass ? Seconds3(pass->host_wait_seconds()) : "-", absl::StrCat(client.loads()),
                    HumanBytes(client.bytes()), absl::StrCat(client.rejected_loads())});
  }
  return out + clients.Render(width);
}

json StatsJson(const v1::StatsReply& reply) {
  json document = ProtoJson(reply);
  for (int d = 0; d < reply.devices_size(); ++d) {
    const v1::DeviceStats& device = reply.devices(d);
    const bool timed = std::isfinite(device.copy_seconds()) && device.copy_seconds() > 0;
    document["devices"][d]["gb_per_second"] =
        timed ? json(static_cast<double>(device.bytes_copied()) / device.copy_seconds() / 1e9)
              : json(nullptr);
  }
  for (int c = 0; c < reply.clients_size(); ++c) {
    const v1::ClientStats& client = reply.clients(c);
    json latest = json::object();
    for (const v1::PassStats* pass : LatestPassPerDirection(client.passes())) {
      latest[pass->direction()] = ProtoJson(*pass);
    }
    document["clients"][c]["passes_reported"] = client.passes_size();
    document["clients"][c]["latest_passes"] = std::move(latest);
  }
  return document;
}

// --- health ------------------------------------------------------------------------

HealthVerdict JudgeHealth(const v1::StatusReply& reply) {
  std::vector<std::string> failures;
  for (const v1::Device& device : reply.devices()) {
    if (device.error().empty()) continue;
    std::string named = device.name().empty()
                            ? device.uuid()
                            : absl::StrCat(device.uuid(), " (", device.name(), ")");
    failures.push_back(absl::StrCat("device ", named, ": ", OneLine(device.error())));
  }
  if (failures.empty()) return {.healthy = true, .reason = ""};
  return {.healthy = false, .reason = Printable(absl::StrJoin(failures, "; "))};
}

json HealthJson(absl::string_view socket_path, const HealthVerdict& verdict,
                const v1::StatusReply* reply) {
  return {{"healthy", verdict.healthy},
          {"reason", verdict.reason},
          {"socket", std::string(socket_path)},
          {"status", reply != nullptr ? StatusJson(*reply) : json(nullptr)}};
}

std::string DescribeCallFailure(absl::string_view socket_path, const absl::Status& status) {
  const std::string message = Printable(OneLine(status.message()));
  const std::string code = absl::StatusCodeToString(status.code());
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
      return absl::StrCat("blockswapd is unreachable at ", socket_path, ": ",
                          message.empty() ? code : message);
    case absl::StatusCode::kDeadlineExceeded:
      return absl::StrCat("blockswapd at ", socket_path,
                          " did not answer in time: ", message.empty() ? code : message);
    default:
      // The daemon's own refusals already say what was wrong.
      if (message.empty()) return absl::StrCat(code, " from blockswapd at ", socket_path);
      return message;
  }
}

std::string DumpJson(const json& document) {
  return document.dump(2, ' ', false, json::error_handler_t::replace);
}

std::string DumpJsonLine(const json& document) {
  return document.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace blockswap::ctl
