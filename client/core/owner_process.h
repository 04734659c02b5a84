// OwnerProcess: which process attached a session, so that a child forked
// after the attach (a DataLoader worker) can be told, and can let go of what
// it inherited without disturbing the parent.
//
// A forked child holds copies of the parent's handles but not what they
// stand for: the session is the parent's (the daemon watches the parent's
// pid), the gRPC channel's threads stayed in the parent, and the ring slots
// and masters are shared mappings the parent streams through. So in a child
// every call on an inherited handle fails FAILED_PRECONDITION, and
// destroying one runs none of its destructors (no RPC, no shutdown of the
// shared sockets, no join of threads the child does not have, no write to
// shared memory): the child's copy of the parent's pages goes when it exits
// or execs.
//
// Checked with getpid() on every use rather than a pthread_atfork handler:
// it also sees a child made by a raw clone() (no atfork handlers run), and
// it registers nothing process-wide from a library that may be dlopen'ed and
// unloaded (Python's ctypes), where a handler left behind would point at
// unmapped code. One getpid() is a syscall of well under a microsecond,
// against the microseconds of any call it guards.
//
// A child cannot attach a session of its own either: gRPC does not survive
// fork() (a channel made in the child reuses the parent's inherited
// connection, so the daemon would see the parent's pid, and its calls hang).
// So once a process attached, bs_connect fails in its forked descendants
// (CheckAttachAllowed); a worker that streams is started with exec, or as a
// 'spawn' or 'forkserver' worker.
//
// Immutable after construction: any thread may call.
#ifndef BLOCKSWAP_CLIENT_CORE_OWNER_PROCESS_H_
#define BLOCKSWAP_CLIENT_CORE_OWNER_PROCESS_H_

#include <sys/types.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blockswap::client {

class OwnerProcess {
 public:
  // The calling process owns what is attached now.
  OwnerProcess();

  pid_t pid() const { return pid_; }
  // True in a process forked from the owner (or from one of its children).
  bool forked() const;
  // OK in the owner; in a forked child FAILED_PRECONDITION naming `what`
  // (e.g. "bs_ring_load"), both pids and what to do instead.
  absl::Status Check(absl::string_view what) const;

  // The calling process attached a session: its forked children may not.
  static void NoteAttached();
  // In a forked child: keeps an inherited object that must not be destroyed
  // reachable until the process ends, so that it is neither destroyed nor
  // reported lost by a leak checker (LeakSanitizer in configuration B).
  static void KeepInherited(const void* object);
  // FAILED_PRECONDITION in a process forked (at any depth) from one that
  // attached; OK otherwise.
  static absl::Status CheckAttachAllowed();

 private:
  pid_t pid_;
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_OWNER_PROCESS_H_
