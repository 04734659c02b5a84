// Model files are regular files. A FIFO's open() waits for a writer (for
// ever, if none comes), reading a device may never end, a socket cannot be
// opened at all: each is refused at once, naming what it is, on both sides
// (the client library opens the files it offers with OpenRegularFile; the
// daemon checks each descriptor it is offered with CheckRegularFile).
#ifndef BLOCKSWAP_SHARED_BASE_REGULAR_FILE_H_
#define BLOCKSWAP_SHARED_BASE_REGULAR_FILE_H_

#include <sys/stat.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "shared/base/unique_fd.h"

namespace blockswap {

// OK for a regular file; INVALID_ARGUMENT otherwise: "PATH is a FIFO, not a
// regular file" (a socket, a character device, a block device, a directory,
// a symbolic link).
absl::Status CheckRegularFile(const struct stat& st, absl::string_view path);

// Opens `path` read-only without blocking on what it turns out to be
// (O_NONBLOCK, O_NOCTTY), then refuses anything but a regular file as
// CheckRegularFile does (a socket, which cannot be opened, as well). The
// descriptor it returns is blocking again and close-on-exec.
absl::StatusOr<UniqueFd> OpenRegularFile(const std::string& path);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_REGULAR_FILE_H_
