#include "daemon/server/http2_frame_guard.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {
namespace {

constexpr absl::string_view kClientPreface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);

// Frame types and flags (RFC 9113 §6).
constexpr uint8_t kData = 0x0;
constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kPushPromise = 0x5;
constexpr uint8_t kContinuation = 0x9;
constexpr uint8_t kEndHeaders = 0x4;

}  // namespace

absl::Status Http2FrameGuard::Fail(absl::Status error) {
  error_ = std::move(error);
  return error_;
}

absl::Status Http2FrameGuard::Inspect(absl::string_view bytes) {
  if (!error_.ok()) return error_;
  while (!bytes.empty()) {
    if (preface_seen_ < kClientPreface.size()) {
      const size_t n = std::min(bytes.size(), kClientPreface.size() - preface_seen_);
      if (bytes.substr(0, n) != kClientPreface.substr(preface_seen_, n)) {
        return Fail(absl::InvalidArgumentError("the HTTP/2 client preface is malformed"));
      }
      preface_seen_ += n;
      bytes.remove_prefix(n);
      continue;
    }
    if (payload_left_ > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), payload_left_));
      payload_left_ -= n;
      bytes.remove_prefix(n);
      continue;
    }
    const size_t n = std::min(bytes.size(), header_.size() - header_seen_);
    std::copy_n(bytes.begin(), n, header_.begin() + header_seen_);
    header_seen_ += n;
    bytes.remove_prefix(n);
    if (header_seen_ == header_.size()) {
      header_seen_ = 0;
      ++frames_;
      if (absl::Status checked = OnFrameHeader(); !checked.ok()) return Fail(std::move(checked));
    }
  }
  return absl::OkStatus();
}

absl::Status Http2FrameGuard::OnFrameHeader() {
  const uint32_t length = uint32_t{header_[0]} << 16 | uint32_t{header_[1]} << 8 | header_[2];
  const uint8_t type = header_[3];
  const uint8_t flags = header_[4];
  const uint32_t stream = (uint32_t{header_[5]} << 24 | uint32_t{header_[6]} << 16 |
                           uint32_t{header_[7]} << 8 | header_[8]) &
                          0x7fffffffu;
  const std::string where = absl::StrCat("frame ", frames_, " (type ", type, ", stream ", stream,
                                         ", ", length, " bytes)");
  if (type != kData && type != kHeaders && type != kContinuation &&
      length > limits_.max_control_frame_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(where, " is longer than the ", limits_.max_control_frame_bytes,
                     "-byte frames the daemon accepts but for DATA and header blocks"));
  }
  if (type == kPushPromise) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is a PUSH_PROMISE, which only a server may send"));
  }
  if (in_header_block_) {
    if (type != kContinuation || stream != header_block_stream_) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " interrupts the header block of stream ", header_block_stream_,
                       ", which only CONTINUATION frames of that stream may follow"));
    }
  } else if (type == kContinuation) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is a CONTINUATION outside a header block"));
  }
  if (type == kHeaders || type == kContinuation) {
    if (type == kHeaders) {
      in_header_block_ = true;
      header_block_stream_ = stream;
      header_block_bytes_ = 0;
    }
    header_block_bytes_ += length;
    if (header_block_bytes_ > limits_.max_header_block_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the header block of stream ", stream, " reached ", header_block_bytes_,
          " bytes at ", where, ", over the daemon's limit of ", limits_.max_header_block_bytes));
    }
    if (flags & kEndHeaders) in_header_block_ = false;
  }
  payload_left_ = length;
  return absl::OkStatus();
}

}  // namespace blockswap::daemon
