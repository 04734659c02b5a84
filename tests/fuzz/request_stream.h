// The input format of the request-handling fuzzers (request_validation_fuzzer,
// session_sequence_fuzzer) and of their seed generator (request_seeds): a
// sequence of records, each
//   1 byte   op: RequestOp = byte % kRequestOpCount; the session fuzzer also
//            takes the session it goes to from (byte / kRequestOpCount) % 2
//   2 bytes  payload length, little-endian
//   n bytes  payload: the request message of the op in protobuf wire format
//            (what the daemon would receive), except kAuthenticate (the raw
//            token) and kWriteStaging (8-byte little-endian offset + bytes)
// A truncated last record is cut to what is there. Header-only: the fuzzers
// and the generator share it and nothing else.
#ifndef BLOCKSWAP_TESTS_FUZZ_REQUEST_STREAM_H_
#define BLOCKSWAP_TESTS_FUZZ_REQUEST_STREAM_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace blockswap::fuzz {

enum class RequestOp : uint8_t {
  kAttach,        // v1::AttachRequest
  kAuthenticate,  // a session token; empty: the session's own
  kBeginUpload,   // v1::BeginUploadRequest
  kWriteStaging,  // offset + bytes written into the session's last staging area
  kCommitUpload,  // v1::CommitUploadRequest
  kOpenModel,     // v1::OpenModelRequest
  kCreateRing,    // v1::CreateRingRequest
  kDestroyRing,   // v1::DestroyRingRequest
  kLoad,          // v1::LoadRequest
  kReportStats,   // v1::ReportStatsRequest
  kRegisterFile,  // v1::RegisterFileRequest
  kDetach,        // no payload
  kCount,
};
inline constexpr int kRequestOpCount = static_cast<int>(RequestOp::kCount);

// In the session fuzzer, these stand for ids only known at run time: a ring
// id 1..kMaxRefs means the n-th ring created by this input (when there is
// one), and a model id of one digit '0'..'7' the n-th model this input saw
// ('0': a model registered before any input).
inline constexpr uint64_t kMaxRefs = 8;

struct RequestRecord {
  RequestOp op = RequestOp::kAttach;
  int session = 0;  // 0 or 1
  absl::string_view payload;
};

class RequestReader {
 public:
  RequestReader(const uint8_t* data, size_t size)
      : rest_(reinterpret_cast<const char*>(data), size) {}

  // The next record; false at the end.
  bool Next(RequestRecord* record) {
    if (rest_.size() < 3) return false;
    auto op_byte = static_cast<uint8_t>(rest_[0]);
    size_t length = static_cast<uint8_t>(rest_[1]) | size_t{static_cast<uint8_t>(rest_[2])} << 8;
    rest_.remove_prefix(3);
    length = std::min(length, rest_.size());
    record->op = static_cast<RequestOp>(op_byte % kRequestOpCount);
    record->session = (op_byte / kRequestOpCount) % 2;
    record->payload = rest_.substr(0, length);
    rest_.remove_prefix(length);
    return true;
  }

 private:
  absl::string_view rest_;
};

// Appends one record (payloads over 65535 bytes are cut).
inline void AppendRecord(std::string* out, RequestOp op, absl::string_view payload,
                         int session = 0) {
  size_t length = std::min<size_t>(payload.size(), 0xffff);
  out->push_back(static_cast<char>(static_cast<int>(op) + session * kRequestOpCount));
  out->push_back(static_cast<char>(length & 0xff));
  out->push_back(static_cast<char>(length >> 8));
  out->append(payload.data(), length);
}

// Little-endian u64 at the start of `bytes` (zero-padded when shorter).
inline uint64_t ReadU64(absl::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8 && i < bytes.size(); ++i) {
    value |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  }
  return value;
}

inline std::string U64Bytes(uint64_t value) {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>(value >> (8 * i));
  return out;
}

}  // namespace blockswap::fuzz

#endif  // BLOCKSWAP_TESTS_FUZZ_REQUEST_STREAM_H_
