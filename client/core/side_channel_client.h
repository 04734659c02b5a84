// The client's half of the descriptor side channel (docs/rules.md,
// "Descriptors over a side channel"; the wire format is
// shared/protocol/side_channel_wire.h).
//
// After Attach, the client connects a second time to the daemon's socket and
// introduces itself with its session token; the daemon then sends the
// descriptors a reply names (FdRef{batch, index}) as batches on this channel.
// A reply may arrive on gRPC before or after its batch, and several threads
// may wait for different batches at once, so batches not yet asked for are
// kept until someone asks.
#ifndef BLOCKSWAP_CLIENT_CORE_SIDE_CHANNEL_CLIENT_H_
#define BLOCKSWAP_CLIENT_CORE_SIDE_CHANNEL_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shared/base/unique_fd.h"

namespace blockswap::client {

// Thread-safe (Receive from any number of threads); moving one is not, so
// move it only before sharing it.
class SideChannelClient {
 public:
  // Connects to the daemon at `socket_path` and sends the hello with `token`
  // (32 printable ASCII bytes: the session token Attach returned). Returns
  // once the hello is sent: a token the daemon refuses shows up as the
  // channel being closed (UNAVAILABLE from Receive).
  static absl::StatusOr<SideChannelClient> Connect(absl::string_view socket_path,
                                                   absl::string_view token);

  // Waits until the daemon has attached the channel to the session (its
  // kSideChannelAcceptedBatch); UNAVAILABLE when it refused the token.
  absl::Status AwaitAccepted(absl::Duration timeout);

  SideChannelClient(SideChannelClient&&) noexcept = default;
  SideChannelClient& operator=(SideChannelClient&&) noexcept = default;

  // The descriptors of batch `batch`, in the order the daemon sent them.
  // Waits at most `timeout` (DEADLINE_EXCEEDED). Batches read meanwhile for
  // other callers are kept for them. The daemon closing the channel is
  // UNAVAILABLE and a malformed message (wrong magic, fewer or more
  // descriptors than announced, a batch sent twice) DATA_LOSS; both are
  // final: every later Receive returns the same error (batches already kept
  // can still be taken).
  absl::StatusOr<std::vector<UniqueFd>> Receive(uint64_t batch, absl::Duration timeout);

  // Sends `file` to the daemon as file offer `offer` (one FileOfferHeader
  // with the descriptor attached). Thread-safe; may run beside Receive.
  absl::Status SendFileOffer(uint64_t offer, const UniqueFd& file);

 private:
  struct Batch {
    uint64_t batch = 0;
    std::vector<UniqueFd> fds;
  };
  // Behind a pointer so that the client can be moved (the mutex cannot).
  struct State {
    UniqueFd socket;
    absl::Mutex mu;
    absl::CondVar changed;  // a batch was kept, the reader left, or the channel failed
    bool reading ABSL_GUARDED_BY(mu) = false;  // one thread at a time reads the socket
    std::map<uint64_t, std::vector<UniqueFd>> kept ABSL_GUARDED_BY(mu);
    absl::Status failure ABSL_GUARDED_BY(mu);
    absl::Mutex send_mu;  // one offer at a time, so none is interleaved
  };

  explicit SideChannelClient(std::unique_ptr<State> state) : state_(std::move(state)) {}

  // Reads one batch, waiting until `deadline`. Called without the mutex, by
  // the one thread that is `reading`.
  static absl::StatusOr<Batch> ReadBatch(const UniqueFd& socket, absl::Time deadline);

  std::unique_ptr<State> state_;
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_SIDE_CHANNEL_CLIENT_H_
