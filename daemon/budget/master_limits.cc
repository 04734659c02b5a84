#include "daemon/budget/master_limits.h"

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/runtime/process_stats.h"

namespace blockswap::daemon {
namespace {

// The cost of the smallest block (one page and its overhead: BlockFileBytes
// and kBlockOverheadBytes in daemon/store/block_master.h).
constexpr uint64_t kSmallestBlockCost = 4096 + 4096;

}  // namespace

absl::Status CheckDescriptorHeadroom(uint64_t wanted, absl::string_view what) {
  const uint64_t limit = OpenFilesLimit();
  const uint64_t open = OpenDescriptorCount();
  // Unlimited, or no /proc to measure by.
  if (limit == 0 || open == 0 || open + wanted + kDescriptorReserve <= limit) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " needs ", wanted, " descriptors: blockswapd has ", open,
      " of its RLIMIT_NOFILE = ", limit, " open and keeps ", kDescriptorReserve,
      " for attach, rings and connections; retry, or raise LimitNOFILE= in blockswapd.service"));
}

uint64_t ReadMaxMapCount(absl::string_view path) {
  std::ifstream in{std::string(path)};
  std::string text;
  uint64_t value = 0;
  if (!(in >> text) || !absl::SimpleAtoi(text, &value)) return 0;
  return value;
}

uint64_t AutoMaxMasterBlocks(uint64_t max_map_count) {
  return max_map_count == 0 ? 32768 : max_map_count / 2;
}

MasterLimitsReport AssessMasterLimits(const MasterLimitsInput& in) {
  MasterLimitsReport report;
  // Each master block is one mapping: a block limit above three quarters of
  // vm.max_map_count (or none) lets the masters take the mappings that
  // rings, staging areas and libraries need, and mmap fails with ENOMEM.
  if (in.max_map_count != 0 &&
      (in.max_master_blocks == 0 || in.max_master_blocks > in.max_map_count - in.max_map_count / 4)) {
    report.warnings.push_back(absl::StrCat(
        "max_master_blocks = ",
        in.max_master_blocks == 0 ? "0 (unlimited)" : absl::StrCat(in.max_master_blocks),
        " leaves less than a quarter of vm.max_map_count = ", in.max_map_count,
        " to the daemon's other mappings (each master block is one): lower it, or raise "
        "vm.max_map_count (sysctl -w vm.max_map_count=N, and in /etc/sysctl.d)"));
  }
  // A per-uid block limit at or above the node's means the node's limit, not
  // the uid's, stops a flood: one uid may hold every block there is.
  if (in.max_master_blocks != 0 &&
      (in.max_master_blocks_per_uid == 0 || in.max_master_blocks_per_uid >= in.max_master_blocks)) {
    report.warnings.push_back(absl::StrCat(
        "max_master_blocks_per_uid = ",
        in.max_master_blocks_per_uid == 0 ? "0 (unlimited)"
                                          : absl::StrCat(in.max_master_blocks_per_uid),
        " is not below max_master_blocks = ", in.max_master_blocks,
        ": one uid may hold every master block the node allows, and other users' models are then "
        "refused until its unused ones are evicted; lower max_master_blocks_per_uid below ",
        in.max_master_blocks));
  }
  if (in.open_files != 0 && in.descriptors_one_uid_may_hold == UINT64_MAX) {
    report.warnings.push_back(absl::StrCat(
        "one uid may hold any number of descriptors (max_connections_per_uid, or "
        "max_descriptors_per_uid and a count quota, is 0): it can take all of RLIMIT_NOFILE = ",
        in.open_files,
        " and leave other users unable to attach; set them (\"auto\" for "
        "max_descriptors_per_uid)"));
  } else if (const uint64_t wanted = in.descriptors_one_uid_may_hold + kDescriptorReserve;
             in.open_files != 0 && in.open_files < wanted) {
    report.warnings.push_back(absl::StrCat(
        "RLIMIT_NOFILE = ", in.open_files, " is less than the ", in.descriptors_one_uid_may_hold,
        " descriptors one uid may hold through its quotas plus a reserve of ", kDescriptorReserve,
        " for everyone else's attach, model opens and rings (master blocks keep none): raise "
        "LimitNOFILE= in blockswapd.service to at least ",
        wanted, ", or lower the per-uid quotas"));
  }
  // That the budget would hold more one-page blocks than max_master_blocks
  // is the block limit doing its job (the mappings run out long before the
  // memory does), so it is a note: which limit a model's block size meets.
  if (in.max_memory_bytes != 0 && in.max_master_blocks != 0 &&
      in.max_memory_bytes / kSmallestBlockCost > in.max_master_blocks) {
    // The average block size at which both limits are met together, in
    // tenths of a MiB.
    const uint64_t crossover_tenths = in.max_memory_bytes / in.max_master_blocks * 10 >> 20;
    report.notes.push_back(absl::StrCat(
        "max_master_blocks = ", in.max_master_blocks,
        " bounds the node's master blocks (vm.max_map_count = ",
        in.max_map_count == 0 ? "unknown" : absl::StrCat(in.max_map_count),
        "): models whose blocks average under ", crossover_tenths / 10, ".", crossover_tenths % 10,
        " MiB reach it before max_memory_bytes = ", in.max_memory_bytes,
        "; raise vm.max_map_count and max_master_blocks only if that many small blocks are "
        "expected"));
  }
  return report;
}

}  // namespace blockswap::daemon
