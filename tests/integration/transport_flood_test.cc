// What one allowed user can make the daemon buffer through its socket before
// a request is complete, with real processes: uid 65534 sends header blocks
// of CONTINUATION frames that never end within bounds
// (transport_flood_roles.cc) while a well-behaved client streams and
// verifies every block.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/server/http2_frame_guard.h"
#include "shared/base/unique_fd.h"
#include "tests/integration/daemon_client_fixture.h"

namespace blockswap::testing {
namespace {

// VmRSS of `pid` in bytes (0 when unreadable).
uint64_t ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    uint64_t kib = 0;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    return absl::SimpleAtoi(digits, &kib) ? kib << 10 : 0;
  }
  return 0;
}

// The SETTINGS the daemon's gRPC server sends a new connection, by
// identifier (RFC 9113 §6.5.2).
std::map<uint16_t, uint32_t> ServerSettings(const std::string& socket_path) {
  std::map<uint16_t, uint32_t> settings;
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_path.c_str(), sizeof(address.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return settings;
  }
  const std::string hello = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                            std::string("\0\0\0\x04\0\0\0\0\0", 9);
  if (::send(fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(hello.size())) {
    return settings;
  }
  std::string bytes;
  char buffer[4096];
  for (absl::Time until = absl::Now() + absl::Seconds(5); absl::Now() < until;) {
    pollfd readable{fd.get(), POLLIN, 0};
    if (::poll(&readable, 1, 100) <= 0) continue;
    ssize_t n = ::recv(fd.get(), buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
    if (bytes.size() < 9) continue;
    const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])); };
    const uint32_t length = byte(0) << 16 | byte(1) << 8 | byte(2);
    if (bytes.size() < 9 + length) continue;
    if (byte(3) != 0x4) break;  // the server's first frame is its SETTINGS
    for (size_t at = 9; at + 6 <= 9 + length; at += 6) {
      settings[static_cast<uint16_t>(byte(at) << 8 | byte(at + 1))] =
          byte(at + 2) << 24 | byte(at + 3) << 16 | byte(at + 4) << 8 | byte(at + 5);
    }
    break;
  }
  return settings;
}

class TransportFloodTest : public DaemonClientTest {};

// gRPC's metadata limit, which bounds a header block once decoded, is the
// relay's limit of the block as sent: the daemon tells its clients so.
TEST_F(TransportFloodTest, GrpcAdvertisesTheRelaysHeaderLimit) {
  StartDaemon();
  const std::map<uint16_t, uint32_t> settings = ServerSettings(dirs_->socket_path());
  constexpr uint16_t kMaxHeaderListSize = 0x6;
  ASSERT_TRUE(settings.contains(kMaxHeaderListSize)) << settings.size() << " settings";
  EXPECT_EQ(settings.at(kMaxHeaderListSize), daemon::Http2Limits().max_header_block_bytes);
}

// 16 connections × 4 MiB of one header block each. On gRPC 1.51 alone the
// daemon buffered them (hundreds of MiB, kept after close); each connection
// must instead be closed once its block passes the bound, the daemon's
// memory stay within 64 MiB of where it was, and the streamer see nothing.
TEST_F(TransportFloodTest, HeaderBlocksOfContinuationFramesAreClosedNotBuffered) {
  StartSharedDaemon({.output_path = dirs_->temp_dir() + "/daemon.log"}, {"flood"});

  ChildProcess streamer = Spawn("stream", "streamer", {"--passes=100"});
  ASSERT_TRUE(AwaitReport("streamer", "streaming"));
  const uint64_t before = ResidentBytes(daemon_->pid());

  ChildProcess flood = Spawn("continuation-flood", "flood",
                             {"--uid=65534", "--connections=16", "--header-mib=4",
                              "--hold-ms=500"});
  uint64_t peak = before;
  while (!flood.TryWait().has_value()) {
    peak = std::max(peak, ResidentBytes(daemon_->pid()));
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::SleepFor(absl::Seconds(1));
  const uint64_t after = ResidentBytes(daemon_->pid());
  std::cout << "daemon RSS: " << (before >> 20) << " MiB before, peak " << (peak >> 20)
            << " MiB during the flood, " << (after >> 20) << " MiB 1 s after; flood: "
            << Describe("flood") << "\n";

  EXPECT_EQ(FirstValue(Report("flood"), "done"), "1") << Describe("flood");
  EXPECT_EQ(FirstValue(Report("flood"), "closed"), "16")
      << "the daemon kept reading a header block past its bound";
  EXPECT_LT(peak, before + (uint64_t{64} << 20)) << "the flood grew the daemon by "
                                                 << ((peak - before) >> 20) << " MiB";
  EXPECT_LT(after, before + (uint64_t{64} << 20)) << "the daemon kept "
                                                  << ((after - before) >> 20) << " MiB";
  EXPECT_EQ(Finish(streamer, "streamer"), kClientOk) << "the well-behaved client was disturbed";
}

}  // namespace
}  // namespace blockswap::testing
