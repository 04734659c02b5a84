// Leveled logging of blockswapd to standard error.
//
// Under systemd (JOURNAL_STREAM names our stderr) each line starts with the
// syslog priority ("<3>" error ... "<7>" debug, sd-daemon(3)), so journald
// records the level; elsewhere lines read "blockswapd: [warning] ...". The
// level is process-wide and may change while threads log (SIGHUP reload).
#ifndef BLOCKSWAP_DAEMON_RUNTIME_LOGGING_H_
#define BLOCKSWAP_DAEMON_RUNTIME_LOGGING_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blockswap::daemon {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

// "error", "warning", "info", "debug".
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
const char* LogLevelName(LogLevel level);

// Messages above `level` are dropped. Thread-safe.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
bool LogEnabled(LogLevel level);

// The line `message` is written as at `level`, without its newline.
// `journal`: with the syslog priority prefix.
std::string FormatLogLine(LogLevel level, absl::string_view message, bool journal);

// Writes one line to stderr if `level` is enabled. Thread-safe (one write(2)
// per line, so lines of concurrent threads never interleave).
void Log(LogLevel level, absl::string_view message);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_RUNTIME_LOGGING_H_
