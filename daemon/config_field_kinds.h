// The kinds of field the daemon's configuration table (config.cc) is made
// of: how each kind reads a value written as text (a flag's or the file's),
// refuses a bad one, and writes it back as TOML. Private to config.cc.
#ifndef BLOCKSWAP_DAEMON_CONFIG_FIELD_KINDS_H_
#define BLOCKSWAP_DAEMON_CONFIG_FIELD_KINDS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/config_field.h"
#include "daemon/options.h"

namespace blockswap::daemon {

// What a field accepts in the file.
enum class Kind { kText, kCount, kBytes, kSeconds, kIdList, kTextList };
// "a string", "a non-negative integer", ...: for the file's type errors.
const char* KindName(Kind kind);

struct FieldSpec {
  ConfigField field;
  Kind kind;
};

// `text` as a TOML basic string.
std::string Quoted(absl::string_view text);
// A non-negative integer no larger than `max`.
absl::StatusOr<uint64_t> ParseCount(absl::string_view text, uint64_t max);

// A string, refused when `check` (if any) refuses it.
FieldSpec TextField(const char* key, const char* flag, const char* help,
                    std::string DaemonOptions::*member,
                    std::function<absl::Status(absl::string_view)> check = nullptr);
// A byte count (ParseByteCount), in the member `get` returns.
FieldSpec BytesField(const char* key, const char* flag, const char* help,
                     std::function<uint64_t&(DaemonOptions&)> get);
// An integer from `min` (0 or more) to `max`, stored by `set`, shown from `get`.
FieldSpec CountField(const char* key, const char* flag, const char* help, uint64_t min,
                     uint64_t max, std::function<void(DaemonOptions&, uint64_t)> set,
                     std::function<uint64_t(const DaemonOptions&)> get);
// A count (below `auto_value`) or a byte count, or "auto", stored as
// `auto_value` and resolved when the daemon starts.
FieldSpec AutoField(const char* key, const char* flag, const char* help,
                    uint64_t DaemonOptions::*member, uint64_t auto_value, bool is_bytes);
// The same, for a value inside a member (a quota), reached through `get`.
FieldSpec AutoField(const char* key, const char* flag, const char* help,
                    std::function<uint64_t&(DaemonOptions&)> get, uint64_t auto_value,
                    bool is_bytes);
// Seconds from 0 to `max`.
FieldSpec SecondsField(const char* key, const char* flag, const char* help, double max,
                       absl::Duration DaemonOptions::*member);
// A list of uids or gids; each value given is appended.
FieldSpec IdListField(const char* key, const char* flag, const char* help,
                      std::vector<uint32_t> DaemonOptions::*member);
// A list of strings, each added by `add`.
FieldSpec TextListField(const char* key, const char* flag, const char* help,
                        std::function<absl::Status(DaemonOptions&, absl::string_view)> add,
                        std::function<void(DaemonOptions&)> clear,
                        std::function<std::string(const DaemonOptions&)> show);

// One of a few names: `parse` reads one (its error lists them), `name`
// writes it back.
template <typename T, typename Parse, typename Name>
FieldSpec ChoiceField(const char* key, const char* flag, const char* help, T DaemonOptions::*member,
                      Parse parse, Name name) {
  using O = DaemonOptions;
  return {{key, flag, help, false,
           [member, parse](O& o, absl::string_view v) -> absl::Status {
             auto value = parse(v);
             if (!value.ok()) return value.status();
             o.*member = *value;
             return absl::OkStatus();
           },
           nullptr, [member, name](const O& o) { return Quoted(name(o.*member)); }},
          Kind::kText};
}

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_CONFIG_FIELD_KINDS_H_
