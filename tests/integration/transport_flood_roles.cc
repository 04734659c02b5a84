// `continuation-flood`: an allowed user who makes the daemon buffer what
// gRPC would before a request is complete. As --uid=N it opens
// --connections HTTP/2 connections to the daemon's socket and on each
// starts one request whose header block never ends within bounds: a
// HEADERS frame holding one literal header field whose value is declared
// --header-mib MiB long, then that value in CONTINUATION frames of 16 KiB
// (the largest a peer may send before the server raises
// SETTINGS_MAX_FRAME_SIZE), the connections in turn. The last frame ends
// the block. Then it holds every connection open --hold-ms ms and closes
// them. Reports `sent` (bytes of the header blocks written), `closed` (the
// connections the daemon hung up on before their block was sent), then
// `done`. Exit 0 once reported: the test decides.
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "shared/base/unique_fd.h"
#include "tests/integration/client_roles.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kSettings = 0x4;
constexpr uint8_t kContinuation = 0x9;
constexpr uint8_t kEndHeaders = 0x4;
constexpr size_t kFramePayload = 16384;

void AppendFrameHeader(std::string& out, size_t length, uint8_t type, uint8_t flags,
                       uint32_t stream) {
  out.push_back(static_cast<char>(length >> 16));
  out.push_back(static_cast<char>(length >> 8));
  out.push_back(static_cast<char>(length));
  out.push_back(static_cast<char>(type));
  out.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(stream >> shift));
}

// An HPACK integer with a 7-bit prefix (RFC 7541, 5.1), the prefix's other
// bit 0 (a string that is not Huffman-coded).
void AppendHpackLength(std::string& out, uint64_t value) {
  if (value < 127) {
    out.push_back(static_cast<char>(value));
    return;
  }
  out.push_back(0x7f);
  value -= 127;
  while (value >= 128) {
    out.push_back(static_cast<char>(0x80 | (value & 0x7f)));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

UniqueFd Connect(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (!fd.valid() ||
      ::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return UniqueFd();
  }
  return fd;
}

// False once the daemon hung up (EPIPE, ECONNRESET).
bool SendAll(const UniqueFd& fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd.get(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

int RunContinuationFlood(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  if (!BecomeUid(args)) return kClientSetupFailed;
  const int connections = static_cast<int>(args.Int("connections", 16));
  const uint64_t value_bytes = static_cast<uint64_t>(args.Int("header-mib", 4)) << 20;

  // Preface, an empty SETTINGS frame, and a HEADERS frame that starts a
  // literal field "x" (without indexing, new name) of value_bytes bytes.
  std::string start(kPreface, sizeof(kPreface) - 1);
  AppendFrameHeader(start, 0, kSettings, 0, 0);
  std::string field = {'\0', '\x01', 'x'};
  AppendHpackLength(field, value_bytes);
  AppendFrameHeader(start, field.size(), kHeaders, 0, 1);
  start += field;

  std::vector<UniqueFd> open;
  std::vector<bool> alive;
  for (int c = 0; c < connections; ++c) {
    UniqueFd fd = Connect(args.Str("socket"));
    if (!fd.valid()) {
      std::cerr << "continuation-flood: connect: " << std::strerror(errno) << "\n";
      return kClientFailed;
    }
    alive.push_back(SendAll(fd, start));
    open.push_back(std::move(fd));
  }
  const std::string payload(kFramePayload, 'a');
  uint64_t sent = 0;
  for (uint64_t at = 0; at < value_bytes; at += kFramePayload) {
    const size_t length = static_cast<size_t>(std::min<uint64_t>(kFramePayload, value_bytes - at));
    std::string frame;
    AppendFrameHeader(frame, length, kContinuation,
                      at + length == value_bytes ? kEndHeaders : 0, 1);
    frame.append(payload, 0, length);
    bool any = false;
    for (int c = 0; c < connections; ++c) {
      if (!alive[c]) continue;
      alive[c] = SendAll(open[c], frame);
      if (alive[c]) sent += frame.size();
      any = any || alive[c];
    }
    if (!any) break;
  }
  int closed = 0;
  for (bool a : alive) closed += !a;
  report.Add("sent", absl::StrCat(sent));
  report.Add("closed", absl::StrCat(closed));
  report.Add("holding", "1");
  absl::SleepFor(absl::Milliseconds(args.Int("hold-ms", 0)));
  open.clear();
  report.Add("done", "1");
  return kClientOk;
}
BLOCKSWAP_CHILD_ROLE("continuation-flood", RunContinuationFlood);

}  // namespace
}  // namespace blockswap::testing
