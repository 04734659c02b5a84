// What a client may make the daemon buffer before a request is complete,
// checked on the bytes it sends, ahead of gRPC.
//
// gRPC 1.51 (Debian's, and the wheel's copy) buffers a header block across
// CONTINUATION frames without bound before it parses it (the class of
// CVE-2023-33953), and nothing newer is packaged for us. The guard reads
// the client's byte stream as HTTP/2 frames (RFC 9113 §4.1: a 9-byte header
// of length, type, flags and stream, then the payload) without keeping any
// of it, and refuses
//   - a frame other than DATA longer than `max_control_frame_bytes` (gRPC
//     reads some whole before it acts on them: a GOAWAY's debug data, for
//     one). DATA frames are not bounded here: gRPC parses their payload as
//     it arrives, its flow-control windows bound what a peer may send ahead
//     of the application, and its own clients send DATA frames longer than
//     the SETTINGS_MAX_FRAME_SIZE its server advertises (2^22 - 1);
//   - a header block (HEADERS, then CONTINUATION frames up to END_HEADERS)
//     longer than `max_header_block_bytes` in all;
//   - a frame other than the CONTINUATION of the same stream inside an open
//     header block, a CONTINUATION outside one, a PUSH_PROMISE (which only a
//     server sends): protocol errors (§6.10, §8.4) that gRPC would answer by
//     closing the connection anyway.
// A refused connection must be closed, never trimmed: dropping a frame
// would desynchronise the HPACK state both ends keep.
//
// Pure and single-threaded; a few words of state per connection.
#ifndef BLOCKSWAP_DAEMON_SERVER_HTTP2_FRAME_GUARD_H_
#define BLOCKSWAP_DAEMON_SERVER_HTTP2_FRAME_GUARD_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blockswap::daemon {

struct Http2Limits {
  // The frames that control a connection take a few bytes (SETTINGS 6 a
  // parameter, PING 8, WINDOW_UPDATE 4); RFC 9113's smallest frame limit.
  uint32_t max_control_frame_bytes = 16384;
  // A blockswap request's headers take a few hundred bytes. gRPC is told the
  // same as its metadata limit (GRPC_ARG_MAX_METADATA_SIZE, advertised as
  // SETTINGS_MAX_HEADER_LIST_SIZE), which bounds the block once decoded.
  uint32_t max_header_block_bytes = 32 << 10;
};

class Http2FrameGuard {
 public:
  explicit Http2FrameGuard(Http2Limits limits) : limits_(limits) {}

  // Reads the next bytes the client sent (the client preface first).
  // RESOURCE_EXHAUSTED (over a limit) or INVALID_ARGUMENT (not HTTP/2 as a
  // client may send it), naming what and where, at the first byte that
  // breaks a rule; every later call returns the same error.
  absl::Status Inspect(absl::string_view bytes);

 private:
  absl::Status Fail(absl::Status error);
  // A frame header is complete in header_: checks it, starts its payload.
  absl::Status OnFrameHeader();

  const Http2Limits limits_;
  absl::Status error_;
  size_t preface_seen_ = 0;  // bytes of the client preface read so far
  std::array<uint8_t, 9> header_{};
  size_t header_seen_ = 0;
  uint64_t payload_left_ = 0;  // of the current frame, still to come
  uint64_t frames_ = 0;        // frames read, to say where a rule broke
  // The header block open, if any: its stream and its bytes so far.
  bool in_header_block_ = false;
  uint32_t header_block_stream_ = 0;
  uint64_t header_block_bytes_ = 0;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_HTTP2_FRAME_GUARD_H_
