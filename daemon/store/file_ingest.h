// Registering a model straight from a safetensors file (or a sharded set): one
// sequential pass over the file into the master, with the id of
// docs/protocol.md ("Objects"), so the same blocks give the same model whether
// uploaded or read.
//
// Access (docs/store.md, "Models from files"): the daemon reads only
// descriptors the client opened and passed over its side channel (SCM_RIGHTS,
// daemon/session/file_offers.h), never a path: the kernel checked the client's
// own permissions when it opened the file, so the daemon reads exactly what the
// client could. A descriptor must be a regular file opened for reading (not
// O_PATH, not write-only); anything else is refused naming what it is.
//
// Reading: the header with two preads, then per block runs of up to 1 MiB
// (and 1024 tensors) adjacent in the file: one preadv lays a run out in a
// per-thread buffer as the block's flat image (zero padding between
// tensors), the block's SHA-256 is updated from it while it is in the core's
// cache, and one pwrite puts it into the master (tmpfs pages are allocated by
// the write, not zeroed first). Blocks run on up to kMaxWorkerThreads threads
// in the order of their bytes in the file, so the pass is sequential. No mmap
// of the client's file: a file truncated meanwhile is a DATA_LOSS error, not
// a SIGBUS in the daemon.
//
// Known files: a registration remembers (device, inode, size, mtime, ctime of
// every shard; pattern, selector, rank) -> model ids, so registering the same
// unchanged file again reads nothing while its models are in the store.
// Concurrent registrations of the same key wait for the first one (one read),
// as ModelStore::Register coalesces uploads.
//
// Thread-safe; Register blocks (I/O, hashing): never call it on a reactor.
#ifndef BLOCKSWAP_DAEMON_STORE_FILE_INGEST_H_
#define BLOCKSWAP_DAEMON_STORE_FILE_INGEST_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/store/file_ingest_plan.h"
#include "daemon/store/model_store.h"
#include "shared/base/cancellation.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

// At most this many shards in one registration.
inline constexpr size_t kMaxShards = 4096;
// The headers of one registration's shards together, checked from their
// length prefixes before any is read: each header is at most
// kSafetensorsMaxHeaderBytes and kSafetensorsMaxTensors, and this bounds what
// the shards of one registration make the daemon parse and hold (a real
// sharded checkpoint's headers take a few MB in all).
inline constexpr uint64_t kMaxHeaderBytesPerRegistration = uint64_t{256} << 20;

struct IngestResult {
  std::shared_ptr<const Model> model;   // the streamed blocks
  std::shared_ptr<const Model> extras;  // one block of the other tensors; null if none
  bool read_file = false;  // this call read the file (false: known, or read by a concurrent call)
};

struct FileIngestStats {
  uint64_t reads = 0;       // passes over a file (or sharded set)
  uint64_t bytes_read = 0;  // tensor bytes those passes read
  uint64_t known = 0;       // registrations answered without reading
};

class FileIngest {
 public:
  // `store` must outlive this.
  explicit FileIngest(ModelStore& store) : store_(store) {}

  // Registers the model of `files` (one file, or every shard in the order the
  // client gives) grouped by `spec`. `name` is informational (empty: the
  // first file's base name). Errors: INVALID_ARGUMENT for a bad descriptor,
  // header or spec (naming the file), NOT_FOUND for a pattern or selector that
  // matches nothing, RESOURCE_EXHAUSTED from the store's capacity checks,
  // DATA_LOSS for a file cut short while reading. Nothing is left behind on
  // failure. `uid` and `gid` (the caller's, as SO_PEERCRED says) are recorded
  // as a registrant of the model and its extras, from these files, whether
  // this call read them or they were known. Asks `cancellation` while it
  // parses each header, before each block and while it waits for a
  // concurrent read, and returns its error when it has one.
  absl::StatusOr<IngestResult> Register(std::vector<UniqueFd> files, const IngestSpec& spec,
                                        absl::string_view name, uid_t uid = 0, gid_t gid = 0,
                                        const Cancellation& cancellation = {});

  FileIngestStats stats() const;

 private:
  struct Known {
    std::string model_id;
    std::string extras_id;  // empty: no extras
  };
  struct OpenFile {
    UniqueFd fd;
    std::string path;  // the daemon's view (/proc/self/fd), for messages and `source`
    uint64_t size = 0;
  };

  absl::StatusOr<IngestResult> Read(const std::vector<OpenFile>& files, const IngestSpec& spec,
                                    absl::string_view name, const Registrant& registrant,
                                    const Cancellation& cancellation);
  // The models of a known key if the store still has them all.
  bool Lookup(const std::string& key, IngestResult* result) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ModelStore& store_;
  mutable absl::Mutex mu_;
  absl::CondVar done_;  // signalled when in_progress_ shrinks
  std::map<std::string, Known> known_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> in_progress_ ABSL_GUARDED_BY(mu_);
  FileIngestStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_FILE_INGEST_H_
