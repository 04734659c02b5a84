#include "client/core/file_model.h"

#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "shared/base/file_io.h"
#include "shared/base/regular_file.h"
#include "shared/base/safetensors_index.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"
#include "shared/protocol/grpc_status.h"

namespace blockswap::client {
namespace {

// An index is small; anything larger is not one.
constexpr off_t kMaxIndexBytes = off_t{64} << 20;

absl::StatusOr<std::vector<std::string>> ShardsOf(const std::string& index_path) {
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(index_path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat of ", index_path));
  if (st.st_size > kMaxIndexBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, " has ", st.st_size, " bytes: too large for an index"));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  BLOCKSWAP_RETURN_IF_ERROR(ReadFully(fd.get(), 0, text.data(), text.size(), index_path));
  auto shards = ParseSafetensorsIndex(text);
  if (!shards.ok()) return Annotate(shards.status(), index_path);
  std::string dir = index_path.substr(0, index_path.rfind('/') + 1);
  for (std::string& shard : *shards) shard = dir + shard;
  return shards;
}

}  // namespace

absl::StatusOr<FileRegistration> RegisterFile(Connection& connection, absl::string_view path,
                                              const FileRegistrationOptions& options) {
  std::string file(path);
  std::vector<std::string> paths = {file};
  if (absl::EndsWith(file, ".json")) {
    BLOCKSWAP_ASSIGN_OR_RETURN(paths, ShardsOf(file));
  }
  v1::RegisterFileRequest request;
  request.set_session_token(connection.token());
  request.set_block_pattern(options.block_pattern);
  request.set_select(options.select);
  request.set_select_rank(options.select_rank);
  request.set_name(options.name);
  for (const std::string& shard : paths) {
    BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(shard));
    BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t offer, connection.OfferFile(fd));
    request.add_file_offers(offer);
  }
  v1::RegisterFileReply reply;
  auto context = Connection::Context(kCommitTimeout);
  grpc::Status registered = connection.stub().RegisterFile(context.get(), request, &reply);
  if (!registered.ok()) {
    return Connection::CallError(registered, absl::StrCat("registering ", file));
  }
  FileRegistration result;
  result.read_file = reply.read_file();
  BLOCKSWAP_ASSIGN_OR_RETURN(result.model, Model::FromReply(connection, reply.model()));
  if (reply.has_extras()) {
    BLOCKSWAP_ASSIGN_OR_RETURN(result.extras, Model::FromReply(connection, reply.extras()));
  }
  return result;
}

}  // namespace blockswap::client
