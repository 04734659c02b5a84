#include "client/core/owner_process.h"

#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace blockswap::client {
namespace {

// The first process of this library's image that attached (0: none yet);
// fork() copies it into the children.
std::atomic<pid_t> first_attached_pid{0};

absl::Status ForkedFrom(absl::string_view what, pid_t self, pid_t attached) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": this process (pid ", self, ") was forked from pid ", attached,
      " after that process attached to blockswapd; the session, its gRPC channel and its "
      "mappings of rings and masters belong to pid ",
      attached,
      " and cannot be used here, nor can gRPC attach again after fork(). Destroying inherited "
      "handles here only forgets them. A process that streams must attach itself without "
      "being forked from an attached one: start it with exec, or as a 'spawn' or 'forkserver' "
      "worker"));
}

}  // namespace

OwnerProcess::OwnerProcess() : pid_(::getpid()) {}

bool OwnerProcess::forked() const { return ::getpid() != pid_; }

absl::Status OwnerProcess::Check(absl::string_view what) const {
  const pid_t self = ::getpid();
  if (self == pid_) return absl::OkStatus();
  return ForkedFrom(what, self, pid_);
}

void OwnerProcess::NoteAttached() {
  pid_t none = 0;
  first_attached_pid.compare_exchange_strong(none, ::getpid(), std::memory_order_relaxed);
}

void OwnerProcess::KeepInherited(const void* object) {
  if (object == nullptr) return;
  ABSL_CONST_INIT static absl::Mutex mu(absl::kConstInit);
  static auto* kept = new std::vector<const void*>();  // never freed: held to the end
  absl::MutexLock lock(&mu);
  kept->push_back(object);
}

absl::Status OwnerProcess::CheckAttachAllowed() {
  const pid_t attached = first_attached_pid.load(std::memory_order_relaxed);
  const pid_t self = ::getpid();
  if (attached == 0 || attached == self) return absl::OkStatus();
  return ForkedFrom("bs_connect", self, attached);
}

}  // namespace blockswap::client
