// Whole-buffer reads and writes at an offset: the loops around pread and
// pwrite (short transfers, EINTR) written once.
#ifndef BLOCKSWAP_SHARED_BASE_FILE_IO_H_
#define BLOCKSWAP_SHARED_BASE_FILE_IO_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blockswap {

// Reads exactly `bytes` at `offset` of `fd` into `data`. `what` names the
// file in errors ("reading WHAT: ..."); a file that ends first is DATA_LOSS
// saying how much of it there was.
absl::Status ReadFully(int fd, uint64_t offset, void* data, size_t bytes, absl::string_view what);

// Writes all of `data` at `offset` of `fd`. A full file system (ENOSPC, or
// a write that makes no progress) is RESOURCE_EXHAUSTED; `what` names the
// destination in errors ("writing WHAT: ...").
absl::Status WriteFully(int fd, uint64_t offset, const void* data, size_t bytes,
                        absl::string_view what);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_FILE_IO_H_
