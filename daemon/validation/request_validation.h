// Validation of client requests, apart from the gRPC service classes so that
// it can be unit-tested and fuzzed without a server. Every function is pure:
// it looks only at its arguments and answers OK or an error whose message
// names what was wrong and the limit it broke.
#ifndef BLOCKSWAP_DAEMON_VALIDATION_REQUEST_VALIDATION_H_
#define BLOCKSWAP_DAEMON_VALIDATION_REQUEST_VALIDATION_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "blockswap/v1/blockswap.pb.h"
#include "shared/protocol/model_layout.h"
#include "shared/protocol/ring.h"

namespace blockswap::daemon {

// The client library's copy is client/core/connection.cc's kProtocolVersion.
// A client must speak this version exactly.
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kMaxClientNameBytes = 256;
inline constexpr size_t kMaxModelNameBytes = 1024;
inline constexpr size_t kModelIdHexDigits = 64;

struct RequestLimits {
  uint64_t max_slot_bytes = uint64_t{64} << 30;  // one slot of 64 GiB
};

// A session token as Attach hands them out: 32 lowercase hex digits.
absl::Status ValidateSessionToken(absl::string_view token);
// A model id: 64 lowercase hex digits.
absl::Status ValidateModelId(absl::string_view model_id);

absl::Status ValidateAttach(const v1::AttachRequest& request);
// Returns the validated layout.
absl::StatusOr<ModelLayout> ValidateBeginUpload(const v1::BeginUploadRequest& request);

// A block the client says the daemon holds (BeginUploadRequest.held_blocks):
// its position in the layout and the SHA-256 of its bytes.
struct HeldBlockClaim {
  uint32_t block = 0;
  Sha256Digest hash{};
};
// The held blocks of a BeginUpload of `layout`: INVALID_ARGUMENT naming what
// is wrong (counts that differ, a position out of range or not ascending, a
// hash that is not 32 bytes). Says nothing of whether the daemon holds them.
absl::StatusOr<std::vector<HeldBlockClaim>> ValidateHeldBlocks(
    const v1::BeginUploadRequest& request, const ModelLayout& layout);
// At most this many ids in one HeldBlocks call.
inline constexpr int kMaxHeldBlocksQuery = 65536;
// INVALID_ARGUMENT naming the first id that is not 64 lowercase hex digits,
// or too many ids.
absl::Status ValidateHeldBlocksRequest(const v1::HeldBlocksRequest& request);
absl::Status ValidateCreateRing(const v1::CreateRingRequest& request,
                                const RequestLimits& limits = {});

// What a load request is checked against: the ring it names and the model.
struct LoadTarget {
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;
  uint32_t block_count = 0;
  std::function<uint64_t(uint32_t)> block_bytes;  // valid for blocks < block_count
};
absl::Status ValidateLoad(const v1::LoadRequest& request, const LoadTarget& target);

// Bounds of a file registration's strings (the patterns are compiled by RE2,
// whose cost is linear in them).
inline constexpr size_t kMaxPatternBytes = 4096;
inline constexpr uint32_t kMaxSelectRank = 64;
// 1..4096 distinct offers, a non-empty block pattern and a selector of at
// most kMaxPatternBytes, a rank of at most kMaxSelectRank, a name of at most
// kMaxModelNameBytes.
absl::Status ValidateRegisterFile(const v1::RegisterFileRequest& request);

// Bounds of a statistics report (one pass per report from the client
// library; a few at most from anyone). Each pass a session keeps is then at
// most ~100 bytes: a direction of 8, seven numbers, no unknown fields.
inline constexpr int kMaxPassesPerReport = 16;
inline constexpr double kMaxPassSeconds = 86400;              // one pass of a day
inline constexpr uint64_t kMaxPassCount = uint64_t{1} << 32;  // waits, loads, ... of one pass
// At most kMaxPassesPerReport passes, each with direction "forward" or
// "backward", finite seconds in 0..kMaxPassSeconds, counts of at most
// kMaxPassCount; INVALID_ARGUMENT naming the pass and field otherwise.
absl::Status ValidateReportStats(const v1::ReportStatsRequest& request);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_VALIDATION_REQUEST_VALIDATION_H_
