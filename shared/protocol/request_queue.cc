#include "shared/protocol/request_queue.h"

#include "absl/strings/str_cat.h"

namespace blockswap {

absl::Status RequestQueueWriter::Push(const RequestValues& request) {
  // The only writer of request_tail, so a relaxed read of it is exact.
  const uint32_t tail = client_.request_tail.load(std::memory_order_relaxed);
  const uint32_t head = daemon_.request_head.load(std::memory_order_acquire);
  if (tail - head >= kRequestRingCapacity) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request ring full: ", tail - head, " requests not yet taken by blockswapd (",
                     kRequestRingCapacity, " entries)"));
  }
  RequestEntry& entry = client_.requests[tail % kRequestRingCapacity];
  entry.slot.store(request.slot, std::memory_order_relaxed);
  entry.generation.store(request.generation, std::memory_order_relaxed);
  entry.model_handle.store(request.model_handle, std::memory_order_relaxed);
  entry.block.store(request.block, std::memory_order_relaxed);
  // Release: the entry is visible to a daemon that sees the new tail.
  client_.request_tail.store(tail + 1, std::memory_order_release);
  return absl::OkStatus();
}

RequestQueueReader::RequestQueueReader(const ClientControlBlock& client, DaemonControlBlock& daemon)
    : client_(client),
      daemon_(daemon),
      head_(daemon.request_head.load(std::memory_order_relaxed)) {}

absl::Status RequestQueueReader::Take(std::vector<RequestValues>& out) {
  const uint32_t tail = client_.request_tail.load(std::memory_order_acquire);
  const uint32_t pending = tail - head_;  // serial-number distance: wraps
  if (pending > kRequestRingCapacity) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request ring tail ", tail, " is ", pending, " entries past head ", head_,
        " (the ring has ", kRequestRingCapacity, " entries)"));
  }
  for (uint32_t i = head_; i != tail; ++i) {
    const RequestEntry& entry = client_.requests[i % kRequestRingCapacity];
    out.push_back(RequestValues{entry.slot.load(std::memory_order_relaxed),
                                entry.generation.load(std::memory_order_relaxed),
                                entry.model_handle.load(std::memory_order_relaxed),
                                entry.block.load(std::memory_order_relaxed)});
  }
  head_ = tail;
  daemon_.request_head.store(head_, std::memory_order_release);
  return absl::OkStatus();
}

}  // namespace blockswap
