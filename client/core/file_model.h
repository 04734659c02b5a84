// Registering a model from safetensors files the daemon reads itself
// (docs/store.md, "Models from files"): this process opens the file
// (or every shard listed by a "*.index.json"), offers the descriptors to the
// daemon on the side channel, and gets back the model and its extras, opened.
#ifndef BLOCKSWAP_CLIENT_CORE_FILE_MODEL_H_
#define BLOCKSWAP_CLIENT_CORE_FILE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/core/connection.h"
#include "client/core/model.h"

namespace blockswap::client {

struct FileRegistrationOptions {
  std::string block_pattern = {};  // RE2 with one capture group: the block index
  std::string select = {};         // RE2 searched in full names; empty: all
  uint32_t select_rank = 0;   // 0: any
  std::string name = {};      // informational; empty: the file's name
};

struct FileRegistration {
  std::unique_ptr<Model> model;   // the streamed blocks
  std::unique_ptr<Model> extras;  // the other tensors (one block), or null
  bool read_file = false;         // the daemon read the file for this call
};

// `path` is a .safetensors file, or a sharded checkpoint's index JSON (a path
// ending in ".json"), whose shards are opened beside it in sorted order.
// Each must be a regular file: anything else (a FIFO, whose open() would wait
// for a writer, a socket, a device, a directory) is INVALID_ARGUMENT at once,
// naming what it is (shared/base/regular_file.h).
absl::StatusOr<FileRegistration> RegisterFile(Connection& connection, absl::string_view path,
                                              const FileRegistrationOptions& options);

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_FILE_MODEL_H_
