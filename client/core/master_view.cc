#include "client/core/master_view.h"

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap::client {

absl::Status MasterView::PinOnce(Device& device) {
  absl::MutexLock lock(&mu_);
  if (pinned_.has_value()) return *pinned_;
  if (staged_) {
    pinned_ = absl::FailedPreconditionError(
        "blockswapd keeps this master pageable (staged), so this process does not pin it");
    return *pinned_;
  }
  absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
      device.RegisterReadOnlyHostMemory(mapping_.data(), mapping_.size());
  if (registration.ok()) {
    registration_ = *std::move(registration);
    pinned_ = absl::OkStatus();
  } else {
    pinned_ = Annotate(registration.status(),
                       absl::StrCat("pinning a ", mapping_.size(), "-byte master read-only"));
  }
  return *pinned_;
}

}  // namespace blockswap::client
