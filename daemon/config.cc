#include "daemon/config.h"

#include <toml++/toml.h>

#include <cmath>
#include <deque>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "daemon/config_field_kinds.h"
#include "daemon/runtime/logging.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

const char* BackendName(BackendChoice choice) {
  switch (choice) {
    case BackendChoice::kAuto:
      return "auto";
    case BackendChoice::kHost:
      return "host";
    case BackendChoice::kCuda:
      return "cuda";
  }
  return "auto";
}

// host:port with a numeric port (0: any free one), or empty (off).
absl::Status ValidateListenAddress(absl::string_view text) {
  if (text.empty()) return absl::OkStatus();
  size_t colon = text.rfind(':');
  uint32_t port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected HOST:PORT (for example 127.0.0.1:9464) or \"\" for off, got '", text, "'"));
  }
  return absl::OkStatus();
}

// One copy_weights entry, "UID:WEIGHT".
absl::Status AddCopyWeight(absl::string_view text, CopyWeights& weights) {
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected UID:WEIGHT (for example \"1000:2\"), got '", text, "'"));
  }
  absl::StatusOr<uint64_t> uid = ParseCount(text.substr(0, colon), UINT32_MAX - 1);
  if (!uid.ok()) return Annotate(uid.status(), absl::StrCat("the uid of '", text, "'"));
  absl::StatusOr<uint64_t> weight = ParseCount(text.substr(colon + 1), kMaxCopyWeight);
  if (!weight.ok()) return Annotate(weight.status(), absl::StrCat("the weight of '", text, "'"));
  if (*weight == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the weight of '", text, "' is 0: a weight is 1 to ", kMaxCopyWeight));
  }
  weights[static_cast<uint32_t>(*uid)] = static_cast<uint32_t>(*weight);
  return absl::OkStatus();
}

std::string ShowCopyWeights(const CopyWeights& weights) {
  std::vector<std::string> entries;
  for (const auto& [uid, weight] : weights)
    entries.push_back(Quoted(absl::StrCat(uid, ":", weight)));
  return absl::StrCat("[", absl::StrJoin(entries, ", "), "]");
}

// The table: every key of the file, with its flag and help.
std::vector<FieldSpec> MakeFields() {
  using O = DaemonOptions;
  std::vector<FieldSpec> fields;
  auto add = [&fields](FieldSpec spec) { fields.push_back(std::move(spec)); };
  add(TextField("socket", "--socket", "control socket path", &O::socket_path,
                [](absl::string_view v) {
                  return v.empty() ? absl::InvalidArgumentError("the socket path must not be empty")
                                   : absl::OkStatus();
                }));
  add(TextField("socket_group", "--socket-group",
                "group (name or number) of the socket file, mode 0660; its members are allowed. "
                "Empty: the daemon's group",
                &O::socket_group));
  add(ChoiceField("backend", "--backend", "auto, host or cuda", &O::backend, ParseBackendChoice,
                  BackendName));
  add(CountField(
      "host_devices", "--host-devices", "simulated devices of the host backend", 1, 64,
      [](O& o, uint64_t n) { o.host.device_count = static_cast<int>(n); },
      [](const O& o) { return static_cast<uint64_t>(o.host.device_count); }));
  add(TextField("shm_prefix", "--shm-prefix",
                "directory of the master files (mode 0700, on a tmpfs)", &O::shm_prefix,
                [](absl::string_view v) {
                  return absl::StartsWith(v, "/") ? absl::OkStatus()
                                                  : absl::InvalidArgumentError(absl::StrCat(
                                                        "must be an absolute path, got '", v, "'"));
                }));
  add(BytesField("max_pinned_bytes", "--max-pinned-bytes",
                 "bytes of masters the daemon may hold pinned (0: the tmpfs decides)",
                 [](O& o) -> uint64_t& { return o.max_pinned_bytes; }));
  add(ChoiceField(
      "pinning", "--pinning",
      "which masters are pinned: \"auto\" (what max_pinned_bytes and the driver allow; the "
      "rest is staged), \"always\" (a master that cannot be pinned is refused) or \"never\" "
      "(every master is copied through the staging buffers)",
      &O::pinning, ParsePinningPolicy, PinningPolicyName));
  add(ChoiceField(
      "copy", "--copy",
      "who copies blocks into a trainer's ring slots: \"daemon\" (its copy stream, into a ring "
      "it exports) or \"trainer\" (each trainer's own copy stream, from its read-only mapping of "
      "the masters); a client may ask with BLOCKSWAP_COPY",
      &O::copy, ParseCopyPath, CopyPathName));
  add(BytesField("staging_buffer_bytes", "--staging-buffer-bytes",
                 "bytes of each pinned staging buffer (one chunk of a staged copy)",
                 [](O& o) -> uint64_t& { return o.staging.buffer_bytes; }));
  add(CountField(
      "staging_buffers", "--staging-buffers",
      "pinned staging buffers per device (charged to max_memory_bytes)", 1, 1024,
      [](O& o, uint64_t n) { o.staging.buffers = static_cast<uint32_t>(n); },
      [](const O& o) { return uint64_t{o.staging.buffers}; }));
  add(CountField(
      "staging_threads", "--staging-threads",
      "threads per device that fill the staging buffers from pageable masters", 1, 64,
      [](O& o, uint64_t n) { o.staging.threads = static_cast<uint32_t>(n); },
      [](const O& o) { return uint64_t{o.staging.threads}; }));
  add(IdListField("allow_uids", "--allow-uid",
                  "also allow this uid (default: the daemon's uid, root, the socket's group)",
                  &O::allow_uids));
  add(IdListField("allow_gids", "--allow-gid", "also allow this gid", &O::allow_gids));
  add(ChoiceField(
      "model_access", "--model-access",
      "who may open and list a model: \"allowed-users\" (every allowed user, the default) or "
      "\"registrant-group\" (the uids that registered its content, their groups, root and "
      "the daemon's uid)",
      &O::model_access, ParseModelAccess, ModelAccessName));
  add(SecondsField("shutdown_grace", "--shutdown-grace",
                   "seconds attached clients get to detach on SIGTERM", 3600, &O::shutdown_grace));
  add(SecondsField("idle_exit", "--idle-exit",
                   "exit after this many seconds with no session attached (0: never; the private "
                   "daemon a client starts uses it)",
                   7 * 24 * 3600, &O::idle_exit));
  add(TextField("idle_exit_lock", "--idle-exit-lock",
                "file the starting clients lock; held before exiting idle, so that no client "
                "attaches meanwhile (empty: none)",
                &O::idle_exit_lock));
  add(ChoiceField("log_level", "--log-level", "error, warning, info or debug (SIGHUP reloads it)",
                  &O::log_level, ParseLogLevel, LogLevelName));
  add(TextField("metrics_listen", "--metrics-listen",
                "HOST:PORT of the Prometheus /metrics endpoint, e.g. 127.0.0.1:9464 (empty: off)",
                &O::metrics_listen, ValidateListenAddress));
  // Limits against hostile local users (docs/reliability.md, "Limits").
  add(CountField(
      "max_verifies_per_uid", "--max-verifies-per-uid",
      "Admin.VerifyModel calls one uid may have waiting or running (0: unlimited)", 0, UINT32_MAX,
      [](O& o, uint64_t n) { o.max_verifies_per_uid = static_cast<uint32_t>(n); },
      [](const O& o) { return uint64_t{o.max_verifies_per_uid}; }));
  // The node's memory and the per-client and per-uid quotas (SIGHUP reloads
  // the quotas).
  add(AutoField("max_memory_bytes", "--max-memory-bytes",
                "bytes of host memory the daemon may reserve: masters, staging areas and "
                "host-backend rings (\"auto\": 3/4 of the machine's or the memory cgroup's "
                "limit; 0: unlimited)",
                &O::max_memory_bytes, kMaxMemoryBytesAuto, /*is_bytes=*/true));
  add(BytesField("device_memory_reserve_bytes", "--device-memory-reserve-bytes",
                 "a ring is refused when it would leave less than this much of its device's "
                 "memory free",
                 [](O& o) -> uint64_t& { return o.device_memory_reserve_bytes; }));
  // The quota keys' texts, made once; the table keeps pointers into them.
  static std::deque<std::string>* const texts = new std::deque<std::string>;
  auto keep = [](std::string text) { return texts->emplace_back(std::move(text)).c_str(); };
  for (QuotaScope scope : {QuotaScope::kClient, QuotaScope::kUid}) {
    for (const QuotaKind& kind : QuotaKinds()) {
      const std::string key = QuotaKey(kind, scope);
      const char* owned_key = keep(key);
      const char* flag = keep(absl::StrCat("--", absl::StrReplaceAll(key, {{"_", "-"}})));
      const bool may_be_auto = scope == QuotaScope::kUid && !kind.uid_auto.empty();
      const char* help = keep(absl::StrCat(
          kind.unit, " ",
          scope == QuotaScope::kClient ? "one client process" : "one uid's processes",
          " may hold (", may_be_auto ? absl::StrCat("\"auto\": ", kind.uid_auto, "; ") : "",
          "0: unlimited; SIGHUP reloads it)"));
      auto member = [scope, m = kind.member](O& o) -> uint64_t& {
        // Through a named reference: GCC 12 applies .* to a copy of a
        // conditional expression's result, and the reference would dangle.
        ClientAmounts& limits =
            scope == QuotaScope::kClient ? o.quotas.per_client : o.quotas.per_uid;
        return limits.*m;
      };
      if (may_be_auto) {
        add(AutoField(owned_key, flag, help, member, kAutoLimit, kind.bytes));
      } else if (kind.bytes) {
        add(BytesField(owned_key, flag, help, member));
      } else {
        add(CountField(
            owned_key, flag, help, 0, UINT32_MAX, [member](O& o, uint64_t n) { member(o) = n; },
            [member](const O& o) { return member(const_cast<O&>(o)); }));
      }
    }
  }
  add(TextListField(
      "copy_weights", "--copy-weight",
      "a uid's weight on each copy stream, as UID:WEIGHT (1 to 1000; a uid not listed weighs "
      "1): a ring's share of its device's copies is its weight over the weights of the rings "
      "with copies ready",
      [](O& o, absl::string_view v) { return AddCopyWeight(v, o.copy_weights); },
      [](O& o) { o.copy_weights.clear(); },
      [](const O& o) { return ShowCopyWeights(o.copy_weights); }));
  add(AutoField("max_master_blocks", "--max-master-blocks",
                "distinct master blocks the node may hold, each one of the daemon's mappings "
                "(\"auto\": half of vm.max_map_count; 0: unlimited)",
                &O::max_master_blocks, kAutoLimit, /*is_bytes=*/false));
  add(CountField(
      "max_master_blocks_per_uid", "--max-master-blocks-per-uid",
      "distinct master blocks the models registered by one uid may hold, each counted in full "
      "for every uid whose models name it (0: unlimited)",
      0, UINT32_MAX, [](O& o, uint64_t n) { o.max_master_blocks_per_uid = n; },
      [](const O& o) { return o.max_master_blocks_per_uid; }));
  add(AutoField("max_master_bytes_per_uid", "--max-master-bytes-per-uid",
                "bytes of masters the models registered by one uid may hold, each block counted "
                "in full for every uid whose models name it (\"auto\": half of "
                "max_memory_bytes; 0: unlimited)",
                &O::max_master_bytes_per_uid, kAutoLimit, /*is_bytes=*/true));
  add(CountField(
      "max_connections_per_uid", "--max-connections-per-uid",
      "connections one uid may have open at once (0: unlimited)", 0, UINT32_MAX,
      [](O& o, uint64_t n) { o.max_connections_per_uid = n; },
      [](const O& o) { return o.max_connections_per_uid; }));
  add(CountField(
      "max_pending_connections_per_uid", "--max-pending-connections-per-uid",
      "connections of one uid that may wait at once for their first message (0: unlimited)", 0,
      UINT32_MAX, [](O& o, uint64_t n) { o.max_pending_connections_per_uid = n; },
      [](const O& o) { return o.max_pending_connections_per_uid; }));
  return fields;
}

const std::vector<FieldSpec>& Specs() {
  static const std::vector<FieldSpec>* specs = new std::vector<FieldSpec>(MakeFields());
  return *specs;
}

// The text of one scalar TOML value of the kind `kind` expects, or the error.
absl::StatusOr<std::string> ScalarText(const toml::node& node, Kind kind) {
  switch (kind) {
    case Kind::kText:
    case Kind::kTextList:
      if (auto v = node.value<std::string>(); v && node.is_string()) return *v;
      break;
    case Kind::kCount:
    case Kind::kIdList:
      if (node.is_integer()) return absl::StrCat(node.as_integer()->get());
      break;
    case Kind::kBytes:
      if (node.is_integer()) return absl::StrCat(node.as_integer()->get());
      if (node.is_string()) return node.as_string()->get();
      break;
    case Kind::kSeconds:
      if (node.is_integer()) return absl::StrCat(node.as_integer()->get());
      if (node.is_floating_point()) return absl::StrCat(node.as_floating_point()->get());
      break;
  }
  std::ostringstream shown;
  shown << node.type();
  return absl::InvalidArgumentError(
      absl::StrCat("expected ", KindName(kind), ", got ", shown.str()));
}

}  // namespace

const std::vector<ConfigField>& ConfigFields() {
  static const std::vector<ConfigField>* fields = [] {
    auto* out = new std::vector<ConfigField>;
    for (const FieldSpec& spec : Specs()) out->push_back(spec.field);
    return out;
  }();
  return *fields;
}

absl::Status ApplyConfigText(absl::string_view text, absl::string_view source,
                             DaemonOptions& options) {
  toml::table table;
  try {
    table = toml::parse(std::string_view(text.data(), text.size()),
                        std::string_view(source.data(), source.size()));
  } catch (const toml::parse_error& error) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", error.source().begin.line, ": ",
                                                   std::string(error.description())));
  }
  for (auto&& [key, node] : table) {
    const std::string name(key.str());
    const auto line = node.source().begin.line;
    auto fail = [&](const absl::Status& why) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line, ": ", name, ": ", why.message()));
    };
    const FieldSpec* spec = nullptr;
    for (const FieldSpec& candidate : Specs()) {
      if (name == candidate.field.key) spec = &candidate;
    }
    if (spec == nullptr) {
      std::vector<std::string> known;
      for (const FieldSpec& candidate : Specs()) known.push_back(candidate.field.key);
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": unknown key '", name,
                                                     "' (known keys: ", absl::StrJoin(known, ", "),
                                                     ")"));
    }
    if (spec->field.list) {
      const toml::array* array = node.as_array();
      if (array == nullptr) {
        std::ostringstream shown;
        shown << node.type();
        return fail(absl::InvalidArgumentError(
            absl::StrCat("expected ", KindName(spec->kind), ", got ", shown.str())));
      }
      spec->field.clear(options);
      for (const toml::node& element : *array) {
        absl::StatusOr<std::string> value = ScalarText(element, spec->kind);
        if (!value.ok()) return fail(value.status());
        if (absl::Status s = spec->field.set(options, *value); !s.ok()) return fail(s);
      }
      continue;
    }
    absl::StatusOr<std::string> value = ScalarText(node, spec->kind);
    if (!value.ok()) return fail(value.status());
    if (absl::Status s = spec->field.set(options, *value); !s.ok()) return fail(s);
  }
  return absl::OkStatus();
}

absl::Status ApplyConfigFile(const std::string& path, DaemonOptions& options) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read the config file ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ApplyConfigText(text.str(), path, options);
}

std::string FormatConfig(const DaemonOptions& options) {
  std::string out;
  for (const ConfigField& field : ConfigFields()) {
    absl::StrAppend(&out, field.key, " = ", field.show(options), "\n");
  }
  return out;
}

}  // namespace blockswap::daemon
