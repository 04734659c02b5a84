// VisibleBlocks: the blocks of every model a peer may see (model_visibility.h),
// by block id. A client may name a block as held, instead of uploading it,
// only if it is here (BeginUpload's held blocks); HeldBlocks answers from it.
// A block held only in models the peer may not see is answered as one the
// daemon does not hold: nobody gets content without sending its bytes.
#ifndef BLOCKSWAP_DAEMON_SESSION_VISIBLE_BLOCKS_H_
#define BLOCKSWAP_DAEMON_SESSION_VISIBLE_BLOCKS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/session/model_visibility.h"
#include "daemon/session/peer.h"
#include "daemon/store/model_store.h"
#include "daemon/validation/request_validation.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

// A snapshot of the store when it was taken; its references keep the masters
// mapped. Immutable once taken.
class VisibleBlocks {
 public:
  // None.
  VisibleBlocks() = default;
  // Walks every model in the store.
  static VisibleBlocks Of(const ModelStore& store, const ModelVisibility& visibility,
                          const Peer& peer);

  bool contains(absl::string_view block_id) const { return masters_.contains(block_id); }
  // The masters and hashes of the blocks `claims` name in `layout`, by
  // position (null where not claimed): FAILED_PRECONDITION naming the first
  // claim that is not here, worded the same whether no model holds it or
  // none the peer may see.
  absl::StatusOr<KnownBlocks> Resolve(const std::vector<HeldBlockClaim>& claims,
                                      const ModelLayout& layout) const;

 private:
  std::map<std::string, std::shared_ptr<const BlockMaster>, std::less<>> masters_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_VISIBLE_BLOCKS_H_
