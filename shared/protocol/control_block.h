// The per-ring control block shared by the daemon and one client
// (docs/protocol.md, "The control block").
//
// Two parts, each in its own shared-memory object and each written by ONE
// side only; the other side maps it read-only:
//   DaemonControlBlock  filled_seq and landed_seq per slot, the status word
//                       and the copy times (daemon)
//   ClientControlBlock  consumed_seq per slot (client), the request ring of
//                       the shared-memory load fast path (request_queue.h),
//                       and the releases (releasable_seq)
// No locks live here (a process that died holding one would block everybody);
// waiters sleep on the 32-bit sequence words with shared futexes (futex.h).
#ifndef BLOCKSWAP_SHARED_PROTOCOL_CONTROL_BLOCK_H_
#define BLOCKSWAP_SHARED_PROTOCOL_CONTROL_BLOCK_H_

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace blockswap {

inline constexpr uint32_t kDaemonControlMagic = 0x42534443;  // "BSDC"
inline constexpr uint32_t kClientControlMagic = 0x42534343;  // "BSCC"
inline constexpr uint32_t kControlBlockVersion = 3;
inline constexpr uint32_t kMaxRingSlots = 64;
inline constexpr size_t kControlBlockBytes = 4096;
// Entries of a ring's request ring: at least kMaxRingSlots, so a client with
// at most one outstanding request per slot never fills it.
inline constexpr uint32_t kRequestRingCapacity = 64;
// Bytes of the daemon's error message in the control block, NUL included.
inline constexpr size_t kErrorMessageBytes = 1024;

// The ring's health as the daemon sees it. The client checks it on every
// wait so that a rejected request, a device error or a dead daemon surface as
// an error instead of a hang.
struct RingStatusWord {
  // absl::StatusCode of the error that failed this ring; 0 while healthy.
  // Once set it never goes back to 0: the client re-creates the ring.
  std::atomic<uint32_t> error_code;
  // The slot whose request failed, or UINT32_MAX for a ring-wide error.
  std::atomic<uint32_t> error_slot;
  // Random per daemon start; a different value than Attach announced means
  // this ring belongs to a daemon that is gone.
  std::atomic<uint64_t> boot_id;
  // CLOCK_MONOTONIC milliseconds (comparable across processes of one host)
  // of the daemon's last sign of life for this ring.
  std::atomic<uint64_t> heartbeat_ms;
};

struct DaemonControlBlock {
  uint32_t magic;    // kDaemonControlMagic
  uint32_t version;  // kControlBlockVersion
  uint32_t slot_count;
  uint32_t reserved;
  RingStatusWord status;
  // Generation g of slot s is filled (its copy is ISSUED, the ready word's
  // write queued after it) once filled_seq[s] == g. Also the futex word waiters sleep on.
  alignas(64) std::atomic<uint32_t> filled_seq[kMaxRingSlots];
  // Generation g of slot s has landed once landed_seq[s] reaches g
  // (WordReached): the daemon's own query of its copy stream found the copy
  // complete. Where the device has no stream words, the client's wait before
  // using the slot (it cannot wait on the device for another process's
  // signal); published for every ring. Also a futex word.
  alignas(64) std::atomic<uint32_t> landed_seq[kMaxRingSlots];
  // How many request-ring entries the daemon has taken (request_queue.h).
  alignas(64) std::atomic<uint32_t> request_head;
  // Why the ring failed, NUL-terminated: written once, BEFORE error_code is
  // published (release), so a client that saw error_code != 0 (acquire) may
  // read it. Whichever transport carried the failing request.
  alignas(64) char error_message[kErrorMessageBytes];
  // How many of the ring's copies the daemon has seen complete (it queries its own event
  // behind each batch of copies), and the copy stream's time they took, in
  // nanoseconds: a batch's busy time (from its issue, or the previous
  // batch's completion, to its completion) shared among its copies by
  // bytes. Both only grow; copy_ns is stored before copies_done (release).
  alignas(64) std::atomic<uint64_t> copies_done;
  std::atomic<uint64_t> copy_ns;
};

// One load request on the fast path: what a LoadRequest says, with the
// model named by its per-session handle (ModelReply.model_handle). Atomic
// fields (relaxed) because the daemon reads while a client may write; the
// daemon copies an entry once before validating it.
struct RequestEntry {
  std::atomic<uint32_t> slot;
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> model_handle;
  std::atomic<uint32_t> block;
};

struct ClientControlBlock {
  uint32_t magic;    // kClientControlMagic
  uint32_t version;  // kControlBlockVersion
  uint32_t slot_count;
  uint32_t reserved;
  // The client is done with generation consumed_seq[s] of slot s: free[s] was
  // recorded after its last use. Published before requesting generation g+1.
  alignas(64) std::atomic<uint32_t> consumed_seq[kMaxRingSlots];
  // The request ring (request_queue.h), unused without one.
  // Entries published so far (wraps); entry i lives at i % capacity.
  alignas(64) std::atomic<uint32_t> request_tail;
  alignas(64) RequestEntry requests[kRequestRingCapacity];
  // --- releases (docs/protocol.md, "Release"). Written by the client's
  // notifier (a host function on a side stream that waited on the client's
  // own free[s] event) once the work that used the slot has completed:
  // generation releasable_seq[s] may be copied into slot s, and
  // released_ns[s] is when the notifier ran (CLOCK_MONOTONIC; for the
  // trace). Starts at 1 (the daemon writes it before the client has the
  // ring): a slot never used is free. The daemon's one signal that a slot is free:
  // it trusts the word for this client's ring only (a client that lies
  // corrupts only its own slots), and a value ahead of the requested
  // generation is the ring's protocol error.
  alignas(64) std::atomic<uint32_t> releasable_seq[kMaxRingSlots];
  alignas(64) std::atomic<uint64_t> released_ns[kMaxRingSlots];
};

static_assert(sizeof(DaemonControlBlock) <= kControlBlockBytes);
static_assert(sizeof(ClientControlBlock) <= kControlBlockBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// CLOCK_MONOTONIC in milliseconds: one clock for every process of the host,
// so a heartbeat written by the daemon can be aged by a client.
inline uint64_t MonotonicMillis() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_PROTOCOL_CONTROL_BLOCK_H_
