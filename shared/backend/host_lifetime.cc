#include "shared/backend/host_lifetime.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "shared/base/env_settings.h"
#include "shared/base/test_hooks.h"
#include "shared/base/unique_fd.h"

namespace blockswap::host_lifetime {
namespace {

std::atomic<uint64_t> violations{0};

struct ProcessState {
  char state = '?';
  uint64_t start_ticks = 0;
};

// /proc/<pid>/stat's state and start time; nullopt when the process is gone.
// Plain read(2): a process that exits mid-read makes it fail with ESRCH,
// which an ifstream would throw as an exception.
std::optional<ProcessState> ReadProcessState(uint32_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.valid()) return std::nullopt;
  char buffer[1024];
  const ssize_t got = ::read(file.get(), buffer, sizeof(buffer) - 1);
  if (got <= 0) return std::nullopt;
  const absl::string_view text(buffer, static_cast<size_t>(got));
  // The command name (field 2) is in parentheses and may hold anything.
  const size_t name_end = text.rfind(')');
  if (name_end == absl::string_view::npos) return std::nullopt;
  std::vector<absl::string_view> fields =
      absl::StrSplit(text.substr(name_end + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state); field 22 (starttime) is fields[19].
  if (fields.size() < 20 || fields[0].empty()) return std::nullopt;
  ProcessState state;
  state.state = fields[0][0];
  if (!absl::SimpleAtoi(fields[19], &state.start_ticks)) return std::nullopt;
  return state;
}

uint64_t KeyOf(uint32_t pid, uint64_t start_ticks) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(start_ticks)) << 32) | pid;
}

}  // namespace

bool Alive(uint64_t key) {
  const auto pid = static_cast<uint32_t>(key);
  std::optional<ProcessState> state = ReadProcessState(pid);
  if (!state.has_value() || state->state == 'Z' || state->state == 'X') return false;
  return KeyOf(pid, state->start_ticks) == key;
}

uint64_t ProcessKey() {
  const auto pid = static_cast<uint32_t>(::getpid());
  std::optional<ProcessState> state = ReadProcessState(pid);
  return KeyOf(pid, state.has_value() ? state->start_ticks : 0);
}

void InitializeLedger(ImportLedger& ledger) {
  ledger.exporter_pid.store(static_cast<uint32_t>(::getpid()), std::memory_order_relaxed);
  ledger.freed.store(0, std::memory_order_relaxed);
  for (auto& entry : ledger.imports) entry.store(0, std::memory_order_relaxed);
}

absl::StatusOr<ImportClaim> ImportClaim::Claim(ImportLedger& ledger, const char* what) {
  const uint64_t key = ProcessKey();
  for (int i = 0; i < kMaxImports; ++i) {
    uint64_t expected = 0;
    if (ledger.imports[i].compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
      return ImportClaim(&ledger, i);
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("host backend: ", what, " already has ", kMaxImports, " live imports"));
}

ImportClaim::ImportClaim(ImportClaim&& other) noexcept
    : ledger_(std::exchange(other.ledger_, nullptr)), entry_(std::exchange(other.entry_, -1)) {}

ImportClaim& ImportClaim::operator=(ImportClaim&& other) noexcept {
  if (this != &other) {
    Clear();
    ledger_ = std::exchange(other.ledger_, nullptr);
    entry_ = std::exchange(other.entry_, -1);
  }
  return *this;
}

ImportClaim::~ImportClaim() { Clear(); }

void ImportClaim::Clear() {
  if (ledger_ != nullptr) ledger_->imports[entry_].store(0, std::memory_order_release);
  ledger_ = nullptr;
  entry_ = -1;
}

std::string MarkFreed(ImportLedger& ledger) {
  ledger.freed.store(1, std::memory_order_release);
  std::string holders;
  for (const auto& entry : ledger.imports) {
    const uint64_t key = entry.load(std::memory_order_acquire);
    if (key != 0 && Alive(key)) {
      absl::StrAppend(&holders, holders.empty() ? "" : ", ", "pid ", static_cast<uint32_t>(key));
    }
  }
  return holders;
}

bool Freed(const ImportLedger& ledger) { return ledger.freed.load(std::memory_order_acquire) != 0; }

void ReportLifetimeViolation(const absl::Status& violation) {
  violations.fetch_add(1, std::memory_order_relaxed);
#if BLOCKSWAP_TEST_HOOKS
  const bool abort = EnvValue(EnvSetting::kHostLifetimeChecks) == "abort";
#else
  const bool abort = false;
#endif
  std::fprintf(stderr, "blockswap host backend (pid %d): CUDA lifetime rule broken: %s%s\n",
               static_cast<int>(::getpid()), std::string(violation.message()).c_str(),
               abort ? " (aborting, as the test suite asks)" : "");
  std::fflush(stderr);
  if (abort) std::abort();
}

uint64_t LifetimeViolationCount() { return violations.load(std::memory_order_relaxed); }

}  // namespace blockswap::host_lifetime
