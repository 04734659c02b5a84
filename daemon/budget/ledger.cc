#include "daemon/budget/ledger.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace blockswap::daemon {

Ledger::Ledger(std::string holder, std::string unit)
    : counter_(std::make_shared<Counter>()), holder_(std::move(holder)), unit_(std::move(unit)) {}

absl::Status Ledger::Refusal(uint64_t held, uint64_t amount, Limit limit) const {
  if (limit.value == 0 || (amount <= limit.value && held <= limit.value - amount)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(holder_, " would hold ", held + amount, " ", unit_, " (", held, " held + ",
                   amount, " asked), over ", limit.key, " = ", limit.value));
}

absl::StatusOr<Charge> Ledger::Reserve(uint64_t amount, Limit limit) {
  absl::MutexLock lock(&counter_->mu);
  const uint64_t held = counter_->used;
  if (absl::Status refused = Refusal(held, amount, limit); !refused.ok()) return refused;
  counter_->used = held + amount;
  return Charge(counter_, amount);
}

absl::Status Ledger::Check(uint64_t amount, Limit limit) const {
  return Refusal(used(), amount, limit);
}

uint64_t Ledger::used() const {
  absl::MutexLock lock(&counter_->mu);
  return counter_->used;
}

Charge::Charge(Charge&& other) noexcept
    : counter_(std::move(other.counter_)), amount_(std::exchange(other.amount_, 0)) {}

Charge& Charge::operator=(Charge&& other) noexcept {
  if (this != &other) {
    Release();
    counter_ = std::move(other.counter_);
    amount_ = std::exchange(other.amount_, 0);
  }
  return *this;
}

void Charge::Release() {
  if (counter_ == nullptr) return;
  {
    absl::MutexLock lock(&counter_->mu);
    counter_->used -= amount_;
  }
  counter_.reset();
  amount_ = 0;
}

void Reservation::Add(Reservation other) {
  for (Charge& charge : other.charges_) charges_.push_back(std::move(charge));
  other.charges_.clear();
}

}  // namespace blockswap::daemon
