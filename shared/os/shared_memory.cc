#include "shared/os/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap {

Mapping::~Mapping() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

namespace {

// mmap says ENOMEM both for memory and for a process at its mappings'
// limit: the note that names the limit and its value.
std::string MapCountNote() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  std::string value;
  if (!(in >> value)) value = "unknown";
  return absl::StrCat(" (out of memory, or at the process's mappings limit: vm.max_map_count is ",
                      value, ")");
}

}  // namespace

absl::StatusOr<Mapping> Mapping::Map(const UniqueFd& fd, size_t size, Access access,
                                     bool populate) {
  if (size == 0) return absl::InvalidArgumentError("cannot map 0 bytes");
  int prot = access == Access::kReadWrite ? PROT_READ | PROT_WRITE : PROT_READ;
  int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  void* data = ::mmap(nullptr, size, prot, flags, fd.get(), 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    return ErrnoStatus(error, absl::StrCat("mapping ", size, " bytes of fd ", fd.get(),
                                           access == Access::kReadWrite ? " read-write"
                                                                        : " read-only",
                                           error == ENOMEM ? MapCountNote() : ""));
  }
  return Mapping(data, size);
}

absl::StatusOr<SharedMemory> SharedMemory::Create(absl::string_view name, size_t size) {
  if (size == 0) return absl::InvalidArgumentError("shared memory of 0 bytes");
  std::string label = absl::StrCat("blockswap:", name);
  int raw = ::memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("memfd_create ", label));
  UniqueFd fd(raw);
  // fallocate reserves the tmpfs pages now; ftruncate alone would defer the
  // failure to a SIGBUS at first touch.
  int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(size));
  if (rc != 0) {
    return ErrnoStatus(rc, absl::StrCat("reserving ", size, " bytes of shared memory for ",
                                        label));
  }
  // The size is part of the contract with every process that maps it.
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    return ErrnoStatus(errno, absl::StrCat("sealing the size of ", label));
  }
  return SharedMemory(std::move(fd), size);
}

absl::Status SharedMemory::SealAgainstNewWriters() const {
  if (::fchmod(fd_.get(), 0400) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chmod 0400 of shared memory fd ", fd_.get()));
  }
  if (::fcntl(fd_.get(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0) {
    return ErrnoStatus(
        errno, absl::StrCat("sealing shared memory fd ", fd_.get(), " against new writers"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SharedMemory> SharedMemory::Adopt(UniqueFd fd, size_t size) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "fstat of received memory");
  if (static_cast<size_t>(st.st_size) < size) {
    return absl::InvalidArgumentError(absl::StrCat("received memory object has ", st.st_size,
                                                   " bytes, expected at least ", size));
  }
  return SharedMemory(std::move(fd), size);
}

}  // namespace blockswap
