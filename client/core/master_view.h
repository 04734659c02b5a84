// MasterView: one of the daemon's block masters as this process maps it —
// read-only (the daemon's descriptor is read-only and the file 0400), and,
// for the trainer's own copies, pinned read-only once per process where the
// daemon pins it too (the same pages: no more memory is locked than the
// daemon's policy locks).
#ifndef BLOCKSWAP_CLIENT_CORE_MASTER_VIEW_H_
#define BLOCKSWAP_CLIENT_CORE_MASTER_VIEW_H_

#include <cstddef>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "shared/backend/backend.h"
#include "shared/os/shared_memory.h"

namespace blockswap::client {

// Thread-safe.
class MasterView {
 public:
  // `staged`: the daemon keeps this master pageable (ModelReply).
  MasterView(Mapping mapping, bool staged) : mapping_(std::move(mapping)), staged_(staged) {}
  MasterView(const MasterView&) = delete;
  MasterView& operator=(const MasterView&) = delete;

  const std::byte* data() const { return static_cast<const std::byte*>(mapping_.data()); }
  size_t size() const { return mapping_.size(); }
  bool staged() const { return staged_; }

  // Pins the mapping read-only through `device` (Device::RegisterReadOnlyHostMemory,
  // which pins it for every device of the process), the first time it is
  // asked: OK once pinned. A staged master is never pinned
  // (FAILED_PRECONDITION); a device's refusal is kept and returned again, so
  // that the caller stages instead and the driver is asked once.
  absl::Status PinOnce(Device& device) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Declared before registration_: unpinned before it is unmapped.
  const Mapping mapping_;
  const bool staged_;
  absl::Mutex mu_;
  std::optional<absl::Status> pinned_ ABSL_GUARDED_BY(mu_);  // set once asked
  std::unique_ptr<HostRegistration> registration_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_MASTER_VIEW_H_
