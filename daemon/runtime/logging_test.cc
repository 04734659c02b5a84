#include "daemon/runtime/logging.h"

#include <gtest/gtest.h>

namespace blockswap::daemon {
namespace {

TEST(Logging, LevelsParseByName) {
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_FALSE(ParseLogLevel("WARN").ok());
}

TEST(Logging, JournalLinesCarryTheSyslogPriority) {
  EXPECT_EQ(FormatLogLine(LogLevel::kError, "boom", true), "<3>boom");
  EXPECT_EQ(FormatLogLine(LogLevel::kWarning, "hm", true), "<4>hm");
  EXPECT_EQ(FormatLogLine(LogLevel::kInfo, "ok", true), "<6>ok");
  EXPECT_EQ(FormatLogLine(LogLevel::kDebug, "x", true), "<7>x");
}

TEST(Logging, TerminalLinesNameTheDaemonAndTheLevel) {
  EXPECT_EQ(FormatLogLine(LogLevel::kInfo, "ready", false), "blockswapd: ready");
  EXPECT_EQ(FormatLogLine(LogLevel::kWarning, "slow", false), "blockswapd: [warning] slow");
}

TEST(Logging, LinesAboveTheLevelAreDropped) {
  const LogLevel before = GetLogLevel();
  SetLogLevel(LogLevel::kWarning);
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  EXPECT_TRUE(LogEnabled(LogLevel::kWarning));
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  SetLogLevel(LogLevel::kDebug);
  EXPECT_TRUE(LogEnabled(LogLevel::kDebug));
  SetLogLevel(before);
}

}  // namespace
}  // namespace blockswap::daemon
