// blockswapd's configuration: every command-line option has a key of the
// same meaning in the TOML file (/etc/blockswap/blockswapd.toml by default;
// deploy/blockswapd.toml documents them all). Options given on the command
// line override the file.
//
// One table of fields (ConfigFields) serves the file, the command line and
// the printout of the effective configuration, so the three never disagree.
#ifndef BLOCKSWAP_DAEMON_CONFIG_H_
#define BLOCKSWAP_DAEMON_CONFIG_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/options.h"

namespace blockswap::daemon {

inline constexpr char kDefaultConfigPath[] = "/etc/blockswap/blockswapd.toml";

struct ConfigField {
  const char* key;   // in the file: max_pinned_bytes
  const char* flag;  // on the command line: --max-pinned-bytes
  const char* help;
  bool list;  // several values (allow_uids); the last source given replaces the list
  // Sets (or, for a list, appends) one value written as text.
  std::function<absl::Status(DaemonOptions&, absl::string_view)> set;
  // Clears a list before a source gives it anew.
  std::function<void(DaemonOptions&)> clear;
  // The value as a TOML value ("/run/x.sock" quoted, 42, [0, 1000]).
  std::function<std::string(const DaemonOptions&)> show;
};

const std::vector<ConfigField>& ConfigFields();

// Parses a byte count: a non-negative integer, optionally with a unit
// (K, M, G, T for powers of 1000; KiB, MiB, GiB, TiB for powers of 1024).
absl::StatusOr<uint64_t> ParseByteCount(absl::string_view text);

// Applies the TOML document `text` (read from `source`, named in errors) on
// top of `options`. An unknown key, a value of the wrong type or a value the
// field refuses is INVALID_ARGUMENT naming the file, line and key:
// "blockswapd.toml:4: max_pinned_bytes: ...".
absl::Status ApplyConfigText(absl::string_view text, absl::string_view source,
                             DaemonOptions& options);
// The same for a file; NOT_FOUND when it does not exist.
absl::Status ApplyConfigFile(const std::string& path, DaemonOptions& options);

// The effective configuration as a TOML document that ApplyConfigText
// accepts, one `key = value` line per field.
std::string FormatConfig(const DaemonOptions& options);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_CONFIG_H_
