// The host backend's check of CUDA's IPC lifetime rules (docs/backends.md,
// "Lifetime checks"), whose breach is undefined behaviour on a GPU and would
// otherwise pass unseen on the host, where a memfd stays valid for as long as
// anybody maps it:
//   - exported memory is freed while an importer still maps it (a mapping
//     whose exporter freed it under the importer reads poison:
//     host_backend.cc). Stricter than CUDA's VMM, where the memory lives on
//     with its last mapping: the product's order (the client unmaps before
//     the daemon frees) keeps to both, and the host backend checks it.
// A breach by whoever freed too early: reported here
// (ReportLifetimeViolation).
//
// Who holds what lives beside the object, in its own shared memory: an
// ImportLedger, written with atomics only (no locks in shared memory:
// docs/rules.md). Each import claims one entry with its process's identity (pid
// and start time, so a reused pid is not mistaken for the importer) and clears
// it when closed; an importer that died without closing is found dead through
// /proc. The host backend assumes one pid namespace for exporter and importers
// (it is the test backend; its daemon and clients share one).
#ifndef BLOCKSWAP_SHARED_BACKEND_HOST_LIFETIME_H_
#define BLOCKSWAP_SHARED_BACKEND_HOST_LIFETIME_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace blockswap::host_lifetime {

// Live imports one exported object can have at once; the load protocol
// needs one (the ring's client).
inline constexpr int kMaxImports = 8;

struct ImportLedger {
  // The exporter's pid (for messages).
  std::atomic<uint32_t> exporter_pid;
  // 1 once the exporter freed or destroyed the object.
  std::atomic<uint32_t> freed;
  // 0: free; otherwise the importing process (ProcessKey).
  std::atomic<uint64_t> imports[kMaxImports];
};

// This process as an import entry: pid in the low 32 bits, the low 32 bits
// of its start time (clock ticks since boot) in the high ones.
uint64_t ProcessKey();

// Whether the process named by `key` (a ProcessKey) still runs: not exited,
// not a zombie, and its pid not reused by a later process.
bool Alive(uint64_t key);

// The exporter's side, when it creates the object.
void InitializeLedger(ImportLedger& ledger);

// One import's entry in a ledger, cleared on destruction (the import is
// closed). Move-only. The ledger's memory must outlive it.
class ImportClaim {
 public:
  // RESOURCE_EXHAUSTED when kMaxImports imports are live already.
  static absl::StatusOr<ImportClaim> Claim(ImportLedger& ledger, const char* what);
  ImportClaim() = default;
  ImportClaim(ImportClaim&& other) noexcept;
  ImportClaim& operator=(ImportClaim&& other) noexcept;
  ImportClaim(const ImportClaim&) = delete;
  ImportClaim& operator=(const ImportClaim&) = delete;
  ~ImportClaim();
  // False for a default-constructed (or moved-from) claim.
  bool held() const { return ledger_ != nullptr; }

 private:
  ImportClaim(ImportLedger* ledger, int entry) : ledger_(ledger), entry_(entry) {}
  void Clear();
  ImportLedger* ledger_ = nullptr;
  int entry_ = -1;
};

// The exporter's side, when it frees the object: marks it freed and returns
// the live importers ("pid 12, pid 34"; empty when none), so that the caller
// reports the breach. Dead importers' entries are not counted: a process's
// imports end with it.
std::string MarkFreed(ImportLedger& ledger);

// Whether the exporter has freed the object.
bool Freed(const ImportLedger& ledger);

// Reports a breach of the rules above: one line on stderr, counted; and, in
// a build with test hooks (shared/base/test_hooks.h), with
// BLOCKSWAP_HOST_LIFETIME_CHECKS=abort (what the test suite sets) the
// process aborts after the line, so that no test can pass over it. The
// default reports only: a client that breaks a rule must not bring a
// production daemon down (docs/rules.md, "The daemon never exits because of a
// client").
void ReportLifetimeViolation(const absl::Status& violation);
// Breaches reported by this process so far.
uint64_t LifetimeViolationCount();

}  // namespace blockswap::host_lifetime

#endif  // BLOCKSWAP_SHARED_BACKEND_HOST_LIFETIME_H_
