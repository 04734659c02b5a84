#include "daemon/config_field_kinds.h"

#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace blockswap::daemon {
namespace {

using O = DaemonOptions;

}  // namespace

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kText:
      return "a string";
    case Kind::kCount:
      return "a non-negative integer";
    case Kind::kBytes:
      return "a byte count (an integer, or a string such as \"8GiB\")";
    case Kind::kSeconds:
      return "a number of seconds";
    case Kind::kIdList:
      return "an array of non-negative integers";
    case Kind::kTextList:
      return "an array of strings";
  }
  return "a value";
}

std::string Quoted(absl::string_view text) {
  // TOML basic string: escape the backslash and the quote.
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

absl::StatusOr<uint64_t> ParseCount(absl::string_view text, uint64_t max) {
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || absl::StartsWith(text, "-")) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a non-negative integer, got '", text, "'"));
  }
  if (value > max) {
    return absl::InvalidArgumentError(absl::StrCat(value, " is larger than ", max));
  }
  return value;
}

FieldSpec TextField(const char* key, const char* flag, const char* help, std::string O::*member,
                    std::function<absl::Status(absl::string_view)> check) {
  return {{key, flag, help, false,
           [member, check](O& o, absl::string_view v) -> absl::Status {
             if (check) {
               if (absl::Status s = check(v); !s.ok()) return s;
             }
             o.*member = std::string(v);
             return absl::OkStatus();
           },
           nullptr, [member](const O& o) { return Quoted(o.*member); }},
          Kind::kText};
}

FieldSpec BytesField(const char* key, const char* flag, const char* help,
                     std::function<uint64_t&(O&)> get) {
  return {{key, flag, help, false,
           [get](O& o, absl::string_view v) -> absl::Status {
             absl::StatusOr<uint64_t> n = ParseByteCount(v);
             if (!n.ok()) return n.status();
             get(o) = *n;
             return absl::OkStatus();
           },
           nullptr, [get](const O& o) { return absl::StrCat(get(const_cast<O&>(o))); }},
          Kind::kBytes};
}

FieldSpec CountField(const char* key, const char* flag, const char* help, uint64_t min,
                     uint64_t max, std::function<void(O&, uint64_t)> set,
                     std::function<uint64_t(const O&)> get) {
  return {{key, flag, help, false,
           [min, max, set](O& o, absl::string_view v) -> absl::Status {
             absl::StatusOr<uint64_t> n = ParseCount(v, max);
             if (!n.ok()) return n.status();
             if (*n < min)
               return absl::InvalidArgumentError(absl::StrCat("must be at least ", min));
             set(o, *n);
             return absl::OkStatus();
           },
           nullptr, [get](const O& o) { return absl::StrCat(get(o)); }},
          Kind::kCount};
}

FieldSpec AutoField(const char* key, const char* flag, const char* help, uint64_t O::*member,
                    uint64_t auto_value, bool is_bytes) {
  return AutoField(
      key, flag, help, [member](O& o) -> uint64_t& { return o.*member; }, auto_value, is_bytes);
}

FieldSpec AutoField(const char* key, const char* flag, const char* help,
                    std::function<uint64_t&(O&)> get, uint64_t auto_value, bool is_bytes) {
  return {
      {key, flag, help, false,
       [get, auto_value, is_bytes](O& o, absl::string_view v) -> absl::Status {
         if (v == "auto") {
           get(o) = auto_value;
           return absl::OkStatus();
         }
         absl::StatusOr<uint64_t> n = is_bytes ? ParseByteCount(v) : ParseCount(v, auto_value - 1);
         if (!n.ok()) {
           return absl::InvalidArgumentError(absl::StrCat(n.status().message(), ", or \"auto\""));
         }
         if (*n == auto_value) return absl::InvalidArgumentError("too large");
         get(o) = *n;
         return absl::OkStatus();
       },
       nullptr,
       [get, auto_value](const O& o) {
         const uint64_t value = get(const_cast<O&>(o));
         return value == auto_value ? Quoted("auto") : absl::StrCat(value);
       }},
      Kind::kBytes};  // an integer or a string, as bytes are
}

FieldSpec SecondsField(const char* key, const char* flag, const char* help, double max,
                       absl::Duration O::*member) {
  return {
      {key, flag, help, false,
       [member, max](O& o, absl::string_view v) -> absl::Status {
         double seconds = 0;
         if (!absl::SimpleAtod(v, &seconds) || !std::isfinite(seconds) || seconds < 0 ||
             seconds > max) {
           return absl::InvalidArgumentError(
               absl::StrCat("expected seconds between 0 and ", max, ", got '", v, "'"));
         }
         o.*member = absl::Seconds(seconds);
         return absl::OkStatus();
       },
       nullptr, [member](const O& o) { return absl::StrCat(absl::ToDoubleSeconds(o.*member)); }},
      Kind::kSeconds};
}

FieldSpec IdListField(const char* key, const char* flag, const char* help,
                      std::vector<uint32_t> O::*member) {
  return {{key, flag, help, true,
           [member](O& o, absl::string_view v) -> absl::Status {
             absl::StatusOr<uint64_t> n = ParseCount(v, UINT32_MAX - 1);
             if (!n.ok()) return n.status();
             (o.*member).push_back(static_cast<uint32_t>(*n));
             return absl::OkStatus();
           },
           [member](O& o) { (o.*member).clear(); },
           [member](const O& o) { return absl::StrCat("[", absl::StrJoin(o.*member, ", "), "]"); }},
          Kind::kIdList};
}

FieldSpec TextListField(const char* key, const char* flag, const char* help,
                        std::function<absl::Status(O&, absl::string_view)> add,
                        std::function<void(O&)> clear, std::function<std::string(const O&)> show) {
  return {{key, flag, help, true, std::move(add), std::move(clear), std::move(show)},
          Kind::kTextList};
}

}  // namespace blockswap::daemon
