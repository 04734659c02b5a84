#include "daemon/server/http2_frame_guard.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"

namespace blockswap::daemon {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

std::string Frame(uint32_t length, uint8_t type, uint8_t flags, uint32_t stream) {
  std::string out = {static_cast<char>(length >> 16), static_cast<char>(length >> 8),
                     static_cast<char>(length),       static_cast<char>(type),
                     static_cast<char>(flags),        static_cast<char>(stream >> 24),
                     static_cast<char>(stream >> 16), static_cast<char>(stream >> 8),
                     static_cast<char>(stream)};
  return out + std::string(length, 'p');
}

constexpr uint8_t kData = 0x0, kHeaders = 0x1, kSettings = 0x4, kPushPromise = 0x5,
                  kContinuation = 0x9, kEndHeaders = 0x4;

Http2Limits Small() { return {.max_control_frame_bytes = 100, .max_header_block_bytes = 250}; }

// A client's opening and one request, fed in pieces of every size from 1 to
// 40 bytes: the guard's verdict never depends on how the bytes arrive.
TEST(Http2FrameGuard, AcceptsWellFormedTrafficInPiecesOfAnySize) {
  const std::string stream = std::string(kPreface) + Frame(0, kSettings, 0, 0) +
                             Frame(90, kHeaders, 0, 1) + Frame(100, kContinuation, 0, 1) +
                             Frame(60, kContinuation, kEndHeaders, 1) + Frame(100, kData, 0, 1) +
                             Frame(100, kHeaders, kEndHeaders, 3);
  for (size_t piece = 1; piece <= 40; ++piece) {
    Http2FrameGuard guard(Small());
    for (size_t at = 0; at < stream.size(); at += piece) {
      ASSERT_TRUE(guard.Inspect(absl::string_view(stream).substr(at, piece)).ok())
          << "piece " << piece << " at " << at;
    }
  }
}

TEST(Http2FrameGuard, AHeaderBlockOverTheLimitIsRefusedNamingItsSize) {
  Http2FrameGuard guard(Small());
  ASSERT_TRUE(guard.Inspect(std::string(kPreface) + Frame(100, kHeaders, 0, 1) +
                            Frame(100, kContinuation, 0, 1))
                  .ok());
  absl::Status refused = guard.Inspect(Frame(100, kContinuation, 0, 1));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "header block of stream 1 reached 300 bytes"))
      << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "limit of 250")) << refused;
  // Refused once, refused for good: the connection is to be closed.
  EXPECT_EQ(guard.Inspect(Frame(0, kSettings, 0, 0)).code(),
            absl::StatusCode::kResourceExhausted);
}

// The limit is of each block: many small blocks are fine.
TEST(Http2FrameGuard, EachHeaderBlockCountsOnItsOwn) {
  Http2FrameGuard guard(Small());
  ASSERT_TRUE(guard.Inspect(kPreface).ok());
  for (uint32_t stream = 1; stream < 100; stream += 2) {
    ASSERT_TRUE(guard.Inspect(Frame(100, kHeaders, 0, stream) +
                              Frame(100, kContinuation, kEndHeaders, stream))
                    .ok())
        << stream;
  }
}

TEST(Http2FrameGuard, AControlFrameLongerThanTheLimitIsRefusedAtItsHeader) {
  constexpr uint8_t kGoaway = 0x7;
  Http2FrameGuard guard(Small());
  // Only the header: the guard need not wait for a payload it will refuse.
  absl::Status refused =
      guard.Inspect(std::string(kPreface) + Frame(101, kGoaway, 0, 0).substr(0, 9));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "101 bytes")) << refused;
}

// gRPC parses DATA as it arrives, and its own clients send long frames.
TEST(Http2FrameGuard, DataFramesAreNotBoundedByTheControlFrameLimit) {
  Http2FrameGuard guard(Small());
  EXPECT_TRUE(guard.Inspect(std::string(kPreface) + Frame(5000, kData, 0, 1)).ok());
}

TEST(Http2FrameGuard, ProtocolErrorsAroundHeaderBlocksAreRefused) {
  struct Case {
    const char* what;
    std::string frames;
    const char* says;
  };
  const Case cases[] = {
      {"a DATA frame inside a header block",
       Frame(10, kHeaders, 0, 1) + Frame(10, kData, 0, 1), "interrupts the header block"},
      {"a CONTINUATION of another stream",
       Frame(10, kHeaders, 0, 1) + Frame(10, kContinuation, 0, 3), "interrupts the header block"},
      {"a CONTINUATION outside a block", Frame(10, kContinuation, 0, 1), "outside a header block"},
      {"a PUSH_PROMISE", Frame(10, kPushPromise, kEndHeaders, 1), "only a server may send"},
  };
  for (const Case& c : cases) {
    Http2FrameGuard guard(Small());
    absl::Status refused = guard.Inspect(kPreface + c.frames);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_TRUE(absl::StrContains(refused.message(), c.says)) << c.what << ": " << refused;
  }
}

TEST(Http2FrameGuard, AMalformedPrefaceIsRefused) {
  Http2FrameGuard guard(Small());
  EXPECT_TRUE(guard.Inspect("PRI * HTTP/2").ok());
  EXPECT_EQ(guard.Inspect(".1\r\n").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace blockswap::daemon
