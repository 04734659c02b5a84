// The primitives probe's processes talk over a socket pair, step by step
// (cuda_primitives.cc): each message belongs to a step and a phase, and each
// step ends with one end message from each side carrying its status, so
// that the sides stay in step whoever fails where, and the reporting side
// (A) learns every side's outcome of every step.
#ifndef BLOCKSWAP_TESTS_GPU_PROBE_CHANNEL_H_
#define BLOCKSWAP_TESTS_GPU_PROBE_CHANNEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "shared/base/unique_fd.h"
#include "tests/gpu/probe_report.h"

namespace blockswap::probe {

// A: the daemon's side (exports, reports the lines). B: a trainer's
// (imports), of the client user where one is given. A2: a second process of
// A's user: a same-uid importer (the private daemon's case), and an
// exporter that exits while B still maps its memory.
enum class Role { kA, kB, kA2 };

// "B (pid 12, uid 65534)": this process in `role`.
std::string Who(Role role);

// How long one process waits for another's next message. A GPU does each
// step in microseconds; the limit only keeps a broken one from hanging.
inline constexpr absl::Duration kPeerTimeout = absl::Seconds(10);

// One message: the step and phase it belongs to, the sender's status code
// in an end message (0: its part went well), a payload (a size) and the
// sender's detail (its failure, or what it saw).
struct Wire {
  uint32_t step = 0;
  uint32_t phase = 0;
  uint32_t code = 0;  // absl::StatusCode of the sender's part
  char data[64] = {};
  char detail[480] = {};
};

struct Received {
  Wire wire;
  std::vector<UniqueFd> fds;
  // The one descriptor the message had to carry.
  absl::StatusOr<UniqueFd> TakeFd(absl::string_view what);
};

// Two processes' socket (SOCK_SEQPACKET: one message per send), as seen by
// `role`. A side that fails sends its end at once and skips the rest of its
// part, so the peer, awaiting a message of that step, receives the end
// instead and gives up too (ABORTED).
class Channel {
 public:
  Channel(UniqueFd socket, Role role) : socket_(std::move(socket)), role_(role) {}

  absl::Status Send(uint32_t step, uint32_t phase, const void* data = nullptr, size_t size = 0,
                    int fd = -1);

  // The peer's message `phase` of `step`; ABORTED when the peer ended the
  // step first (failed), DEADLINE_EXCEEDED after kPeerTimeout, UNAVAILABLE
  // when the peer is gone.
  absl::StatusOr<Received> Await(uint32_t step, uint32_t phase);

  // Ends the step with this side's status (`info`, when it went well, is
  // what the line may say of this side) and returns the peer's, its code
  // kept (the peer's message names it).
  struct PeerEnd {
    absl::Status status;
    std::string info;
  };
  PeerEnd Finish(uint32_t step, const absl::Status& mine, const std::string& info = "");

 private:
  absl::Status SendWire(const Wire& wire, int fd);

  UniqueFd socket_;
  Role role_;
  std::optional<Wire> peer_end_;
};

// The outcome of a step as A reports it: PASS when every side went well;
// SKIP when a side found the device without an optional feature
// (UNIMPLEMENTED, its message saying which); else the first real failure (a
// side that only gave up because another failed is named last).
void Conclude(Report& report, absl::string_view name, const absl::Status& mine,
              const std::vector<Channel::PeerEnd>& peers, absl::string_view passed);

}  // namespace blockswap::probe

#endif  // BLOCKSWAP_TESTS_GPU_PROBE_CHANNEL_H_
