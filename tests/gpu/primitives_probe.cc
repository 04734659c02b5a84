// blockswap-primitives-probe: the first thing the GPU check runs on a node
// (docs/gpu.md). In at most a minute it says, one line each, whether the
// node has what the design relies on: the environment, the kernel features
// the daemon uses, then the CUDA primitives between two processes
// (cuda_primitives.h). It links only the driver table and shared/os, so it
// runs where the daemon's own libraries (gRPC, protobuf) might not load.
//
//   blockswap-primitives-probe [--client-user=NAME] [--shm-needed-mib=N]
//
// --client-user: the user process B runs as when the probe runs as root
// (default nobody; empty: the probe's own user). --shm-needed-mib: the free
// space on /dev/shm the check needs (default 1024). Exits 1 when a line
// FAILed, 124 past its 60 s limit.
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"
#include "shared/os/futex.h"
#include "shared/os/shared_memory.h"
#include "tests/gpu/cuda_primitives.h"
#include "tests/gpu/probe_report.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5; older headers lack the name
#endif

namespace blockswap::probe {
namespace {

constexpr unsigned kProbeLimitSeconds = 60;

// The names of the errors these checks can meet (strerrorname_np would need
// glibc 2.32, which a node's older C library may lack).
std::string ErrnoName(int error) {
  switch (error) {
    case ENOSYS:
      return "ENOSYS";
    case EPERM:
      return "EPERM";
    case EACCES:
      return "EACCES";
    case EINVAL:
      return "EINVAL";
    case ENOPROTOOPT:
      return "ENOPROTOOPT";
    case ESRCH:
      return "ESRCH";
    case ENOMEM:
      return "ENOMEM";
    case EBUSY:
      return "EBUSY";
    default:
      return absl::StrCat("errno ", error);
  }
}
std::string Errno(absl::string_view call, int error) {
  return absl::StrCat(call, ": ", ErrnoName(error), " (", std::strerror(error), ")");
}

std::string ReadFirstLine(const char* path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// --- environment -----------------------------------------------------------

// The kernel as this process sees it, and the sandbox it is in, from what
// each leaves visible: gVisor reports a fixed Linux 4.4.0 whose /proc/version
// is its own constant string; a VM (Firecracker, ...) sets the CPU's
// hypervisor flag; a container runtime leaves /.dockerenv or
// /run/.containerenv. None seen says only that: no proof of bare metal.
void Kernel(Report& report) {
  utsname name{};
  ::uname(&name);
  const std::string version = ReadFirstLine("/proc/version");
  std::string sandbox;
  if (absl::StartsWith(name.release, "4.4.0") &&
      absl::StrContains(version, "#1 SMP Sun Jan 10 15:06:54 PST 2016")) {
    sandbox = "gVisor (its fixed kernel 4.4.0 and /proc/version)";
  } else {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
      if (absl::StartsWith(line, "flags") && absl::StrContains(line, " hypervisor")) {
        sandbox = "a virtual machine (the CPU's hypervisor flag)";
        break;
      }
    }
  }
  std::string container;
  if (::access("/.dockerenv", F_OK) == 0) container = "; a container (/.dockerenv)";
  if (::access("/run/.containerenv", F_OK) == 0) container = "; a container (/run/.containerenv)";
  report.Pass("env.kernel", absl::StrCat(name.release, " ", name.machine,
                                         "; sandbox: ", sandbox.empty() ? "none seen" : sandbox,
                                         container, "; /proc/version: ", version));
}

// /dev/shm holds the masters.
void DevShm(Report& report, uint64_t needed_mib) {
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) != 0) {
    report.Fail("env.dev-shm", Errno("statvfs(/dev/shm)", errno));
    return;
  }
  const uint64_t size_mib = fs.f_blocks * fs.f_frsize >> 20;
  const uint64_t free_mib = fs.f_bavail * fs.f_frsize >> 20;
  const std::string detail = absl::StrCat(size_mib, " MiB, ", free_mib,
                                          " MiB free; the check needs ", needed_mib, " MiB free");
  if (free_mib < needed_mib) {
    report.Fail("env.dev-shm", absl::StrCat(detail, " (docker: --shm-size; or a larger tmpfs)"));
  } else {
    report.Pass("env.dev-shm", detail);
  }
}

// The user process B (a trainer) runs as: another user only when the probe
// is root and the user exists.
std::optional<PeerUser> ClientUser(Report& report, const std::string& name) {
  if (name.empty()) {
    report.Skip("env.client-user",
                absl::StrCat("none asked for: B runs as uid ", ::getuid(), ", A's own user"));
    return std::nullopt;
  }
  const passwd* entry = ::getpwnam(name.c_str());
  if (entry == nullptr) {
    report.Skip("env.client-user", absl::StrCat("no user '", name, "' on this node: B runs as uid ",
                                                ::getuid(), ", A's own user"));
    return std::nullopt;
  }
  if (::geteuid() != 0) {
    report.Skip("env.client-user",
                absl::StrCat("not root (uid ", ::geteuid(), "): B cannot become '", name,
                             "' and runs as A's own user"));
    return std::nullopt;
  }
  report.Pass("env.client-user",
              absl::StrCat("B runs as '", name, "' (uid ", entry->pw_uid, ", gid ", entry->pw_gid,
                           "), A and A2 as root in root's group, as the system unit runs the "
                           "daemon"));
  return PeerUser{entry->pw_uid, entry->pw_gid};
}

// The optional tools: the LibTorch build needs cmake and ninja; nvcc only
// building the GPU tests' kernels, which is done before packing, not here.
void Tools(Report& report) {
  const char* path = std::getenv("PATH");
  for (const auto& [tool, needed_for] :
       {std::pair<const char*, const char*>{"cmake", "the LibTorch layer's build (call 2)"},
        {"ninja", "the LibTorch layer's build (call 2)"},
        {"nvcc", "nothing in the check (its kernels are built before packing); information"}}) {
    std::string found;
    for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':')) {
      std::string candidate = absl::StrCat(dir, "/", tool);
      if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) {
        found = candidate;
        break;
      }
    }
    if (found.empty() && std::string(tool) == "nvcc" &&
        ::access("/usr/local/cuda/bin/nvcc", X_OK) == 0) {
      found = "/usr/local/cuda/bin/nvcc";
    }
    const std::string name = absl::StrCat("env.tool.", tool);
    if (found.empty()) {
      report.Skip(name, absl::StrCat("not found on PATH; needed for ", needed_for));
    } else {
      report.Pass(name, found);
    }
  }
}

// --- OS features the daemon uses --------------------------------------------

// A session ends when its process does, watched through a pidfd.
void PidfdOpen(Report& report) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::usleep(50 * 1000);
    ::_exit(0);
  }
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, child, 0));
  const int error = errno;
  if (pidfd < 0) {
    ::waitpid(child, nullptr, 0);
    report.Fail("os.pidfd_open", Errno("pidfd_open", error));
    return;
  }
  UniqueFd owned(pidfd);
  pollfd pfd{pidfd, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, 3000);
  ::waitpid(child, nullptr, 0);
  if (ready != 1) {
    report.Fail("os.pidfd_open",
                "a pidfd did not become readable within 3 s of its process's exit");
    return;
  }
  report.Pass("os.pidfd_open",
              "a child's pidfd became readable when it exited (how the daemon "
              "sees a session's process end)");
}

void PeerCredentials(Report& report) {
  int sockets[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    report.Fail("os.so_peercred", Errno("socketpair", errno));
    return;
  }
  UniqueFd first(sockets[0]), second(sockets[1]);
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(first.get(), SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    report.Fail("os.so_peercred", Errno("getsockopt(SO_PEERCRED)", errno));
  } else if (credentials.pid != ::getpid() || credentials.uid != ::getuid()) {
    report.Fail("os.so_peercred", absl::StrCat("the peer reads as pid ", credentials.pid, " uid ",
                                               credentials.uid, ", not pid ", ::getpid(), " uid ",
                                               ::getuid(), " (a pid namespace in between?)"));
  } else {
    report.Pass("os.so_peercred", "a unix socket's peer pid and uid");
  }
  int pidfd = -1;
  length = sizeof(pidfd);
  if (::getsockopt(first.get(), SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) == 0) {
    ::close(pidfd);
    report.Pass("os.so_peerpidfd", "a unix socket's peer as a pidfd");
  } else if (errno == ENOPROTOOPT) {
    report.Skip("os.so_peerpidfd",
                "the kernel lacks it (ENOPROTOOPT; Linux before 6.5): the daemon falls back to "
                "pidfd_open of the SO_PEERCRED pid (os.pidfd_open)");
  } else {
    report.Fail("os.so_peerpidfd", Errno("getsockopt(SO_PEERPIDFD)", errno));
  }
}

// One page of a memfd, mapped read-write.
struct Page {
  SharedMemory memory;
  Mapping mapping;
};
absl::StatusOr<Page> MapPage(absl::string_view name) {
  Page page;
  BLOCKSWAP_ASSIGN_OR_RETURN(page.memory, SharedMemory::Create(name, 4096));
  BLOCKSWAP_ASSIGN_OR_RETURN(page.mapping, page.memory.Map(Access::kReadWrite));
  return page;
}

// The daemon's control words are handed out read-only and sealed.
void MemfdSeal(Report& report) {
  auto page = MapPage("blockswap-probe-seal");
  if (!page.ok()) {
    report.Fail("os.memfd-seal", page.status().message());
    return;
  }
  SharedMemory& memory = page->memory;
  if (absl::Status sealed = memory.SealAgainstNewWriters(); !sealed.ok()) {
    report.Fail("os.memfd-seal", sealed.message());
    return;
  }
  void* writable = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, memory.fd().get(), 0);
  const int refused = errno;
  if (writable != MAP_FAILED) {
    ::munmap(writable, 4096);
    report.Fail("os.memfd-seal",
                "a new writable mapping of a memfd sealed with "
                "F_SEAL_FUTURE_WRITE succeeded: the seal does not hold");
    return;
  }
  static_cast<std::atomic<uint32_t>*>(page->mapping.data())
      ->store(1);  // the creator's still writes
  report.Pass("os.memfd-seal",
              absl::StrCat("memfd_create, F_SEAL_FUTURE_WRITE: a new writable "
                           "mapping fails (",
                           ErrnoName(refused), "), the creator's mapping still writes"));
}

// Waiters and wakers are different processes: the futex must be shared
// (no FUTEX_PRIVATE_FLAG) and reach across them.
void SharedFutex(Report& report) {
  auto page = MapPage("blockswap-probe-futex");
  if (!page.ok()) {
    report.Fail("os.shared-futex", page.status().message());
    return;
  }
  auto* words = static_cast<std::atomic<uint32_t>*>(page->mapping.data());
  const pid_t child = ::fork();
  if (child == 0) {
    words[1].store(1);
    // The word stays 0: only a wake from the other process ends this wait.
    FutexWaitResult result = FutexWait(&words[0], 0, absl::Seconds(3));
    ::_exit(result == FutexWaitResult::kWoken ? 0 : 2);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  while (words[1].load() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(50));  // the child is asleep in its wait by now
  FutexWakeAll(&words[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    report.Pass("os.shared-futex",
                "a FUTEX_WAKE in one process woke a FUTEX_WAIT in another "
                "on a shared memfd word");
  } else {
    report.Fail("os.shared-futex",
                "a wake on a shared memfd word did not reach the waiting "
                "process within 3 s (it timed out)");
  }
}

void OverTheLimit(int) {
  static const char kLine[] = "FAIL probe: over its 60 s limit, stopped\n";
  (void)!::write(1, kLine, sizeof(kLine) - 1);
  ::_exit(124);
}

}  // namespace
}  // namespace blockswap::probe

int main(int argc, char** argv) {
  using namespace blockswap::probe;
  std::string client_user = "nobody";
  uint64_t shm_needed_mib = 1024;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--client-user=")) {
      client_user = std::string(arg);
    } else if (absl::ConsumePrefix(&arg, "--shm-needed-mib=") &&
               absl::SimpleAtoi(arg, &shm_needed_mib)) {
    } else {
      std::fprintf(stderr, "usage: %s [--client-user=NAME] [--shm-needed-mib=N]\n", argv[0]);
      return 2;
    }
  }
  ::signal(SIGALRM, OverTheLimit);
  ::alarm(kProbeLimitSeconds);
  Report report;
  Kernel(report);
  DevShm(report, shm_needed_mib);
  std::optional<PeerUser> peer_user = ClientUser(report, client_user);
  Tools(report);
  PidfdOpen(report);
  PeerCredentials(report);
  MemfdSeal(report);
  SharedFutex(report);
  // Last: CUDA may not be initialized before a fork, and it forks B.
  RunCudaPrimitives(report, peer_user);
  return report.failures() == 0 ? 0 : 1;
}
