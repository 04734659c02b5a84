#include "client/core/socket_path.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

#include "shared/base/env_settings.h"

namespace blockswap::client {
namespace {

// Sets (or unsets) $BLOCKSWAP_SOCKET for one test and restores it after.
class ScopedSocketEnvironment {
 public:
  explicit ScopedSocketEnvironment(std::optional<std::string> value) {
    if (const char* old = ::getenv(EnvName(EnvSetting::kSocket))) saved_ = old;
    if (value) {
      ::setenv(EnvName(EnvSetting::kSocket), value->c_str(), 1);
    } else {
      ::unsetenv(EnvName(EnvSetting::kSocket));
    }
  }
  ~ScopedSocketEnvironment() {
    if (saved_) {
      ::setenv(EnvName(EnvSetting::kSocket), saved_->c_str(), 1);
    } else {
      ::unsetenv(EnvName(EnvSetting::kSocket));
    }
  }

 private:
  std::optional<std::string> saved_;
};

TEST(ResolveSocketTest, AnExplicitPathBeatsTheEnvironment) {
  ScopedSocketEnvironment environment("/from/env.sock");
  ResolvedSocket socket = ResolveSocket("/from/flag.sock");
  EXPECT_EQ(socket.path, "/from/flag.sock");
  EXPECT_EQ(socket.source, SocketSource::kExplicit);
}

TEST(ResolveSocketTest, TheEnvironmentBeatsTheDefault) {
  ScopedSocketEnvironment environment("/from/env.sock");
  ResolvedSocket socket = ResolveSocket("");
  EXPECT_EQ(socket.path, "/from/env.sock");
  EXPECT_EQ(socket.source, SocketSource::kEnvironment);
}

TEST(ResolveSocketTest, WithNeitherItIsTheSystemSocket) {
  ScopedSocketEnvironment environment(std::nullopt);
  ResolvedSocket socket = ResolveSocket("");
  EXPECT_EQ(socket.path, "/run/blockswap/blockswapd.sock");
  EXPECT_EQ(socket.source, SocketSource::kSystemDefault);
}

TEST(ResolveSocketTest, AnEmptyEnvironmentVariableCountsAsUnset) {
  ScopedSocketEnvironment environment("");
  EXPECT_EQ(ResolveSocket("").source, SocketSource::kSystemDefault);
}

}  // namespace
}  // namespace blockswap::client
