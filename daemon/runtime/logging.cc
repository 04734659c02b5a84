#include "daemon/runtime/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "shared/base/env_settings.h"

namespace blockswap::daemon {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

// systemd sets JOURNAL_STREAM to "device:inode" of the stream it connected to
// our stderr; only when that is still our stderr do the prefixes mean
// anything to the reader.
bool StderrIsJournal() {
  static const bool journal = EnvValue(EnvSetting::kJournalStream).has_value();
  return journal;
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  for (LogLevel level : {LogLevel::kError, LogLevel::kWarning, LogLevel::kInfo, LogLevel::kDebug}) {
    if (name == LogLevelName(level)) return level;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level '", name, "' (error, warning, info or debug)"));
}

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "info";
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(); }

std::string FormatLogLine(LogLevel level, absl::string_view message, bool journal) {
  if (journal) {
    // syslog priorities: 3 err, 4 warning, 6 info, 7 debug.
    static constexpr int kPriority[] = {3, 4, 6, 7};
    return absl::StrCat("<", kPriority[static_cast<int>(level)], ">", message);
  }
  if (level == LogLevel::kInfo) return absl::StrCat("blockswapd: ", message);
  return absl::StrCat("blockswapd: [", LogLevelName(level), "] ", message);
}

void Log(LogLevel level, absl::string_view message) {
  if (!LogEnabled(level)) return;
  std::string line = FormatLogLine(level, message, StderrIsJournal());
  line.push_back('\n');
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace blockswap::daemon
