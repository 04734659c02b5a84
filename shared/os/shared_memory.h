// Shared-memory objects and mappings.
//
// Boost.Interprocess was considered: its shared_memory_object/mapped_region
// report errors by exception and cannot adopt a descriptor received over
// SCM_RIGHTS, which is how every segment reaches a client here, so the two
// small types below use memfd_create/mmap directly.
#ifndef BLOCKSWAP_SHARED_OS_SHARED_MEMORY_H_
#define BLOCKSWAP_SHARED_OS_SHARED_MEMORY_H_

#include <cstddef>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "shared/base/unique_fd.h"

namespace blockswap {

enum class Access { kReadOnly, kReadWrite };

// One mmap()ed range; unmapped when destroyed. Move-only.
class Mapping {
 public:
  Mapping() = default;
  ~Mapping();
  Mapping(Mapping&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  // Maps `size` bytes of `fd` from offset 0, shared. `populate` pre-faults the
  // pages (MAP_POPULATE) so that first-touch costs are paid here.
  static absl::StatusOr<Mapping> Map(const UniqueFd& fd, size_t size, Access access,
                                     bool populate = false);

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Mapping(void* data, size_t size) : data_(data), size_(size) {}
  void* data_ = nullptr;
  size_t size_ = 0;
};

// An anonymous shared-memory file (memfd), sized and reserved up front so that
// a full tmpfs is an error here instead of a SIGBUS at first touch.
class SharedMemory {
 public:
  SharedMemory() = default;  // empty; assign from Create or Adopt
  // `name` shows in /proc/PID/fd and /proc/PID/maps; it is not a path.
  static absl::StatusOr<SharedMemory> Create(absl::string_view name, size_t size);
  // Adopts a descriptor received from another process; `size` is checked
  // against the file's real size so a short file cannot cause a SIGBUS.
  static absl::StatusOr<SharedMemory> Adopt(UniqueFd fd, size_t size);

  const UniqueFd& fd() const { return fd_; }
  size_t size() const { return size_; }
  absl::StatusOr<Mapping> Map(Access access, bool populate = false) const {
    return Mapping::Map(fd_, size_, access, populate);
  }

  // Makes the object writable only through the mappings that exist now (the
  // creator's own): mode 0400, so that reopening /proc/PID/fd/N for writing
  // is EACCES for everyone but root, and F_SEAL_FUTURE_WRITE, so that no new
  // writable mapping or write() succeeds even for a process of the owner's uid
  // that chmods it back. Call after mapping it read-write; for objects handed
  // out read-only (a word or control block only the creator writes). Objects
  // from Adopt cannot be sealed (FAILED_PRECONDITION from the kernel's EPERM).
  absl::Status SealAgainstNewWriters() const;

 private:
  SharedMemory(UniqueFd fd, size_t size) : fd_(std::move(fd)), size_(size) {}
  UniqueFd fd_;
  size_t size_ = 0;
};

inline constexpr size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_OS_SHARED_MEMORY_H_
