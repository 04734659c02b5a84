// blockswapd's configuration: every command-line option has a key of the
// same meaning in the TOML file (/etc/blockswap/blockswapd.toml by default;
// deploy/blockswapd.toml documents them all). Options given on the command
// line override the file.
//
// One table of fields (ConfigFields) serves the file, the command line and
// the printout of the effective configuration, so the three never disagree.
#ifndef BLOCKSWAP_DAEMON_CONFIG_H_
#define BLOCKSWAP_DAEMON_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/config_field.h"
#include "daemon/options.h"

namespace blockswap::daemon {

inline constexpr char kDefaultConfigPath[] = "/etc/blockswap/blockswapd.toml";

// The table: every field, in the order the printout lists them.
const std::vector<ConfigField>& ConfigFields();

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
