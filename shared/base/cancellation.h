// Cancellation: whether the caller of long work still wants it.
//
// Long work (parsing a safetensors header, reading a model file, hashing
// masters) asks between its steps and stops with the reason once its client
// has left, its deadline has passed or the daemon is stopping, so that no
// thread stays busy for a caller nobody will answer. The default one is never
// cancelled.
//
// Part of blockswap_base (no gRPC): the daemon wraps a call's context in one
// (daemon/server/work_queue.h); the parser and the store only ask it.
// Copyable. Check is as thread-safe as the function it wraps (the daemon's
// read an atomic and gRPC's thread-safe IsCancelled); that function must be
// quick and must not block, since work asks it under its own locks.
#ifndef BLOCKSWAP_SHARED_BASE_CANCELLATION_H_
#define BLOCKSWAP_SHARED_BASE_CANCELLATION_H_

#include <functional>
#include <utility>

#include "absl/status/status.h"

namespace blockswap {

class Cancellation {
 public:
  Cancellation() = default;
  // `check` returns OK while the work is wanted, else why not.
  explicit Cancellation(std::function<absl::Status()> check) : check_(std::move(check)) {}

  // OK while the work is wanted; otherwise the reason, e.g. CANCELLED (the
  // client left), DEADLINE_EXCEEDED or UNAVAILABLE (the daemon is stopping).
  absl::Status Check() const { return check_ ? check_() : absl::OkStatus(); }

 private:
  std::function<absl::Status()> check_;
};

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_CANCELLATION_H_
