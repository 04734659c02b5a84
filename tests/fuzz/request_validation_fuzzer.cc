// libFuzzer target for the request-validation library (daemon/
// request_validation.h): the input is a request stream (request_stream.h);
// each record's payload is parsed as the op's request message, as the daemon
// would receive it, and run through its validation function. A load is
// checked against the last ring shape and layout that validated earlier in
// the stream, so sequences matter. Beyond "no crash, no UB, no leak" it
// checks what each validator promises: an accepted request is within every
// limit it documents, and a refusal says why.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "blockswap/v1/blockswap.pb.h"
#include "daemon/store/model_store.h"
#include "daemon/validation/request_validation.h"
#include "google/protobuf/stubs/logging.h"
#include "shared/protocol/control_block.h"
#include "shared/protocol/model_layout.h"
#include "shared/protocol/ring.h"
#include "tests/fuzz/request_stream.h"

namespace blockswap::fuzz {
namespace {

using daemon::LoadTarget;
using daemon::RequestLimits;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "request_validation_fuzzer: %s\n", what);
  __builtin_trap();
}

void Require(bool condition, const char* what) {
  if (!condition) Fail(what);
}

// A refusal must say what was wrong.
void CheckRefusal(const absl::Status& status) {
  if (!status.ok()) Require(!status.message().empty(), "an error without a message");
}

template <typename Message>
bool Parse(absl::string_view payload, Message* message) {
  return message->ParseFromArray(payload.data(), static_cast<int>(payload.size()));
}

bool IsLowerHex(absl::string_view text, size_t digits) {
  return text.size() == digits && text.find_first_not_of("0123456789abcdef") == text.npos;
}

struct StreamState {
  RingShape ring{4, 4096};
  std::optional<ModelLayout> layout;
};

void CheckCreateRing(const v1::CreateRingRequest& request, const RequestLimits& limits,
                     StreamState& state) {
  absl::Status status = daemon::ValidateCreateRing(request, limits);
  CheckRefusal(status);
  if (!status.ok()) return;
  Require(!request.device_uuid().empty(), "CreateRing accepted without a device");
  Require(request.slot_count() >= 1 && request.slot_count() <= kMaxRingSlots,
          "CreateRing accepted a slot count out of range");
  Require(request.slot_bytes() >= 1 && request.slot_bytes() <= limits.max_slot_bytes,
          "CreateRing accepted a slot size out of range");
  state.ring = RingShape{request.slot_count(), request.slot_bytes()};
}

void CheckBeginUpload(const v1::BeginUploadRequest& request, StreamState& state) {
  absl::StatusOr<ModelLayout> layout = daemon::ValidateBeginUpload(request);
  CheckRefusal(layout.status());
  if (!layout.ok()) return;
  Require(request.name().size() <= daemon::kMaxModelNameBytes, "upload name over the limit");
  Require(ValidateLayout(*layout).ok(), "BeginUpload accepted a layout ValidateLayout refuses");
  // What the daemon sends back and stores must convert back to itself.
  absl::StatusOr<ModelLayout> again = LayoutFromProto(LayoutToProto(*layout));
  Require(again.ok(), "an accepted layout does not survive LayoutToProto/LayoutFromProto");
  Require(CanonicalLayoutEncoding(*again) == CanonicalLayoutEncoding(*layout),
          "an accepted layout changes through LayoutToProto/LayoutFromProto");
  absl::StatusOr<daemon::BlockPlacement> placement = daemon::StagingOffsets(*layout);
  CheckRefusal(placement.status());
  if (placement.ok()) {
    Require(placement->offsets.size() == layout->blocks.size(), "a staging offset per block");
    for (size_t b = 0; b < layout->blocks.size(); ++b) {
      Require(placement->offsets[b] + layout->blocks[b].bytes <= placement->total_bytes,
              "a block past the end of its staging area");
    }
  }
  state.layout = std::move(layout).value();
}

void CheckReportStats(const v1::ReportStatsRequest& request) {
  absl::Status status = daemon::ValidateReportStats(request);
  CheckRefusal(status);
  if (!status.ok()) return;
  Require(request.passes_size() <= daemon::kMaxPassesPerReport, "a report of too many passes");
  for (const v1::PassStats& pass : request.passes()) {
    Require(pass.direction() == "forward" || pass.direction() == "backward",
            "a pass accepted with an unknown direction");
    for (double seconds : {pass.stall_seconds(), pass.copy_seconds(), pass.host_wait_seconds()}) {
      Require(seconds >= 0 && seconds <= daemon::kMaxPassSeconds, "pass seconds out of range");
    }
    for (uint64_t count : {pass.waits(), pass.not_ready_waits(), pass.self_heals(), pass.loads()}) {
      Require(count <= daemon::kMaxPassCount, "a pass count over the limit");
    }
  }
}

void CheckLoad(const v1::LoadRequest& request, const StreamState& state) {
  const ModelLayout* layout = state.layout ? &*state.layout : nullptr;
  const auto block_count = static_cast<uint32_t>(layout ? layout->blocks.size() : 0);
  LoadTarget target{state.ring.slot_count, state.ring.slot_bytes, block_count,
                    [layout, block_count](uint32_t b) -> uint64_t {
                      // The validator may only ask about blocks that exist.
                      Require(layout != nullptr && b < block_count,
                              "ValidateLoad asked for the size of a block out of range");
                      return layout->blocks[b].bytes;
                    }};
  absl::Status status = daemon::ValidateLoad(request, target);
  CheckRefusal(status);
  if (!status.ok()) return;
  Require(request.slot() < state.ring.slot_count, "a load accepted for a slot out of range");
  Require(request.block() < block_count, "a load accepted for a block out of range");
  Require(layout->blocks[request.block()].bytes <= state.ring.slot_bytes,
          "a load accepted for a block larger than the slots");
  Require(request.generation() != 0, "a load accepted for generation 0");
}

void CheckRegisterFile(const v1::RegisterFileRequest& request) {
  absl::Status status = daemon::ValidateRegisterFile(request);
  CheckRefusal(status);
  if (!status.ok()) return;
  Require(request.file_offers_size() >= 1 && request.file_offers_size() <= 4096,
          "RegisterFile accepted a number of offers out of range");
  Require(!request.block_pattern().empty() &&
              request.block_pattern().size() <= daemon::kMaxPatternBytes &&
              request.select().size() <= daemon::kMaxPatternBytes,
          "RegisterFile accepted a pattern out of range");
  Require(request.select_rank() <= daemon::kMaxSelectRank, "RegisterFile accepted a rank");
  Require(request.name().size() <= daemon::kMaxModelNameBytes, "RegisterFile accepted a name");
}

void Run(const RequestRecord& record, StreamState& state) {
  switch (record.op) {
    case RequestOp::kAttach: {
      v1::AttachRequest request;
      if (!Parse(record.payload, &request)) return;
      absl::Status status = daemon::ValidateAttach(request);
      CheckRefusal(status);
      if (status.ok()) {
        Require(request.client_name().size() <= daemon::kMaxClientNameBytes &&
                    request.protocol_version() == daemon::kProtocolVersion,
                "Attach accepted out of range");
      }
      return;
    }
    case RequestOp::kAuthenticate: {
      absl::Status status = daemon::ValidateSessionToken(record.payload);
      CheckRefusal(status);
      Require(status.ok() == IsLowerHex(record.payload, 32), "session token check is wrong");
      Require(status.ok() || absl::IsUnauthenticated(status), "a bad token is UNAUTHENTICATED");
      return;
    }
    case RequestOp::kOpenModel: {
      v1::OpenModelRequest request;
      if (!Parse(record.payload, &request)) return;
      absl::Status status = daemon::ValidateModelId(request.model_id());
      CheckRefusal(status);
      Require(status.ok() == IsLowerHex(request.model_id(), daemon::kModelIdHexDigits),
              "model id check is wrong");
      return;
    }
    case RequestOp::kBeginUpload: {
      v1::BeginUploadRequest request;
      if (Parse(record.payload, &request)) CheckBeginUpload(request, state);
      return;
    }
    case RequestOp::kCreateRing: {
      v1::CreateRingRequest request;
      if (!Parse(record.payload, &request)) return;
      CheckCreateRing(request, RequestLimits{}, state);
      CheckCreateRing(request, RequestLimits{.max_slot_bytes = 4096}, state);
      return;
    }
    case RequestOp::kLoad: {
      v1::LoadRequest request;
      if (Parse(record.payload, &request)) CheckLoad(request, state);
      return;
    }
    case RequestOp::kRegisterFile: {
      v1::RegisterFileRequest request;
      if (Parse(record.payload, &request)) CheckRegisterFile(request);
      return;
    }
    case RequestOp::kReportStats: {
      v1::ReportStatsRequest request;
      if (Parse(record.payload, &request)) CheckReportStats(request);
      return;
    }
    // Nothing to validate apart from the session: the session fuzzer runs these.
    case RequestOp::kWriteStaging:
    case RequestOp::kCommitUpload:
    case RequestOp::kDestroyRing:
    case RequestOp::kDetach:
    case RequestOp::kCount:
      return;
  }
}

}  // namespace
}  // namespace blockswap::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 in strings is expected
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  blockswap::fuzz::RequestReader reader(data, size);
  blockswap::fuzz::StreamState state;
  blockswap::fuzz::RequestRecord record;
  while (reader.Next(&record)) blockswap::fuzz::Run(record, state);
  return 0;
}
