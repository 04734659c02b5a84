#include "client/core/model.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "shared/protocol/grpc_status.h"
#include "shared/base/status.h"

namespace blockswap::client {

absl::StatusOr<std::unique_ptr<Model>> Model::Register(
    Connection& connection, absl::string_view name,
    const std::vector<std::vector<TensorUpload>>& blocks) {
  ModelLayout layout;
  for (size_t b = 0; b < blocks.size(); ++b) {
    std::vector<TensorSpec> specs;
    for (const TensorUpload& tensor : blocks[b]) specs.push_back(tensor.spec);
    absl::StatusOr<BlockSpec> block = PackBlock(std::move(specs));
    if (!block.ok()) return Annotate(block.status(), absl::StrCat("block ", b));
    layout.blocks.push_back(*std::move(block));
  }

  v1::BeginUploadRequest begin;
  begin.set_session_token(connection.token());
  begin.set_name(std::string(name));
  *begin.mutable_layout() = LayoutToProto(layout);
  v1::BeginUploadReply staging_reply;
  auto context = Connection::Context();
  grpc::Status began = connection.stub().BeginUpload(context.get(), begin, &staging_reply);
  if (!began.ok()) return Connection::CallError(began, "starting the upload");
  if (staging_reply.block_offsets_size() != static_cast<int>(blocks.size())) {
    return absl::DataLossError("the daemon's staging area does not match the layout");
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<UniqueFd> fds,
                             connection.ReceiveFds(staging_reply.staging().batch()));
  if (fds.size() != 1) return absl::DataLossError("expected one staging descriptor");
  {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        SharedMemory staging,
        SharedMemory::Adopt(std::move(fds[0]), staging_reply.staging_bytes()));
    BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, staging.Map(Access::kReadWrite));
    auto* base = static_cast<std::byte*>(mapping.data());
    for (size_t b = 0; b < blocks.size(); ++b) {
      std::byte* block = base + staging_reply.block_offsets(b);
      const BlockSpec& spec = layout.blocks[b];
      if (staging_reply.block_offsets(b) + spec.bytes > mapping.size()) {
        return absl::DataLossError("the daemon's staging area is too small for the layout");
      }
      for (size_t t = 0; t < blocks[b].size(); ++t) {
        std::memcpy(block + spec.tensors[t].offset, blocks[b][t].data, spec.tensors[t].length);
      }
    }
    // The mapping goes here: the daemon seals the staging area at commit,
    // which it cannot while a writable mapping exists.
  }

  v1::CommitUploadRequest commit;
  commit.set_session_token(connection.token());
  commit.set_upload_id(staging_reply.upload_id());
  v1::ModelReply reply;
  auto commit_context = Connection::Context(kCommitTimeout);
  grpc::Status committed = connection.stub().CommitUpload(commit_context.get(), commit, &reply);
  if (!committed.ok()) return Connection::CallError(committed, "committing the upload");
  return FromReply(connection, reply);
}

absl::StatusOr<std::unique_ptr<Model>> Model::Open(Connection& connection,
                                                   absl::string_view model_id) {
  v1::OpenModelRequest request;
  request.set_session_token(connection.token());
  request.set_model_id(std::string(model_id));
  v1::ModelReply reply;
  auto context = Connection::Context();
  grpc::Status opened = connection.stub().OpenModel(context.get(), request, &reply);
  if (!opened.ok()) return Connection::CallError(opened, "opening the model");
  return FromReply(connection, reply);
}

absl::StatusOr<std::unique_ptr<Model>> Model::FromReply(Connection& connection,
                                                        const v1::ModelReply& reply) {
  std::unique_ptr<Model> model(new Model());
  model->id_ = reply.model_id();
  model->handle_ = reply.model_handle();
  model->session_token_ = connection.token();
  BLOCKSWAP_ASSIGN_OR_RETURN(model->layout_, LayoutFromProto(reply.layout()));
  model->master_offsets_.assign(reply.master_offsets().begin(), reply.master_offsets().end());
  if (model->master_offsets_.size() != model->layout_.blocks.size()) {
    return absl::DataLossError("the daemon's master offsets do not match the layout");
  }
  for (size_t b = 0; b < model->master_offsets_.size(); ++b) {
    if (model->master_offsets_[b] > reply.masters_bytes() ||
        reply.masters_bytes() - model->master_offsets_[b] < model->layout_.blocks[b].bytes) {
      return absl::DataLossError(absl::StrCat("block ", b, " lies outside the master file"));
    }
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<UniqueFd> fds,
                             connection.ReceiveFds(reply.masters().batch()));
  if (fds.size() != 1) return absl::DataLossError("expected one master descriptor");
  BLOCKSWAP_ASSIGN_OR_RETURN(SharedMemory masters,
                             SharedMemory::Adopt(std::move(fds[0]), reply.masters_bytes()));
  BLOCKSWAP_ASSIGN_OR_RETURN(model->masters_, masters.Map(Access::kReadOnly));
  return model;
}

const std::byte* Model::master(uint32_t block) const {
  if (block >= master_offsets_.size()) return nullptr;
  return static_cast<const std::byte*>(masters_.data()) + master_offsets_[block];
}

}  // namespace blockswap::client
