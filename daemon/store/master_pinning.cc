#include "daemon/store/master_pinning.h"

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

absl::StatusOr<PinningPolicy> ParsePinningPolicy(absl::string_view name) {
  if (name == "auto") return PinningPolicy::kAuto;
  if (name == "always") return PinningPolicy::kAlways;
  if (name == "never") return PinningPolicy::kNever;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown pinning policy '", name, "' (expected auto, always or never)"));
}

absl::string_view PinningPolicyName(PinningPolicy policy) {
  switch (policy) {
    case PinningPolicy::kAuto:
      return "auto";
    case PinningPolicy::kAlways:
      return "always";
    case PinningPolicy::kNever:
      return "never";
  }
  return "auto";
}

MasterPinning::MasterPinning(PinningPolicy policy, uint64_t max_pinned_bytes, Device* pin_device)
    : policy_(policy),
      max_pinned_bytes_(max_pinned_bytes),
      pin_device_(pin_device),
      pinned_("the daemon", "bytes of pinned masters") {}

absl::StatusOr<MasterResidency> MasterPinning::PinOrStage(void* data, uint64_t bytes,
                                                          absl::string_view what) {
  MasterResidency residency;
  if (pin_device_ == nullptr) return residency;
  residency.staged_ = true;
  if (policy_ == PinningPolicy::kNever) return residency;
  absl::StatusOr<Charge> charge =
      pinned_.Reserve(bytes, Limit{"max_pinned_bytes", max_pinned_bytes_});
  if (!charge.ok()) {
    if (policy_ == PinningPolicy::kAlways) {
      return Annotate(charge.status(), absl::StrCat("pinning ", what, " (pinning = \"always\")"));
    }
    return residency;  // over the pin budget: staged, as "auto" means
  }
  absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
      pin_device_->RegisterHostMemory(data, bytes);
  if (!registration.ok()) {
    if (policy_ == PinningPolicy::kAlways) {
      return Annotate(registration.status(),
                      absl::StrCat("pinning the ", bytes, " bytes of ", what, " on ",
                                   pin_device_->info().uuid, " (pinning = \"always\")"));
    }
    residency.refusal_ = Annotate(
        registration.status(),
        absl::StrCat(pin_device_->info().uuid, " could not pin the ", bytes, " bytes of ", what));
    return residency;
  }
  residency.pinned_bytes_ = *std::move(charge);
  residency.registration_ = *std::move(registration);
  residency.staged_ = false;
  return residency;
}

}  // namespace blockswap::daemon
