// The request ring of the shared-memory load fast path: a FIFO of load
// requests that a client writes into its ring's ClientControlBlock and the
// daemon's device worker reads (control_block.h), beside the gRPC Load
// stream, which stays the reference transport.
//
//   client (RequestQueueWriter)           daemon (RequestQueueReader)
//   entries[tail % cap] = request        tail = request_tail (acquire)
//   request_tail = tail + 1 (release)    copy entries head..tail into locals
//   ring the device's doorbell           request_head = tail (release)
//
// Indices are free-running 32-bit counters (they wrap). The client writes
// only the entries and request_tail; the daemon writes only request_head.
// A well-behaved client has at most one outstanding request per slot, so a
// ring of kRequestRingCapacity >= kMaxRingSlots entries never fills; a tail
// more than the capacity past the head is that client's protocol error.
#ifndef BLOCKSWAP_SHARED_PROTOCOL_REQUEST_QUEUE_H_
#define BLOCKSWAP_SHARED_PROTOCOL_REQUEST_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "shared/protocol/control_block.h"

namespace blockswap {

// One request, copied out of shared memory.
struct RequestValues {
  uint32_t slot = 0;
  uint32_t generation = 0;
  uint32_t model_handle = 0;
  uint32_t block = 0;
};

// The client's side. Thread-compatible (the client's Ring holds its mutex).
class RequestQueueWriter {
 public:
  // `client` and `daemon` (the ring's two control blocks) must outlive it.
  RequestQueueWriter(ClientControlBlock& client, const DaemonControlBlock& daemon)
      : client_(client), daemon_(daemon) {}

  // Publishes `request`; the caller then rings the doorbell. RESOURCE_EXHAUSTED
  // when the daemon has not yet taken kRequestRingCapacity earlier entries
  // (never, with one outstanding request per slot).
  absl::Status Push(const RequestValues& request);

 private:
  ClientControlBlock& client_;
  const DaemonControlBlock& daemon_;
};

// The daemon's side. Thread-compatible (the device worker owns it).
class RequestQueueReader {
 public:
  // `client` is the daemon's read-only mapping of the client's control
  // block, `daemon` its own; both must outlive it.
  RequestQueueReader(const ClientControlBlock& client, DaemonControlBlock& daemon);

  // Whether the client has published entries not yet taken.
  bool HasRequests() const {
    return client_.request_tail.load(std::memory_order_acquire) != head_;
  }
  // Appends the entries published since the last call to `out` (each copied
  // once, so a client rewriting them afterwards changes nothing) and
  // publishes the new head. A tail more than kRequestRingCapacity entries
  // past the head is FAILED_PRECONDITION, naming both, and takes nothing.
  absl::Status Take(std::vector<RequestValues>& out);
  uint32_t head() const { return head_; }

 private:
  const ClientControlBlock& client_;
  DaemonControlBlock& daemon_;
  uint32_t head_;  // the daemon's own copy: the shared one is only published
};

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_PROTOCOL_REQUEST_QUEUE_H_
