// UniqueFd: the one owner of a file descriptor.
#ifndef BLOCKSWAP_SHARED_BASE_UNIQUE_FD_H_
#define BLOCKSWAP_SHARED_BASE_UNIQUE_FD_H_

#include <utility>

#include "absl/status/statusor.h"

namespace blockswap {

// Move-only; closes the descriptor when destroyed. Thread-compatible.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }

  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }

  // Gives up ownership without closing.
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1);

  // A second descriptor for the same open file description (close-on-exec).
  absl::StatusOr<UniqueFd> Duplicate() const;

  // A NEW open file description of the same file, opened read-only through
  // /proc/self/fd: whoever receives it cannot map it writable, which is how
  // one side of a control block is handed out read-only.
  absl::StatusOr<UniqueFd> ReopenReadOnly() const;

 private:
  int fd_ = -1;
};

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_UNIQUE_FD_H_
