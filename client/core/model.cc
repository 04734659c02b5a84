#include "client/core/model.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "shared/protocol/grpc_status.h"
#include "shared/base/status.h"

namespace blockswap::client {

namespace {

// The SHA-256 of block `spec`'s flat bytes as the daemon will see them
// (tensors at their offsets, zero padding), without packing them first.
Sha256Digest HashBlock(const BlockSpec& spec, const std::vector<TensorUpload>& tensors) {
  static constexpr std::byte kZeros[4096] = {};
  Sha256 hash;
  auto pad = [&](uint64_t bytes) {
    for (; bytes > 0; bytes -= std::min<uint64_t>(bytes, sizeof(kZeros))) {
      hash.Update(kZeros, std::min<uint64_t>(bytes, sizeof(kZeros)));
    }
  };
  uint64_t at = 0;  // PackBlock places tensors in order, each after the last
  for (size_t t = 0; t < tensors.size(); ++t) {
    pad(spec.tensors[t].offset - at);
    hash.Update(tensors[t].data, spec.tensors[t].length);
    at = spec.tensors[t].offset + spec.tensors[t].length;
  }
  pad(spec.bytes - at);
  return hash.Finish();
}

// Hashes every block on every core: a later process of the same weights
// learns what the daemon holds before it copies anything.
std::vector<Sha256Digest> HashBlocks(const ModelLayout& layout,
                                     const std::vector<std::vector<TensorUpload>>& blocks) {
  std::vector<Sha256Digest> hashes(blocks.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t b = next++; b < blocks.size(); b = next++) {
      hashes[b] = HashBlock(layout.blocks[b], blocks[b]);
    }
  };
  const size_t threads =
      std::min<size_t>(blocks.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();
  return hashes;
}

}  // namespace

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

  // Warm first: the model itself, else the blocks the daemon holds already
  // (uploaded by trainers streaming other subsets, or read from a file).
  const std::vector<Sha256Digest> hashes = HashBlocks(layout, blocks);
  absl::StatusOr<std::unique_ptr<Model>> opened = Open(connection, ModelId(layout, hashes));
  if (opened.ok() || !absl::IsNotFound(opened.status())) return opened;
  v1::HeldBlocksRequest query;
  query.set_session_token(connection.token());
  for (size_t b = 0; b < blocks.size(); ++b) {
    query.add_block_ids(BlockId(layout.blocks[b], hashes[b]));
  }
  v1::HeldBlocksReply held;
  auto query_context = Connection::Context();
  grpc::Status asked = connection.stub().HeldBlocks(query_context.get(), query, &held);
  if (!asked.ok() && asked.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
    return Connection::CallError(asked, "asking which blocks the daemon holds");
  }
  if (asked.ok() && held.held_size() != static_cast<int>(blocks.size())) {
    return absl::DataLossError("the daemon's held blocks do not match the layout");
  }

  v1::BeginUploadRequest begin;
  begin.set_session_token(connection.token());
  begin.set_name(std::string(name));
  *begin.mutable_layout() = LayoutToProto(layout);
  std::vector<size_t> uploaded;  // positions of the blocks sent, in order
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (asked.ok() && held.held(b)) {
      begin.add_held_blocks(static_cast<uint32_t>(b));
      begin.add_held_block_hashes(reinterpret_cast<const char*>(hashes[b].data()),
                                  hashes[b].size());
    } else {
      uploaded.push_back(b);
    }
  }
  v1::BeginUploadReply staging_reply;
  auto context = Connection::Context();
  grpc::Status began = connection.stub().BeginUpload(context.get(), begin, &staging_reply);
  if (!began.ok()) return Connection::CallError(began, "starting the upload");
  if (staging_reply.block_offsets_size() != static_cast<int>(uploaded.size())) {
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
    for (size_t i = 0; i < uploaded.size(); ++i) {
      const size_t b = uploaded[i];
      std::byte* block = base + staging_reply.block_offsets(i);
      const BlockSpec& spec = layout.blocks[b];
      if (staging_reply.block_offsets(i) + spec.bytes > mapping.size()) {
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
  connection.RecordModelHandle(model->session_token_, model->id_, model->handle_);
  BLOCKSWAP_ASSIGN_OR_RETURN(model->layout_, LayoutFromProto(reply.layout()));
  const size_t blocks = model->layout_.blocks.size();
  if (static_cast<size_t>(reply.block_masters_size()) != blocks ||
      static_cast<size_t>(reply.block_master_bytes_size()) != blocks) {
    return absl::DataLossError(
        absl::StrCat("the daemon sent ", reply.block_masters_size(), " block masters for ", blocks,
                     " blocks (a daemon older than per-block masters sends none: upgrade it)"));
  }
  // A daemon from before trainer copies says nothing of staging: its
  // masters count as staged (never pinned by this process).
  const bool staging_said = static_cast<size_t>(reply.block_master_staged_size()) == blocks;
  if (!staging_said && reply.block_master_staged_size() != 0) {
    return absl::DataLossError(absl::StrCat("the daemon said whether ",
                                            reply.block_master_staged_size(),
                                            " masters are staged for ", blocks, " blocks"));
  }
  // The batches in the order the daemon sent them; one mapping per distinct
  // descriptor, shared by the positions of equal blocks.
  std::map<uint64_t, std::vector<UniqueFd>> batches;
  std::map<std::pair<uint64_t, uint32_t>, size_t> mapped;
  model->masters_.reserve(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    const v1::FdRef& ref = reply.block_masters(b);
    const uint64_t file_bytes = reply.block_master_bytes(b);
    if (file_bytes < model->layout_.blocks[b].bytes) {
      return absl::DataLossError(absl::StrCat("the master of block ", b, " has ", file_bytes,
                                              " bytes, fewer than the block's ",
                                              model->layout_.blocks[b].bytes));
    }
    auto [at, inserted] = mapped.try_emplace({ref.batch(), ref.index()}, model->masters_.size());
    if (inserted) {
      auto batch = batches.find(ref.batch());
      if (batch == batches.end()) {
        BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<UniqueFd> fds, connection.ReceiveFds(ref.batch()));
        batch = batches.emplace(ref.batch(), std::move(fds)).first;
      }
      if (ref.index() >= batch->second.size() || !batch->second[ref.index()].valid()) {
        return absl::DataLossError(absl::StrCat("block ", b, " names descriptor ", ref.index(),
                                                " of batch ", ref.batch(), ", which has ",
                                                batch->second.size()));
      }
      BLOCKSWAP_ASSIGN_OR_RETURN(
          SharedMemory master,
          SharedMemory::Adopt(std::move(batch->second[ref.index()]), file_bytes));
      BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, master.Map(Access::kReadOnly));
      model->masters_.push_back(std::make_shared<MasterView>(
          std::move(mapping), !staging_said || reply.block_master_staged(b)));
    }
    model->block_mapping_.push_back(at->second);
  }
  return model;
}

const std::byte* Model::master(uint32_t block) const {
  if (block >= block_mapping_.size()) return nullptr;
  return masters_[block_mapping_[block]]->data();
}

std::shared_ptr<MasterView> Model::master_view(uint32_t block) const {
  if (block >= block_mapping_.size()) return nullptr;
  return masters_[block_mapping_[block]];
}

}  // namespace blockswap::client
