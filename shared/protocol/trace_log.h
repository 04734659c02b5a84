// Per-load trace events and the bounded single-writer ring that holds them
// (docs/architecture.md, "Tracing"). The same layout serves in-process rings (the daemon's
// device workers) and rings in shared memory (each client ring's trace
// buffer, written by the client, read by the daemon).
//
// Writer (one thread): writes entry i at i % capacity with relaxed atomic
// stores, then publishes write_index = i + 1 (release). It writes entry i
// only while write_index == i, so entry j stays intact until write_index
// passes j + capacity.
// Reader (any process): loads write_index (acquire), copies the entries
// still held, fences (acquire) and loads write_index again; an entry the
// writer may have started to overwrite meanwhile (index < second - capacity
// + 1) is dropped and counted as lost, so a torn entry is never returned as
// valid (the seqlock pattern; every word is an atomic, so no data race).
// A writer in another process may write anything into its ring: readers
// treat the index and entries as untrusted (Read clamps, callers validate
// kinds and ring ids).
#ifndef BLOCKSWAP_SHARED_PROTOCOL_TRACE_LOG_H_
#define BLOCKSWAP_SHARED_PROTOCOL_TRACE_LOG_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "shared/base/monotonic_clock.h"

namespace blockswap {

// What happened. Client kinds are recorded by the client library
// (RingConsumer), daemon kinds by the device workers.
enum class TraceKind : uint16_t {
  kNone = 0,
  // Client.
  kRequest = 1,  // a load of (slot, generation) is about to be sent
  kWait = 2,     // a wait for (slot, generation); value = its length in ns,
                 // flags & kTraceStalled when the slot was not filled yet
  kRelease = 3,  // free[s] recorded and consumed_seq published
  kStall = 4,    // the compute stream sat idle at the wait for (slot,
                 // generation): time_ns = when it began idling, value = ns
                 // idle (timing events on cuda, the stream worker on host)
  // Daemon.
  kAccepted = 16,   // a request passed the protocol checks; value = bytes
  kCopyIssued = 17, // its copy was queued on the copy stream; value = bytes
  kFilled = 18,     // the ready word's write queued and filled_seq published
  kCopyDone = 19,   // the worker saw the copy complete (an event it queries)
  kRejected = 20,   // a request broke the protocol; its ring failed
  kReleaseNotified = 21,  // the copy of (slot, generation) was waiting for
                          // its slot, and the client's notification released
                          // it: time_ns = when the client's host function ran
                          // (as the client wrote it)
  kCopyReady = 22,  // the daemon found the slot released: the copy waits for
                    // its ring's turn on the copy stream (the fair issue
                    // order, daemon/device/copy_scheduler.h); value = bytes
};
inline constexpr uint16_t kTraceStalled = 1;

absl::string_view TraceKindName(TraceKind kind);
inline bool IsClientTraceKind(uint16_t kind) { return kind >= 1 && kind <= 4; }
inline bool IsDaemonTraceKind(uint16_t kind) { return kind >= 16 && kind <= 22; }

// One event as the writer records it and a reader returns it.
struct TraceEvent {
  uint64_t time_ns = 0;  // CLOCK_MONOTONIC: one clock for every process of the host
  uint64_t ring_id = 0;
  uint64_t value = 0;  // bytes, or a wait's length in ns
  uint32_t slot = 0;
  uint32_t generation = 0;
  uint32_t block = 0;
  TraceKind kind = TraceKind::kNone;
  uint16_t flags = 0;
};

// The fixed layout in memory: a header line, then `capacity` entries of five
// 64-bit words. Lock-free, so it works across processes.
struct TraceEntry {
  std::atomic<uint64_t> words[5];
};
struct TraceHeader {
  uint32_t magic;     // kTraceMagic
  uint32_t version;   // kTraceVersion
  uint32_t capacity;  // informational: readers use the capacity they were built with
  uint32_t reserved;
  alignas(64) std::atomic<uint64_t> write_index;
};
inline constexpr uint32_t kTraceMagic = 0x42535452;  // "BSTR"
inline constexpr uint32_t kTraceVersion = 1;
static_assert(sizeof(TraceEntry) == 40);

// Bytes of a ring of `capacity` entries.
inline constexpr size_t TraceLogBytes(uint32_t capacity) {
  return sizeof(TraceHeader) + size_t{capacity} * sizeof(TraceEntry);
}

// What a reader got: the entries still held, oldest first, and how many were
// written but are gone (overwritten before this read, or during it) — zero
// when the ring still reaches back to the `since_ns` asked for, since all it
// lost is then older than that.
struct TraceSnapshot {
  std::vector<TraceEvent> events;
  uint64_t lost = 0;
  uint64_t written = 0;  // the write index seen last
};

// A view of a ring in memory owned elsewhere (a mapping, or TraceBuffer).
// The memory must outlive the view. Record: the one writer thread only;
// Read: any thread or process.
class TraceLog {
 public:
  // `memory` holds TraceLogBytes(capacity) bytes, at least 64-byte aligned.
  // A null `memory` makes a view to be assigned later (never used as is).
  TraceLog(void* memory, uint32_t capacity)
      : header_(static_cast<TraceHeader*>(memory)),
        entries_(memory == nullptr ? nullptr
                                   : reinterpret_cast<TraceEntry*>(static_cast<std::byte*>(memory) +
                                                                   sizeof(TraceHeader))),
        capacity_(capacity) {}

  // Writes the header of a fresh ring (the creator, before anyone reads).
  void Initialize();

  void Record(const TraceEvent& event) {
    const uint64_t index = header_->write_index.load(std::memory_order_relaxed);
    TraceEntry& entry = entries_[index % capacity_];
    entry.words[0].store(event.time_ns, std::memory_order_relaxed);
    entry.words[1].store(event.ring_id, std::memory_order_relaxed);
    entry.words[2].store(event.value, std::memory_order_relaxed);
    entry.words[3].store(uint64_t{event.slot} | (uint64_t{event.generation} << 32),
                         std::memory_order_relaxed);
    entry.words[4].store(uint64_t{event.block} | (uint64_t{static_cast<uint16_t>(event.kind)} << 32) |
                             (uint64_t{event.flags} << 48),
                         std::memory_order_relaxed);
    header_->write_index.store(index + 1, std::memory_order_release);
  }

  // The events with time_ns >= since_ns still held (see the file comment).
  TraceSnapshot Read(uint64_t since_ns = 0) const;

  uint32_t capacity() const { return capacity_; }

 private:
  TraceHeader* header_;
  TraceEntry* entries_;
  uint32_t capacity_;
};

// A ring in the process's own memory (the daemon's device workers).
class TraceBuffer {
 public:
  explicit TraceBuffer(uint32_t capacity);
  TraceLog& ring() { return ring_; }
  const TraceLog& ring() const { return ring_; }

 private:
  struct alignas(64) Line {
    std::byte bytes[64];
  };
  std::unique_ptr<Line[]> memory_;
  TraceLog ring_;
};

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_PROTOCOL_TRACE_LOG_H_
