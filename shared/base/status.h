// Status helpers used across every internal module boundary.
//
// Debian's abseil (20220623) ships no RETURN_IF_ERROR / ASSIGN_OR_RETURN, so
// blockswap defines its own, prefixed like every project macro.
#ifndef BLOCKSWAP_SHARED_BASE_STATUS_H_
#define BLOCKSWAP_SHARED_BASE_STATUS_H_


#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define BLOCKSWAP_INTERNAL_CONCAT2(a, b) a##b
#define BLOCKSWAP_INTERNAL_CONCAT(a, b) BLOCKSWAP_INTERNAL_CONCAT2(a, b)

// Returns the status of `expr` from the enclosing function unless it is OK.
#define BLOCKSWAP_RETURN_IF_ERROR(expr)                         \
  do {                                                          \
    ::absl::Status blockswap_status_ = (expr);                  \
    if (!blockswap_status_.ok()) return blockswap_status_;      \
  } while (false)

// `lhs = value of expr`, or returns its error status. `lhs` may declare a
// variable: BLOCKSWAP_ASSIGN_OR_RETURN(auto fd, UniqueFd::Open(...));
#define BLOCKSWAP_ASSIGN_OR_RETURN(lhs, expr) \
  BLOCKSWAP_INTERNAL_ASSIGN_OR_RETURN(        \
      BLOCKSWAP_INTERNAL_CONCAT(blockswap_statusor_, __LINE__), lhs, expr)

#define BLOCKSWAP_INTERNAL_ASSIGN_OR_RETURN(statusor, lhs, expr) \
  auto statusor = (expr);                                        \
  if (!statusor.ok()) return std::move(statusor).status();       \
  lhs = std::move(statusor).value()

namespace blockswap {

// An error status for a failed system call: the code follows errno (ENOENT is
// NOT_FOUND, ENOSPC/ENOMEM are RESOURCE_EXHAUSTED, ...) and the message is
// "<context>: <strerror>".
absl::Status ErrnoStatus(int error_number, absl::string_view context);

// Prefixes `status`'s message with `context` ("while importing ring 3: ..."),
// keeping its code and payloads.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_STATUS_H_
