// The descriptor side channel's wire format, shared by blockswapd and the
// client library (gRPC cannot carry file descriptors: docs/rules.md,
// "Descriptors over a side channel").
//
// The side channel is a second connection to the daemon's own socket path.
// The client opens it with one SideChannelHello; from then on only the daemon
// writes: one FdBatchHeader per sendmsg, with exactly `fd_count` descriptors
// attached as SCM_RIGHTS. A reply on gRPC names those descriptors by
// FdRef{batch, index}.
//
// Both ends run on the same host, so integers travel in host byte order.
#ifndef BLOCKSWAP_SHARED_PROTOCOL_SIDE_CHANNEL_WIRE_H_
#define BLOCKSWAP_SHARED_PROTOCOL_SIDE_CHANNEL_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace blockswap {

// The first four bytes the daemon sees tell the two kinds of connection
// apart: a gRPC client starts with the HTTP/2 preface ("PRI * HTTP/2.0..."),
// a side channel with this magic.
inline constexpr char kSideChannelHelloMagic[4] = {'B', 'S', 'F', 'D'};
inline constexpr uint32_t kSideChannelVersion = 1;
// A session token: RandomToken()'s 32 lowercase hex digits; the wire accepts
// any 32 printable ASCII bytes.
inline constexpr size_t kSessionTokenBytes = 32;

struct SideChannelHello {
  char magic[4];     // kSideChannelHelloMagic
  uint32_t version;  // kSideChannelVersion
  char token[kSessionTokenBytes];
  uint8_t reserved[8];  // zero; a later version may give them a meaning
};
static_assert(sizeof(SideChannelHello) == 48, "the hello is 48 bytes on the wire");

// The header of one descriptor batch.
inline constexpr char kFdBatchMagic[4] = {'B', 'S', 'F', 'B'};
// The empty batch the daemon's session layer sends once it has taken the
// side channel: until the client has seen it, a call that names descriptors
// could find the session without a channel. Replies number theirs from 1.
inline constexpr uint64_t kSideChannelAcceptedBatch = 0;
struct FdBatchHeader {
  char magic[4];      // kFdBatchMagic
  uint32_t fd_count;  // descriptors attached to this very message
  uint64_t batch;     // FdRef.batch of the reply that names them
};
static_assert(sizeof(FdBatchHeader) == 16, "a batch header is 16 bytes on the wire");

// A file offer: the client opens a file it wants registered and sends its
// descriptor to the daemon on the side channel with this header (the one
// message a client writes after its hello), then names `offer` in
// RegisterFileRequest.file_offers. The daemon takes the offers waiting on the
// channel when that call arrives, so the client sends each offer before the
// call that names it.
inline constexpr char kFileOfferMagic[4] = {'B', 'S', 'F', 'O'};
struct FileOfferHeader {
  char magic[4];      // kFileOfferMagic
  uint32_t fd_count;  // always 1
  uint64_t offer;     // chosen by the client, unique within its session
};
static_assert(sizeof(FileOfferHeader) == 16, "a file offer header is 16 bytes on the wire");

inline bool IsValidSessionToken(absl::string_view token) {
  if (token.size() != kSessionTokenBytes) return false;
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

// The hello's 48 bytes for `token`; INVALID_ARGUMENT when the token is not
// 32 printable ASCII bytes.
inline absl::StatusOr<std::string> EncodeSideChannelHello(absl::string_view token) {
  if (!IsValidSessionToken(token)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a session token is ", kSessionTokenBytes, " printable ASCII bytes; got ", token.size(),
        " bytes", token.size() == kSessionTokenBytes ? " with a non-printable byte" : ""));
  }
  SideChannelHello hello{};
  std::memcpy(hello.magic, kSideChannelHelloMagic, sizeof(hello.magic));
  hello.version = kSideChannelVersion;
  std::memcpy(hello.token, token.data(), kSessionTokenBytes);
  return std::string(reinterpret_cast<const char*>(&hello), sizeof(hello));
}

// The token of a hello, after checking every field of it.
inline absl::StatusOr<std::string> DecodeSideChannelHello(absl::string_view bytes) {
  if (bytes.size() != sizeof(SideChannelHello)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "side-channel hello of ", bytes.size(), " bytes (must be ", sizeof(SideChannelHello), ")"));
  }
  SideChannelHello hello;
  std::memcpy(&hello, bytes.data(), sizeof(hello));
  if (std::memcmp(hello.magic, kSideChannelHelloMagic, sizeof(hello.magic)) != 0) {
    return absl::InvalidArgumentError("side-channel hello does not start with \"BSFD\"");
  }
  if (hello.version != kSideChannelVersion) {
    return absl::InvalidArgumentError(absl::StrCat("side-channel hello of version ", hello.version,
                                                   " (this blockswapd speaks version ",
                                                   kSideChannelVersion, ")"));
  }
  for (uint8_t byte : hello.reserved) {
    if (byte != 0) {
      return absl::InvalidArgumentError(
          "side-channel hello has non-zero reserved bytes (a newer client?)");
    }
  }
  absl::string_view token(hello.token, kSessionTokenBytes);
  if (!IsValidSessionToken(token)) {
    return absl::InvalidArgumentError(
        "side-channel hello carries a session token with a non-printable byte");
  }
  return std::string(token);
}

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_PROTOCOL_SIDE_CHANNEL_WIRE_H_
