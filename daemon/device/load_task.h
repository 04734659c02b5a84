// LoadTask: one load request as a device worker takes it from either
// transport (a Load stream's message, or an entry of a ring's request ring),
// and LoadEventSink, where the errors of a load go.
#ifndef BLOCKSWAP_DAEMON_DEVICE_LOAD_TASK_H_
#define BLOCKSWAP_DAEMON_DEVICE_LOAD_TASK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "blockswap/v1/blockswap.pb.h"
#include "daemon/device/load_resolver.h"

namespace blockswap::daemon {

// Where the errors of a load go: the Load stream that sent the request.
// Send never blocks; a sink whose stream has ended drops events.
class LoadEventSink {
 public:
  virtual ~LoadEventSink() = default;
  virtual void Send(v1::LoadEvent event) = 0;
};

// The event that reports `error` for a load request to its client.
v1::LoadEvent LoadErrorEvent(uint64_t ring_id, uint32_t slot, uint32_t generation,
                             const absl::Status& error);

// One validated load request.
struct LoadTask {
  uint64_t ring_id = 0;
  uint32_t slot = 0;
  uint32_t generation = 0;
  const std::byte* source = nullptr;  // the block's master bytes
  size_t bytes = 0;
  // Keeps `source` mapped until the copy reading it has completed.
  std::shared_ptr<const void> keep_alive;
  std::string model_id;
  // The master is not pinned: copied through the staging buffers.
  bool staged = false;
  uint32_t block = 0;
  std::shared_ptr<LoadEventSink> sink;
  absl::Status rejection;  // set: fail the ring with it instead of loading

  // Where the bytes come from, as either transport resolved them.
  void SetSource(ResolvedLoad resolved) {
    source = resolved.source;
    bytes = resolved.bytes;
    keep_alive = std::move(resolved.keep_alive);
    model_id = std::move(resolved.model_id);
    staged = resolved.staged;
  }
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_LOAD_TASK_H_
