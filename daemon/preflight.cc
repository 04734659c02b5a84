#include "daemon/preflight.h"

#include <grp.h>
#include <pwd.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/budget/descriptor_model.h"
#include "daemon/budget/master_limits.h"
#include "daemon/budget/memory_limit.h"
#include "daemon/runtime/process_stats.h"
#include "daemon/store/masters_directory.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

std::string Bytes(uint64_t bytes) {
  return absl::StrFormat("%d bytes, %.1f GiB", bytes, static_cast<double>(bytes) / (1 << 30));
}

// The directory itself, or the nearest ancestor that exists: what the
// daemon's mkdir would create it in.
std::string ExistingAncestor(const std::string& path) {
  std::filesystem::path p(path);
  std::error_code error;
  while (!p.empty() && p != p.root_path() && !std::filesystem::exists(p, error)) {
    p = p.parent_path();
  }
  return p.empty() ? "." : p.string();
}

// Warnings, not errors: under systemd the unit creates the directory
// (RuntimeDirectory=), and whether it is writable depends on who runs the
// check (an operator, not the service user).
void CheckSocketDirectory(const DaemonOptions& o, PreflightReport& report) {
  const std::string dir = std::filesystem::path(o.socket_path).parent_path().string();
  const std::string where = dir.empty() ? "." : dir;
  if (::access(where.c_str(), F_OK) != 0) {
    report.warnings.push_back(absl::StrCat(
        "socket ", o.socket_path, ": its directory ", where,
        " does not exist. The systemd unit creates /run/blockswap (RuntimeDirectory=); started "
        "otherwise, blockswapd fails to bind until it exists"));
  } else if (::access(where.c_str(), W_OK | X_OK) != 0) {
    report.warnings.push_back(absl::StrCat("socket ", o.socket_path, ": its directory ", where,
                                           " is not writable by uid ", ::geteuid(),
                                           " (the user running the daemon must be able to)"));
  }
}

void CheckBudget(const DaemonOptions& o, PreflightReport& report) {
  if (o.max_pinned_bytes == 0) return;
  const std::string holder = ExistingAncestor(o.shm_prefix);
  struct statvfs fs {};
  if (::statvfs(holder.c_str(), &fs) != 0) {
    report.errors.push_back(ErrnoStatus(errno, absl::StrCat("statvfs of ", holder)));
    return;
  }
  const uint64_t size = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  if (o.max_pinned_bytes > size) {
    report.errors.push_back(absl::FailedPreconditionError(absl::StrCat(
        "max_pinned_bytes (", Bytes(o.max_pinned_bytes), ") is more than the filesystem of ",
        o.shm_prefix, " holds (", Bytes(size), " at ", holder,
        "): masters past its size could never be stored; lower the budget or grow the tmpfs "
        "(mount -o remount,size=... ",
        holder, ")")));
  }
}

void CheckAccounts(const DaemonOptions& o, PreflightReport& report) {
  for (uid_t uid : o.allow_uids) {
    if (::getpwuid(uid) == nullptr) {
      report.warnings.push_back(absl::StrCat("allow_uids: no user with uid ", uid,
                                             " on this machine (allowed all the same)"));
    }
  }
  for (gid_t gid : o.allow_gids) {
    if (::getgrgid(gid) == nullptr) {
      report.warnings.push_back(absl::StrCat("allow_gids: no group with gid ", gid,
                                             " on this machine (allowed all the same)"));
    }
  }
}

// Whether the masters' limits fit vm.max_map_count and RLIMIT_NOFILE, and
// which limit decides for small blocks.
void CheckMasterLimits(const DaemonOptions& o, PreflightReport& report) {
  MasterLimitsInput in;
  in.max_memory_bytes = o.max_memory_bytes == kMaxMemoryBytesAuto
                            ? AutoMaxMemoryBytes(ProcessMemoryLimit())
                            : o.max_memory_bytes;
  in.max_map_count = ReadMaxMapCount();
  in.max_master_blocks = o.max_master_blocks == kAutoLimit ? AutoMaxMasterBlocks(in.max_map_count)
                                                           : o.max_master_blocks;
  in.max_master_blocks_per_uid = o.max_master_blocks_per_uid;
  in.open_files = OpenFilesLimit();
  const uint64_t daemon_open = OpenDescriptorCount();
  const ClientAmounts& uid = o.quotas.per_uid;
  uint64_t descriptors = uid.descriptors;
  if (descriptors == kAutoLimit) {
    // As the daemon will resolve it, less what it opens after this check
    // (devices, the gRPC server), which the reserve absorbs.
    descriptors = AutoMaxDescriptorsPerUid(in.open_files, daemon_open, o.max_connections_per_uid);
    if (descriptors == kMinimumDescriptorsPerUid) {
      const uint64_t connections = o.max_connections_per_uid * DescriptorsOfConnection();
      report.warnings.push_back(absl::StrCat(
          "max_descriptors_per_uid = \"auto\" gives each uid only ", descriptors,
          " descriptors (one session with two rings): RLIMIT_NOFILE = ", in.open_files,
          " leaves too few beyond a reserve of ", kDescriptorReserve, " and the ", connections,
          " that max_connections_per_uid = ", o.max_connections_per_uid,
          " connections may hold; raise LimitNOFILE= in blockswapd.service above ",
          daemon_open + kDescriptorReserve + 2 * (connections + kMinimumDescriptorsPerUid),
          ", or lower max_connections_per_uid"));
    }
  }
  in.descriptors_one_uid_may_hold =
      DescriptorsOneUidMayHold({.connections = o.max_connections_per_uid,
                                .sessions = uid.sessions,
                                .rings = uid.rings,
                                .file_offers = uid.file_offers,
                                .descriptors = descriptors});
  MasterLimitsReport masters = AssessMasterLimits(in);
  for (std::string& warning : masters.warnings) report.warnings.push_back(std::move(warning));
  for (std::string& note : masters.notes) report.notes.push_back(std::move(note));
}

}  // namespace

absl::StatusOr<gid_t> ResolveSocketGroup(const std::string& group) {
  gid_t gid = 0;
  if (absl::SimpleAtoi(group, &gid)) return gid;
  std::vector<char> buffer(16384);
  struct group entry {};
  struct group* found = nullptr;
  int error = ::getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (error != 0) return ErrnoStatus(error, absl::StrCat("looking up group '", group, "'"));
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "socket group '", group, "' does not exist (create it: groupadd --system ", group, ")"));
  }
  return found->gr_gid;
}

PreflightReport Preflight(const DaemonOptions& options) {
  PreflightReport report;
  if (!options.socket_group.empty()) {
    if (absl::StatusOr<gid_t> gid = ResolveSocketGroup(options.socket_group); !gid.ok()) {
      report.errors.push_back(gid.status());
    }
  }
  if (absl::StatusOr<std::string> masters = InspectMastersDirectory(options.shm_prefix);
      masters.ok()) {
    report.masters_directory = *std::move(masters);
  } else {
    report.errors.push_back(masters.status());
  }
  CheckSocketDirectory(options, report);
  CheckBudget(options, report);
  CheckAccounts(options, report);
  CheckMasterLimits(options, report);
  return report;
}

}  // namespace blockswap::daemon
