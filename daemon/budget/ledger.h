// Ledger: how much of one thing (bytes of memory, rings, sessions) one holder
// (the node, a uid, a process) holds, charged BEFORE the daemon reserves it.
//
// Reserve checks the limit and adds the amount in one step under the
// ledger's lock, so concurrent reservations can never together pass a limit
// that each alone would fit. What it returns is a Charge: a move-only handle
// that gives the amount back when it is destroyed, so whatever holds the
// thing (a ring, an upload, a session, a master) holds its charge too, and
// nothing is counted after it is gone or forgotten while it exists.
//
// Charges keep the ledger's counter alive (shared ownership), so a charge may
// outlive the Ledger object it came from (a model outliving its store).
#ifndef BLOCKSWAP_DAEMON_BUDGET_LEDGER_H_
#define BLOCKSWAP_DAEMON_BUDGET_LEDGER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace blockswap::daemon {

// The limit a reservation is checked against, named as in the config file.
struct Limit {
  absl::string_view key;  // "max_memory_bytes"
  uint64_t value = 0;     // 0: unlimited
};

class Charge;

// Thread-safe.
class Ledger {
 public:
  // `holder` and `unit` word the refusal: "uid 1000 would hold 3 rings (2
  // held + 1 asked), over max_rings_per_uid = 2".
  Ledger(std::string holder, std::string unit);

  // Adds `amount` if used() + amount stays within `limit`; RESOURCE_EXHAUSTED
  // naming the holder, the limit's key and value, what is held and what was
  // asked otherwise (and nothing is added).
  absl::StatusOr<Charge> Reserve(uint64_t amount, Limit limit);
  // Reserve's answer without reserving (advisory: another reservation may
  // come first).
  absl::Status Check(uint64_t amount, Limit limit) const;
  uint64_t used() const;
  const std::string& holder() const { return holder_; }

 private:
  friend class Charge;
  absl::Status Refusal(uint64_t held, uint64_t amount, Limit limit) const;
  struct Counter {
    absl::Mutex mu;
    uint64_t used ABSL_GUARDED_BY(mu) = 0;
  };
  std::shared_ptr<Counter> counter_;
  std::string holder_;
  std::string unit_;
};

// A reserved amount of one ledger; returned on destruction (or Release).
class Charge {
 public:
  Charge() = default;
  ~Charge() { Release(); }
  Charge(Charge&& other) noexcept;
  Charge& operator=(Charge&& other) noexcept;
  Charge(const Charge&) = delete;
  Charge& operator=(const Charge&) = delete;

  uint64_t amount() const { return amount_; }
  void Release();

 private:
  friend class Ledger;
  Charge(std::shared_ptr<Ledger::Counter> counter, uint64_t amount)
      : counter_(std::move(counter)), amount_(amount) {}
  std::shared_ptr<Ledger::Counter> counter_;
  uint64_t amount_ = 0;
};

// Charges taken together for one thing (a ring: its count and bytes for the
// process and the uid, and the node's memory) and returned together.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&&) = default;
  Reservation& operator=(Reservation&&) = default;

  void Add(Charge charge) { charges_.push_back(std::move(charge)); }
  void Add(Reservation other);
  void Release() { charges_.clear(); }
  bool empty() const { return charges_.empty(); }

 private:
  std::vector<Charge> charges_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_BUDGET_LEDGER_H_
