// What the masters hold on each uid's behalf: the distinct blocks named by
// the models whose registrants include the uid, and their file bytes. A
// block counts in full for EVERY uid whose models name it, each on its own
// (never split among the uids that share it), so that no uid dodges its
// limit by sharing content and what a uid is charged says nothing about what
// other uids hold. What stays after a uid's sessions end is bounded by these
// (max_master_blocks_per_uid, max_master_bytes_per_uid), however small its
// blocks are.
#ifndef BLOCKSWAP_DAEMON_STORE_UID_HOLDS_H_
#define BLOCKSWAP_DAEMON_STORE_UID_HOLDS_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blockswap::daemon {

// Limits per uid on the masters held on its behalf; 0: unlimited.
struct UidMasterLimits {
  uint64_t max_blocks = 0;  // max_master_blocks_per_uid
  uint64_t max_bytes = 0;   // max_master_bytes_per_uid
};

// One distinct block of a model: its id and its file's bytes.
struct BlockRef {
  std::string id;
  uint64_t file_bytes = 0;
};

// Not thread-safe: ModelStore keeps it under its lock.
class UidHolds {
 public:
  // Whether `uid` may hold `blocks` (distinct ids) too: those it holds
  // already add nothing. RESOURCE_EXHAUSTED naming the uid, the limit's key
  // and value, what it holds and what the model adds otherwise.
  absl::Status Check(uid_t uid, const std::vector<BlockRef>& blocks,
                     const UidMasterLimits& limits) const;
  // Check's answer from a registration's declared sizes, before its blocks'
  // ids are known (nothing read or hashed yet): pessimistic, as if `uid` held
  // none of the `blocks` blocks of `bytes`, so a registration that its uid's
  // limits can only refuse costs no reading. Worded as Check.
  absl::Status CheckDeclared(uid_t uid, uint64_t blocks, uint64_t bytes,
                             const UidMasterLimits& limits) const;
  // Counts one more model of `uid` naming each of `blocks` (distinct ids).
  void Add(uid_t uid, const std::vector<BlockRef>& blocks);
  // Undoes one Add of the same blocks.
  void Remove(uid_t uid, const std::vector<BlockRef>& blocks);

  uint64_t blocks(uid_t uid) const;
  uint64_t bytes(uid_t uid) const;

 private:
  struct Hold {
    std::map<std::string, uint64_t, std::less<>> models_naming;  // by block id
    uint64_t bytes = 0;
  };
  std::map<uid_t, Hold> holds_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_UID_HOLDS_H_
