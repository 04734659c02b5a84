#include "daemon/validation/request_validation.h"

#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"
#include "shared/build_info/build_info.h"
#include "shared/protocol/side_channel_wire.h"

namespace blockswap::daemon {
namespace {

absl::Status ValidateHex(absl::string_view value, size_t digits, absl::string_view what) {
  if (value.size() != digits ||
      value.find_first_not_of("0123456789abcdef") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be ", digits, " lowercase hex digits (got ", value.size(), " characters)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSessionToken(absl::string_view token) {
  if (token.empty()) {
    return absl::UnauthenticatedError("request carries no session token (call Attach first)");
  }
  if (ValidateHex(token, 32, "session token").ok()) return absl::OkStatus();
  return absl::UnauthenticatedError("malformed session token");
}

absl::Status ValidateModelId(absl::string_view model_id) {
  return ValidateHex(model_id, kModelIdHexDigits, "model id");
}

absl::Status ValidateAttach(const v1::AttachRequest& request) {
  if (request.client_name().size() > kMaxClientNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("client name of ", request.client_name().size(),
                                                   " bytes (at most ", kMaxClientNameBytes, ")"));
  }
  if (request.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "client speaks protocol version ", request.protocol_version(), ", this blockswapd speaks ",
        kProtocolVersion, " (blockswapd version ", ThisBuild().version,
        "): install the client library (libblockswap, the Python package) and "
        "blockswapd of one release"));
  }
  if (!request.replaces_session_token().empty() &&
      !IsValidSessionToken(request.replaces_session_token())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replaces_session_token of ", request.replaces_session_token().size(),
        " bytes is not a session token (", kSessionTokenBytes, " printable ASCII bytes)"));
  }
  // A library newer than this daemon may rely on what the daemon lacks; an
  // older one gets what it knew.
  const uint32_t served_abi = ThisBuild().abi_version;
  if (request.client_abi_version() > served_abi) {
    return absl::FailedPreconditionError(
        absl::StrCat("client library has C ABI version ", request.client_abi_version(),
                     ", this blockswapd serves C ABI versions up to ", served_abi,
                     " (protocol version ", kProtocolVersion, ", blockswapd version ",
                     ThisBuild().version, "): update blockswapd to the library's version"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelLayout> ValidateBeginUpload(const v1::BeginUploadRequest& request) {
  if (request.name().size() > kMaxModelNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("model name of ", request.name().size(),
                                                   " bytes (at most ", kMaxModelNameBytes, ")"));
  }
  return LayoutFromProto(request.layout());
}

absl::StatusOr<std::vector<HeldBlockClaim>> ValidateHeldBlocks(
    const v1::BeginUploadRequest& request, const ModelLayout& layout) {
  if (request.held_blocks_size() != request.held_block_hashes_size()) {
    return absl::InvalidArgumentError(absl::StrCat(request.held_blocks_size(), " held blocks but ",
                                                   request.held_block_hashes_size(),
                                                   " held block hashes (one each)"));
  }
  std::vector<HeldBlockClaim> held;
  for (int i = 0; i < request.held_blocks_size(); ++i) {
    const uint32_t block = request.held_blocks(i);
    if (block >= layout.blocks.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "held block ", block, " out of range (layout has ", layout.blocks.size(), " blocks)"));
    }
    if (!held.empty() && block <= held.back().block) {
      return absl::InvalidArgumentError(absl::StrCat("held block ", block, " after block ",
                                                     held.back().block,
                                                     " (positions must be strictly ascending)"));
    }
    const std::string& hash = request.held_block_hashes(i);
    if (hash.size() != Sha256Digest().size()) {
      return absl::InvalidArgumentError(absl::StrCat("the hash of held block ", block, " has ",
                                                     hash.size(), " bytes (a SHA-256 has 32)"));
    }
    HeldBlockClaim& claim = held.emplace_back();
    claim.block = block;
    std::memcpy(claim.hash.data(), hash.data(), hash.size());
  }
  return held;
}

absl::Status ValidateHeldBlocksRequest(const v1::HeldBlocksRequest& request) {
  if (request.block_ids_size() > kMaxHeldBlocksQuery) {
    return absl::InvalidArgumentError(absl::StrCat(request.block_ids_size(),
                                                   " block ids in one HeldBlocks call (at most ",
                                                   kMaxHeldBlocksQuery, ")"));
  }
  for (int i = 0; i < request.block_ids_size(); ++i) {
    absl::Status valid = ValidateHex(request.block_ids(i), kModelIdHexDigits, "block id");
    if (!valid.ok()) return Annotate(valid, absl::StrCat("block id ", i));
  }
  return absl::OkStatus();
}

absl::Status ValidateCreateRing(const v1::CreateRingRequest& request,
                                const RequestLimits& limits) {
  if (request.device_uuid().empty()) {
    return absl::InvalidArgumentError("CreateRing names no device (device_uuid is empty)");
  }
  if (request.slot_bytes() > limits.max_slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("ring slots of ", request.slot_bytes(),
                                                   " bytes (at most ", limits.max_slot_bytes, ")"));
  }
  return ValidateRingShape(RingShape{request.slot_count(), request.slot_bytes()});
}

absl::Status ValidateLoad(const v1::LoadRequest& request, const LoadTarget& target) {
  if (request.slot() >= target.slot_count) {
    return absl::OutOfRangeError(absl::StrCat("slot ", request.slot(), " out of range (ring ",
                                              request.ring_id(), " has ", target.slot_count,
                                              " slots)"));
  }
  if (request.block() >= target.block_count) {
    return absl::OutOfRangeError(absl::StrCat("block ", request.block(),
                                              " out of range (model has ", target.block_count,
                                              " blocks)"));
  }
  uint64_t bytes = target.block_bytes(request.block());
  if (bytes > target.slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("block ", request.block(), " of ", bytes,
                                                   " bytes does not fit the ", target.slot_bytes,
                                                   "-byte slots of ring ", request.ring_id()));
  }
  if (request.generation() == 0) {
    return absl::InvalidArgumentError("generation 0 is never loaded (generations start at 1)");
  }
  return absl::OkStatus();
}

absl::Status ValidateRegisterFile(const v1::RegisterFileRequest& request) {
  constexpr int kMaxOffers = 4096;
  if (request.file_offers_size() == 0 || request.file_offers_size() > kMaxOffers) {
    return absl::InvalidArgumentError(absl::StrCat("a file registration names ",
                                                   request.file_offers_size(),
                                                   " file offers (1..", kMaxOffers, ")"));
  }
  std::set<uint64_t> offers(request.file_offers().begin(), request.file_offers().end());
  if (offers.size() != static_cast<size_t>(request.file_offers_size())) {
    return absl::InvalidArgumentError("a file registration names one file offer twice");
  }
  if (request.block_pattern().empty()) {
    return absl::InvalidArgumentError(
        "a file registration needs a block pattern (a regex with one capture group for the "
        "block index)");
  }
  for (const auto& [what, text] : {std::pair{"block pattern", &request.block_pattern()},
                                   std::pair{"selector", &request.select()}}) {
    if (text->size() > kMaxPatternBytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has ", text->size(),
                                                     " bytes (limit ", kMaxPatternBytes, ")"));
    }
  }
  if (request.select_rank() > kMaxSelectRank) {
    return absl::InvalidArgumentError(absl::StrCat("select_rank ", request.select_rank(),
                                                   " is over the limit of ", kMaxSelectRank));
  }
  if (request.name().size() > kMaxModelNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("model name has ", request.name().size(),
                                                   " bytes (limit ", kMaxModelNameBytes, ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateReportStats(const v1::ReportStatsRequest& request) {
  if (request.passes_size() > kMaxPassesPerReport) {
    return absl::InvalidArgumentError(absl::StrCat("a statistics report carries ",
                                                   request.passes_size(), " passes (limit ",
                                                   kMaxPassesPerReport, ")"));
  }
  for (int i = 0; i < request.passes_size(); ++i) {
    const v1::PassStats& pass = request.passes(i);
    const std::string where = absl::StrCat("passes[", i, "].");
    if (pass.direction() != "forward" && pass.direction() != "backward") {
      return absl::InvalidArgumentError(absl::StrCat(where, "direction ", Quoted(pass.direction()),
                                                     " is not 'forward' or 'backward'"));
    }
    for (const auto& [field, seconds] :
         {std::pair{"stall_seconds", pass.stall_seconds()},
          std::pair{"copy_seconds", pass.copy_seconds()},
          std::pair{"host_wait_seconds", pass.host_wait_seconds()}}) {
      if (!(seconds >= 0 && seconds <= kMaxPassSeconds)) {  // NaN too
        return absl::InvalidArgumentError(
            absl::StrCat(where, field, " ", seconds, " is not in 0..", kMaxPassSeconds));
      }
    }
    for (const auto& [field, count] :
         {std::pair{"waits", pass.waits()}, std::pair{"not_ready_waits", pass.not_ready_waits()},
          std::pair{"self_heals", pass.self_heals()}, std::pair{"loads", pass.loads()}}) {
      if (count > kMaxPassCount) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, field, " ", count, " is over the limit of ", kMaxPassCount));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace blockswap::daemon
