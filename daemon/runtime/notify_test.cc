#include "daemon/runtime/notify.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {
namespace {

// A datagram socket bound to `name` (a path, or "@x" abstract), as systemd's.
UniqueFd BindDatagram(const std::string& name) {
  UniqueFd socket(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, name.data(), name.size());
  if (name[0] == '@') address.sun_path[0] = '\0';
  socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  EXPECT_EQ(::bind(socket.get(), reinterpret_cast<sockaddr*>(&address), length), 0);
  return socket;
}

std::string Receive(const UniqueFd& socket) {
  char buffer[4096];
  ssize_t n = ::recv(socket.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
  return n < 0 ? std::string() : std::string(buffer, static_cast<size_t>(n));
}

TEST(Notify, SendsOneDatagramToAPath) {
  char dir[] = "/tmp/blockswap-notify-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = absl::StrCat(dir, "/notify");
  UniqueFd socket = BindDatagram(path);
  ASSERT_TRUE(NotifyTo(path, "READY=1\nSTATUS=serving").ok());
  EXPECT_EQ(Receive(socket), "READY=1\nSTATUS=serving");
  ::unlink(path.c_str());
  ::rmdir(dir);
}

TEST(Notify, SendsToAnAbstractSocket) {
  const std::string name = absl::StrCat("@blockswap-notify-test-", ::getpid());
  UniqueFd socket = BindDatagram(name);
  ASSERT_TRUE(NotifyTo(name, "STOPPING=1").ok());
  EXPECT_EQ(Receive(socket), "STOPPING=1");
}

TEST(Notify, WithoutNotifySocketNothingIsSent) {
  ::unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(NotifySystemd("READY=1").ok());
}

TEST(Notify, ABadSocketNameIsAnErrorNamingIt) {
  absl::Status s = NotifyTo("relative", "READY=1");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("relative"), absl::string_view::npos);
  EXPECT_FALSE(NotifyTo("/nonexistent/notify", "READY=1").ok());
}

}  // namespace
}  // namespace blockswap::daemon
