#include "daemon/budget/memory_budget.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {
namespace {

constexpr char kBudgetKey[] = "max_memory_bytes";
constexpr char kHolder[] = "blockswapd";
constexpr char kUnit[] = "bytes of memory";

}  // namespace

absl::string_view MemoryUseName(MemoryUse use) {
  switch (use) {
    case MemoryUse::kMasters:
      return "masters";
    case MemoryUse::kStaging:
      return "staging";
    case MemoryUse::kRings:
      return "rings";
    case MemoryUse::kCopyStaging:
      return "copy staging";
  }
  return "memory";
}

MemoryBudget::MemoryBudget(uint64_t max_memory_bytes, std::string totals_withheld)
    : limit_(max_memory_bytes),
      totals_withheld_(std::move(totals_withheld)),
      total_(kHolder, kUnit),
      by_use_{Ledger(kHolder, kUnit), Ledger(kHolder, kUnit), Ledger(kHolder, kUnit),
              Ledger(kHolder, kUnit)} {}

absl::StatusOr<Reservation> MemoryBudget::Reserve(MemoryUse use, uint64_t bytes,
                                                  absl::string_view what) {
  absl::StatusOr<Charge> total = total_.Reserve(bytes, {kBudgetKey, limit_});
  if (!total.ok()) return Refused(total.status(), bytes, what);
  Reservation reservation;
  reservation.Add(*std::move(total));
  // Only counted, for the breakdown: the limit is the total's.
  absl::StatusOr<Charge> counted = by_use_[static_cast<int>(use)].Reserve(bytes, {});
  if (counted.ok()) reservation.Add(*std::move(counted));
  return reservation;
}

absl::Status MemoryBudget::CheckFits(uint64_t bytes, absl::string_view what) const {
  absl::Status fits = total_.Check(bytes, {kBudgetKey, limit_});
  return fits.ok() ? fits : Refused(fits, bytes, what);
}

absl::Status MemoryBudget::Refused(const absl::Status& refusal, uint64_t bytes,
                                   absl::string_view what) const {
  if (!totals_withheld_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", bytes, " ", kUnit, " asked do not fit in what ", kBudgetKey,
                     " = ", limit_, " leaves (what ", kHolder, " holds is not shown under ",
                     totals_withheld_, ")"));
  }
  std::string held;
  for (MemoryUse use :
       {MemoryUse::kMasters, MemoryUse::kStaging, MemoryUse::kRings, MemoryUse::kCopyStaging}) {
    absl::StrAppend(&held, held.empty() ? "" : ", ", MemoryUseName(use), " ", used(use));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(what, ": ", refusal.message(), " (held: ", held, ")"));
}

}  // namespace blockswap::daemon
