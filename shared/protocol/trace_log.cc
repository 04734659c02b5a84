#include "shared/protocol/trace_log.h"

#include <algorithm>

namespace blockswap {

absl::string_view TraceKindName(TraceKind kind) {
  switch (kind) {
    case TraceKind::kNone:
      return "none";
    case TraceKind::kRequest:
      return "request";
    case TraceKind::kWait:
      return "wait";
    case TraceKind::kRelease:
      return "release";
    case TraceKind::kStall:
      return "stall";
    case TraceKind::kAccepted:
      return "accepted";
    case TraceKind::kCopyIssued:
      return "copy-issued";
    case TraceKind::kFilled:
      return "filled";
    case TraceKind::kCopyDone:
      return "copy-done";
    case TraceKind::kRejected:
      return "rejected";
    case TraceKind::kReleaseNotified:
      return "release-notified";
    case TraceKind::kCopyReady:
      return "copy-ready";
  }
  return "unknown";
}

void TraceLog::Initialize() {
  header_->magic = kTraceMagic;
  header_->version = kTraceVersion;
  header_->capacity = capacity_;
  header_->reserved = 0;
  header_->write_index.store(0, std::memory_order_release);
}

TraceSnapshot TraceLog::Read(uint64_t since_ns) const {
  TraceSnapshot out;
  const uint64_t first_index = header_->write_index.load(std::memory_order_acquire);
  const uint64_t begin = first_index > capacity_ ? first_index - capacity_ : 0;
  std::vector<std::pair<uint64_t, TraceEvent>> copied;
  copied.reserve(static_cast<size_t>(first_index - begin));
  for (uint64_t i = begin; i < first_index; ++i) {
    const TraceEntry& entry = entries_[i % capacity_];
    uint64_t words[5];
    for (int w = 0; w < 5; ++w) words[w] = entry.words[w].load(std::memory_order_relaxed);
    TraceEvent event;
    event.time_ns = words[0];
    event.ring_id = words[1];
    event.value = words[2];
    event.slot = static_cast<uint32_t>(words[3]);
    event.generation = static_cast<uint32_t>(words[3] >> 32);
    event.block = static_cast<uint32_t>(words[4]);
    event.kind = static_cast<TraceKind>(static_cast<uint16_t>(words[4] >> 32));
    event.flags = static_cast<uint16_t>(words[4] >> 48);
    copied.emplace_back(i, event);
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t second_index = header_->write_index.load(std::memory_order_relaxed);
  // The writer may be writing entry `second_index` now, over entry
  // second_index - capacity: everything below second_index - capacity + 1
  // may be torn.
  const uint64_t valid_from =
      second_index >= capacity_ ? second_index - capacity_ + 1 : 0;
  uint64_t kept = 0;
  bool reaches_since = false;  // an event held is at or before since_ns
  for (const auto& [index, event] : copied) {
    if (index < valid_from) continue;
    ++kept;
    reaches_since = reaches_since || event.time_ns <= since_ns;
    if (event.time_ns >= since_ns) out.events.push_back(event);
  }
  // Entries written after the first load are not lost, only not read yet.
  // One writer records in time order, so when the ring still reaches back to
  // since_ns, what it lost is all older than the window.
  out.lost = reaches_since && since_ns > 0 ? 0 : first_index - kept;
  out.written = first_index;
  return out;
}

TraceBuffer::TraceBuffer(uint32_t capacity)
    : memory_(new Line[(TraceLogBytes(capacity) + sizeof(Line) - 1) / sizeof(Line)]),
      ring_(memory_.get(), capacity) {
  ring_.Initialize();
}

}  // namespace blockswap
