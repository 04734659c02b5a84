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
#include "client/core/owner_process.h"
#include "client/core/ring.h"

// Each handle remembers the process that attached (`owner`): in a child
// forked after that, its calls fail and destroying it only forgets what it
// holds (Forget: client/core/owner_process.h says why).
struct bs_client {
  std::unique_ptr<blockswap::client::Connection> connection;
  blockswap::client::OwnerProcess owner;
  void Forget() { blockswap::client::OwnerProcess::KeepInherited(connection.release()); }
};
struct bs_model {
  std::unique_ptr<blockswap::client::Model> model;
  blockswap::client::OwnerProcess owner;
  void Forget() { blockswap::client::OwnerProcess::KeepInherited(model.release()); }
};
struct bs_ring {
  std::unique_ptr<blockswap::client::Ring> ring;
  blockswap::client::OwnerProcess owner;
  void Forget() { blockswap::client::OwnerProcess::KeepInherited(ring.release()); }
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

// Non-zero (FAILED_PRECONDITION, kept for bs_last_error) when `handle` was
// inherited across a fork: `if (int code = Inherited(ring, "bs_ring_load")) return code;`.
template <typename Handle>
int Inherited(const Handle* handle, const char* what) {
  if (!handle->owner.forked()) return BS_OK;
  return Report(handle->owner.Check(what));
}

// For the functions that return a value instead of a code: true (and the
// error kept for bs_last_error) when `handle` is NULL or was inherited.
template <typename Handle>
bool Unusable(const Handle* handle, const char* what) {
  return handle == nullptr || Inherited(handle, what) != BS_OK;
}

// Destroys `handle`; in a forked child frees only the handle itself.
template <typename Handle>
void Destroy(Handle* handle) {
  if (handle != nullptr && handle->owner.forked()) handle->Forget();
  delete handle;
}

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

// What every call on a handle does first: INVALID_ARGUMENT for a NULL one
// ("<what>: NULL <noun>"), the refusal of a handle inherited across a fork;
// then `body` (given the handle, returning absl::Status), with no exception
// crossing the ABI.
template <typename Handle, typename Body>
int OnHandle(Handle* handle, const char* what, const char* noun, Body&& body) {
  if (handle == nullptr) {
    return Report(absl::InvalidArgumentError(absl::StrCat(what, ": NULL ", noun)));
  }
  if (int code = Inherited(handle, what)) return code;
  return Guard([&] { return body(*handle); });
}

}  // namespace blockswap::client::c_api

#endif  // BLOCKSWAP_CLIENT_C_API_C_API_INTERNAL_H_
