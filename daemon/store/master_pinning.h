// MasterPinning: whether each master region the store registers is pinned
// (registered with the device, so a load is one DMA from it) or staged (left
// pageable; the device workers copy it through their pools of pinned staging
// buffers, shared/copy/staged_copier.h). The one place that decides it, per
// region, by the daemon's `pinning` policy:
//   always  pinned, or the registration fails (over max_pinned_bytes, or the
//           device refused), with the reason;
//   auto    pinned while max_pinned_bytes and the device allow it, staged
//           otherwise; a device's refusal (a small RLIMIT_MEMLOCK, a mapping
//           the driver cannot register, a device that cannot register host
//           memory at all) is kept in the residency, so that the store
//           logs one line per model, not one per block;
//   never   staged.
// A region is one block's file (daemon/store/block_master.h).
#ifndef BLOCKSWAP_DAEMON_STORE_MASTER_PINNING_H_
#define BLOCKSWAP_DAEMON_STORE_MASTER_PINNING_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/budget/ledger.h"
#include "shared/backend/backend.h"

namespace blockswap::daemon {

enum class PinningPolicy { kAuto, kAlways, kNever };
absl::StatusOr<PinningPolicy> ParsePinningPolicy(absl::string_view name);
absl::string_view PinningPolicyName(PinningPolicy policy);

// How one master region is held. Move-only: its pinning is undone and its
// share of max_pinned_bytes returned when it is destroyed.
class MasterResidency {
 public:
  MasterResidency() = default;
  MasterResidency(MasterResidency&&) = default;
  MasterResidency& operator=(MasterResidency&&) = default;

  // False: copied through the staging buffers. A store without a pin device
  // (in-process tests) holds its masters neither pinned nor staged.
  bool pinned() const { return registration_ != nullptr; }
  bool staged() const { return staged_; }
  // Why the device refused to pin it under "auto" (it is staged); OK when it
  // is pinned, or staged by the policy or max_pinned_bytes.
  const absl::Status& refusal() const { return refusal_; }

 private:
  friend class MasterPinning;
  Charge pinned_bytes_;  // first: returned after the registration is undone
  std::unique_ptr<HostRegistration> registration_;
  bool staged_ = false;
  absl::Status refusal_;
};

// Thread-safe.
class MasterPinning {
 public:
  // `pin_device` (null: nothing is pinned or staged) must outlive every
  // residency. max_pinned_bytes 0: no limit but the device's.
  MasterPinning(PinningPolicy policy, uint64_t max_pinned_bytes, Device* pin_device);

  // Pins or stages [data, data + bytes), `what` naming it in errors ("block
  // 3f2a..."). Errors only under "always".
  absl::StatusOr<MasterResidency> PinOrStage(void* data, uint64_t bytes, absl::string_view what);

  PinningPolicy policy() const { return policy_; }
  // Bytes pinned now.
  uint64_t pinned_bytes() const { return pinned_.used(); }

 private:
  const PinningPolicy policy_;
  const uint64_t max_pinned_bytes_;
  Device* const pin_device_;
  Ledger pinned_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MASTER_PINNING_H_
