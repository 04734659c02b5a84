// The limits on the masters that come from the kernel rather than from
// memory: each block the daemon holds is one mapping of its own (a
// vm.max_map_count entry); a sealed master keeps no descriptor, so
// RLIMIT_NOFILE bounds the connections, sessions, rings and transfers in
// flight instead. max_master_blocks = "auto" leaves half of vm.max_map_count
// to everything else the daemon maps (rings, staging areas, libraries,
// thread stacks). The start check (blockswapd --check-config) warns when a
// configured limit could exceed what these allow, saying what to raise, and
// notes when max_master_blocks rather than max_memory_bytes bounds models of
// small blocks, which is by design.
#ifndef BLOCKSWAP_DAEMON_BUDGET_MASTER_LIMITS_H_
#define BLOCKSWAP_DAEMON_BUDGET_MASTER_LIMITS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/budget/descriptor_model.h"

namespace blockswap::daemon {

// "auto" for max_master_blocks, max_master_bytes_per_uid,
// max_device_bytes_per_uid and max_descriptors_per_uid.
inline constexpr uint64_t kAutoLimit = UINT64_MAX;

// The reserve held back at run time: a model open (a batch of descriptors
// to send) or a registration (the block files it writes at once) that would
// leave fewer than kDescriptorReserve of RLIMIT_NOFILE free is
// RESOURCE_EXHAUSTED naming the limit, what is open and the reserve, so
// that those bulk paths, whoever floods them, never take the descriptors
// attach, rings and connections need (those are not checked: they get the
// reserve).
absl::Status CheckDescriptorHeadroom(uint64_t wanted, absl::string_view what);

// vm.max_map_count from `path`; 0 when it cannot be read.
uint64_t ReadMaxMapCount(absl::string_view path = "/proc/sys/vm/max_map_count");
// What max_master_blocks = "auto" resolves to: half of vm.max_map_count
// (32768 when it is unknown).
uint64_t AutoMaxMasterBlocks(uint64_t max_map_count);
// What max_master_bytes_per_uid = "auto" resolves to: half of the node's
// budget (0, unlimited, when the budget is).
inline uint64_t AutoMaxMasterBytesPerUid(uint64_t max_memory_bytes) { return max_memory_bytes / 2; }

struct MasterLimitsInput {
  uint64_t max_memory_bytes = 0;           // resolved; 0: unlimited
  uint64_t max_master_blocks = 0;          // resolved; 0: unlimited
  uint64_t max_master_blocks_per_uid = 0;  // 0: unlimited
  uint64_t max_map_count = 0;              // 0: unknown
  uint64_t open_files = 0;                 // RLIMIT_NOFILE's soft limit
  // What one uid may hold in descriptors through its quotas
  // (DescriptorsOneUidMayHold): the reserve comes on top.
  uint64_t descriptors_one_uid_may_hold = 0;
};

// The start check's verdict on the masters' limits.
struct MasterLimitsReport {
  // A configured limit that the kernel's (vm.max_map_count, RLIMIT_NOFILE)
  // would break first, or one that lets a single uid take what the node
  // holds for everyone; each says what to raise or lower.
  std::vector<std::string> warnings;
  // True of a sound configuration and worth knowing: which limit decides
  // for models of small blocks. Not a problem: max_master_blocks bounds
  // the mappings on purpose.
  std::vector<std::string> notes;
};

MasterLimitsReport AssessMasterLimits(const MasterLimitsInput& in);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_BUDGET_MASTER_LIMITS_H_
