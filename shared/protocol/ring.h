// One ring: B slots of device memory on one device, the two halves of the
// control block (control_block.h) and, where the device has stream memory
// operations, a page of ready words.
//
// The daemon creates every part of a ring (DaemonRing::Create) and exports it
// to exactly one client, which imports it (RingImport::Import). Everything
// crosses as a file descriptor, so the client may be of any uid; no event
// crosses (the driver opens an IPC event only in its creator's uid). The
// client's `free` events are its own (RingImport).
#ifndef BLOCKSWAP_SHARED_PROTOCOL_RING_H_
#define BLOCKSWAP_SHARED_PROTOCOL_RING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "shared/backend/backend.h"
#include "shared/os/doorbell.h"
#include "shared/os/shared_memory.h"
#include "shared/protocol/control_block.h"
#include "shared/protocol/trace_log.h"

namespace blockswap {

// Slots start at multiples of this, so any dtype view of a slot is aligned.
inline constexpr uint64_t kSlotAlignment = 256;

// Each ring's client trace buffer (trace_log.h) lives in the client's control
// object, after its control block: written by the client (RingConsumer), read
// by the daemon for Admin.Trace. About 2000 loads of history.
inline constexpr uint32_t kClientTraceCapacity = 8192;
inline constexpr size_t kClientTraceOffset = kControlBlockBytes;
inline constexpr size_t kClientControlObjectBytes =
    kClientTraceOffset + TraceLogBytes(kClientTraceCapacity);

struct RingShape {
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;  // at least the largest block streamed through it
};

// Validates a requested shape: 1..kMaxRingSlots slots of at least one byte.
absl::Status ValidateRingShape(const RingShape& shape);
// Slot s of a ring of `shape` starts at s * SlotStride(shape) of its memory,
// whoever allocates it (the daemon, or a trainer that copies itself).
inline uint64_t SlotStride(const RingShape& shape) {
  return RoundUp(shape.slot_bytes, kSlotAlignment);
}

// Everything a client needs to import a ring. Descriptors travel over
// SCM_RIGHTS; the rest in a RingDescriptor message (ring_wire.h).
struct RingExport {
  uint64_t ring_id = 0;
  std::string device_uuid;
  RingShape shape;
  std::vector<uint64_t> slot_offsets;
  uint64_t memory_bytes = 0;
  ExportedHandle memory;
  UniqueFd daemon_control;  // read-only descriptor of a 0400 object sealed against new writers
  UniqueFd client_control;  // read-write descriptor
  uint64_t boot_id = 0;
  // The load fast path, when granted: kRequestRingCapacity; 0 otherwise.
  uint32_t request_ring_capacity = 0;
  // The device's doorbell (DeviceWorker adds it to every ring): rung after
  // writing the request ring and by the client's release notifications.
  DoorbellExport doorbell;
  // The ready words (kReadyWordsBytes, read-write), where the device has
  // stream memory operations; invalid: the client waits on the host for
  // landed_seq instead.
  UniqueFd ready_words;
};

// One page of 32-bit ready words, word s for slot s.
inline constexpr size_t kReadyWordsBytes = 4096;
static_assert(kReadyWordsBytes >= kMaxRingSlots * sizeof(uint32_t));

// How far past the newest generation issued a ready word is moved when its
// ring is abandoned: ahead, in serial-number order (WordReached), of every
// generation a wait can be pending on.
inline constexpr uint32_t kReadyWordAbandonStep = 1u << 30;
// What an abandoned ring's word `slot` holds: filled_seq[slot] +
// kReadyWordAbandonStep. The same value whoever writes it, however often.
uint32_t AbandonedWordValue(const DaemonControlBlock& control, uint32_t slot);

// The daemon's side. Owns every part of the ring; the client's imports of it
// must be gone (or the client dead) before the memory is reused.
class DaemonRing {
 public:
  static absl::StatusOr<std::unique_ptr<DaemonRing>> Create(Device& device, uint64_t ring_id,
                                                            const RingShape& shape,
                                                            uint64_t boot_id);
  absl::StatusOr<RingExport> Export() const;

  uint64_t ring_id() const { return ring_id_; }
  Device& device() const { return device_; }
  const RingShape& shape() const { return shape_; }
  std::byte* slot(uint32_t s) const { return memory_->data() + slot_offsets_[s]; }
  // The ready words (word s: the last generation copied into slot s), or
  // null where the device has no stream memory operations (landed_seq).
  StreamWords* ready_words() const { return ready_words_.get(); }
  // Moves the words at once, from the host (as
  // RingImport::AbandonReadyWords): for a failed ring whose copy stream
  // cannot take the moves (RingProducer::Fail), so that no client stream
  // waits for ever on a copy that will not come. Once.
  void AbandonReadyWords();
  DaemonControlBlock& control() const {
    return *static_cast<DaemonControlBlock*>(daemon_control_map_.data());
  }
  const ClientControlBlock& client_control() const {
    return *static_cast<const ClientControlBlock*>(client_control_map_.data());
  }
  // The client's trace buffer, read-only: what a client wrote there is
  // untrusted (TraceLog::Read bounds it; the caller checks kinds).
  TraceSnapshot ReadClientTrace(uint64_t since_ns) const;

 private:
  DaemonRing(Device& device, uint64_t ring_id, const RingShape& shape)
      : device_(device), ring_id_(ring_id), shape_(shape) {}
  // The ready words, where the device has stream memory operations.
  absl::Status CreateReadyWords();

  Device& device_;
  const uint64_t ring_id_;
  const RingShape shape_;
  std::vector<uint64_t> slot_offsets_;
  std::unique_ptr<DeviceMemory> memory_;
  SharedMemory ready_words_memory_;  // valid with ready_words_
  std::unique_ptr<StreamWords> ready_words_;
  std::atomic<bool> abandoned_{false};  // AbandonReadyWords ran
  SharedMemory daemon_control_;
  Mapping daemon_control_map_;  // read-write
  SharedMemory client_control_;
  Mapping client_control_map_;  // read-only: the daemon never writes it
};

// Whether a ring import failed because this process cannot use the daemon's
// objects (a driver that does not import memory of the daemon's uid, or
// cannot wait on its ready words): nothing either side did wrong, and the
// process's own copies (copy path "trainer") still work.
bool UnusableInThisProcess(const absl::Status& error);

// The client's side, a ring imported: everything the daemon exported
// (memory, control blocks, words), mapped and validated, and the client's own
// `free` event per slot. client::Ring owns one beside the ring's id in the
// session.
class RingImport {
 public:
  // Validates what arrived (counts, offsets inside the memory, magic numbers)
  // before trusting it. Where this process's driver refuses what the daemon
  // made (the memory's descriptor, or the ready words), the error is marked
  // so that UnusableInThisProcess(error) holds.
  static absl::StatusOr<std::unique_ptr<RingImport>> Import(Device& device, RingExport exported);

  uint64_t ring_id() const { return ring_id_; }
  uint64_t boot_id() const { return boot_id_; }
  const RingShape& shape() const { return shape_; }
  std::byte* slot(uint32_t s) const { return memory_->data() + slot_offsets_[s]; }
  // This process's event for slot s: recorded after the work that used the
  // slot, awaited by the release notifier (load_protocol.h).
  Event& free(uint32_t s) const { return *free_[s]; }
  // The daemon's ready words, when it sent them (else landed_seq).
  StreamWords* ready_words() const { return ready_words_.get(); }
  // The watchdog's move when the daemon is lost: every ready word jumps to
  // AbandonedWordValue, so that no wait of a stream on this ring is left for
  // a write that will never come. What the waits guarded is not
  // guaranteed after that: a committed wait (CommitStreamWait) whose word
  // the daemon had not yet written is kept for TakeUnfinishedWaits.
  // Thread-safe; only the first call moves the words.
  void AbandonReadyWords() const;
  // The same, but a committed wait whose copy the daemon never finished is
  // first offered to `finish(slot, generation, value)`: when it returns
  // true it has queued that copy itself and, behind it, the word's write
  // of `value` (the client's own copy from the master it maps), so the word
  // is not moved now and the wait is not unfinished.
  void AbandonReadyWords(
      absl::FunctionRef<bool(uint32_t slot, uint32_t generation, uint32_t value)> finish) const;
  // Called once a stream's wait on ready word `slot` reaching `generation`
  // is queued, before the caller is told it may use the slot: work queued
  // next reads it. False when the words were already abandoned: the wait
  // guards nothing, and the caller must fail instead of letting work read
  // the slot. Thread-safe.
  bool CommitStreamWait(uint32_t slot, uint32_t generation) const;
  // A committed wait that AbandonReadyWords released before the daemon's
  // copy wrote its word: the work queued behind it read a slot whose copy
  // may not have happened.
  struct UnfinishedWait {
    uint32_t slot = 0;
    uint32_t generation = 0;
  };
  // Those waits, each returned once. Thread-safe.
  std::vector<UnfinishedWait> TakeUnfinishedWaits() const;
  const DaemonControlBlock& control() const {
    return *static_cast<const DaemonControlBlock*>(daemon_control_map_.data());
  }
  ClientControlBlock& client_control() const {
    return *static_cast<ClientControlBlock*>(client_control_map_.data());
  }
  // This ring's trace buffer; its one writer is the ring's RingConsumer.
  TraceLog& trace() { return trace_; }
  // The device's doorbell, or null from a daemon that sent none.
  Doorbell* doorbell() const { return doorbell_.get(); }
  // Whether the daemon granted a request ring (the load fast path).
  bool has_request_ring() const { return has_request_ring_; }

 private:
  RingImport() = default;

  uint64_t ring_id_ = 0;
  uint64_t boot_id_ = 0;
  RingShape shape_;
  std::vector<uint64_t> slot_offsets_;
  std::unique_ptr<DeviceMemory> memory_;
  std::vector<std::unique_ptr<Event>> free_;
  std::unique_ptr<StreamWords> ready_words_;
  mutable std::atomic<bool> abandoned_{false};     // AbandonReadyWords ran
  // Orders CommitStreamWait against AbandonReadyWords: a wait is either
  // refused or judged by the abandon.
  mutable absl::Mutex waits_mu_;
  // Per slot, the newest generation a committed stream wait is for.
  mutable std::vector<std::optional<uint32_t>> committed_ ABSL_GUARDED_BY(waits_mu_);
  mutable std::vector<UnfinishedWait> unfinished_ ABSL_GUARDED_BY(waits_mu_);
  Mapping daemon_control_map_;                     // read-only
  Mapping client_control_map_;                     // read-write
  TraceLog trace_{nullptr, kClientTraceCapacity};  // in client_control_map_
  std::unique_ptr<Doorbell> doorbell_;
  bool has_request_ring_ = false;
};

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_PROTOCOL_RING_H_
