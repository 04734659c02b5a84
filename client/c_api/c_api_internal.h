// What the C ABI's translation units share: the handle structs behind the
// opaque types of blockswap.h, and the error convention (a code returned, the
// message kept per thread). Private to libblockswap.so.
#ifndef BLOCKSWAP_CLIENT_C_API_C_API_INTERNAL_H_
#define BLOCKSWAP_CLIENT_C_API_C_API_INTERNAL_H_

#include <exception>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "blockswap/blockswap.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "client/core/ring.h"

struct bs_client {
  std::unique_ptr<blockswap::client::Connection> connection;
};
struct bs_model {
  std::unique_ptr<blockswap::client::Model> model;
};
struct bs_ring {
  std::unique_ptr<blockswap::client::Ring> ring;
};

namespace blockswap::client::c_api {

// This thread's last failure message (bs_last_error).
std::string& LastError();

// Returns the code of `status` and keeps its message for bs_last_error.
inline int Report(const absl::Status& status) {
  if (status.ok()) {
    LastError().clear();
    return BS_OK;
  }
  LastError() = std::string(status.message());
  return static_cast<int>(status.code());
}

inline int InvalidArgument(const char* what) { return Report(absl::InvalidArgumentError(what)); }

// Runs `body` (returning absl::Status); no exception crosses the C ABI.
template <typename Body>
int Guard(Body&& body) {
  try {
    return Report(body());
  } catch (const std::exception& e) {
    return Report(absl::InternalError(absl::StrCat("unexpected exception: ", e.what())));
  } catch (...) {
    return Report(absl::InternalError("unexpected exception"));
  }
}

}  // namespace blockswap::client::c_api

#endif  // BLOCKSWAP_CLIENT_C_API_C_API_INTERNAL_H_
