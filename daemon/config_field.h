// One field of blockswapd's configuration table (config.h): what the file,
// the command line and the printout of the effective configuration share,
// and the grammar of byte counts the byte-valued fields read.
#ifndef BLOCKSWAP_DAEMON_CONFIG_FIELD_H_
#define BLOCKSWAP_DAEMON_CONFIG_FIELD_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/options.h"

namespace blockswap::daemon {

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

// Parses a byte count: a non-negative integer, optionally with a unit
// (K, M, G, T for powers of 1000; KiB, MiB, GiB, TiB for powers of 1024).
absl::StatusOr<uint64_t> ParseByteCount(absl::string_view text);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_CONFIG_FIELD_H_
