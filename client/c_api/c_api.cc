// The C ABI (include/blockswap/blockswap.h) over the internal C++ classes:
// connection, models and rings (the scheduler is in c_api_scheduler.cc).
#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "blockswap/blockswap.h"
#include "client/c_api/c_api_internal.h"
#include "client/core/block_match.h"
#include "client/core/file_model.h"
#include "shared/base/dtype.h"
#include "shared/base/status.h"
#include "shared/protocol/model_layout.h"

using blockswap::client::c_api::Destroy;
using blockswap::client::c_api::Guard;
using blockswap::client::c_api::Inherited;
using blockswap::client::c_api::InvalidArgument;
using blockswap::client::c_api::Report;
using blockswap::client::c_api::Unusable;

namespace blockswap::client::c_api {
std::string& LastError() {
  thread_local std::string last_error;
  return last_error;
}
}  // namespace blockswap::client::c_api

namespace {

absl::Duration Millis(uint32_t timeout_ms) { return absl::Milliseconds(timeout_ms); }

}  // namespace

extern "C" {

uint32_t bs_abi_version(void) { return BS_ABI_VERSION; }

const char* bs_last_error(void) { return blockswap::client::c_api::LastError().c_str(); }

int bs_connect(const char* socket_path, const char* client_name, bs_client** out) {
  if (out == nullptr) return InvalidArgument("bs_connect: out is NULL");
  *out = nullptr;
  return Guard([&]() -> absl::Status {
    BLOCKSWAP_RETURN_IF_ERROR(blockswap::client::OwnerProcess::CheckAttachAllowed());
    auto connection = blockswap::client::Connection::Connect(
        socket_path == nullptr ? "" : socket_path, client_name == nullptr ? "" : client_name);
    if (!connection.ok()) return connection.status();
    blockswap::client::OwnerProcess::NoteAttached();
    *out = new bs_client{*std::move(connection), {}};
    return absl::OkStatus();
  });
}

void bs_disconnect(bs_client* client) { Destroy(client); }

int bs_client_backend(const bs_client* client) {
  if (Unusable(client, "bs_client_backend")) return 0;
  return client->connection->backend_kind() == blockswap::BackendKind::kCuda ? BS_BACKEND_CUDA
                                                                             : BS_BACKEND_HOST;
}

uint32_t bs_client_device_count(const bs_client* client) {
  return Unusable(client, "bs_client_device_count")
             ? 0
             : static_cast<uint32_t>(client->connection->device_uuids().size());
}

const char* bs_client_device_uuid(const bs_client* client, uint32_t index) {
  if (Unusable(client, "bs_client_device_uuid") ||
      index >= client->connection->device_uuids().size()) {
    return nullptr;
  }
  return client->connection->device_uuids()[index].c_str();
}

int bs_model_register(bs_client* client, const char* name, const bs_block_desc* blocks,
                      uint32_t block_count, bs_model** out) {
  if (client == nullptr || out == nullptr || (blocks == nullptr && block_count > 0)) {
    return InvalidArgument("bs_model_register: client, blocks and out must not be NULL");
  }
  *out = nullptr;
  if (int code = Inherited(client, "bs_model_register")) return code;
  return Guard([&]() -> absl::Status {
    std::vector<std::vector<blockswap::client::TensorUpload>> uploads(block_count);
    for (uint32_t b = 0; b < block_count; ++b) {
      const bs_block_desc& block = blocks[b];
      if (block.tensors == nullptr && block.tensor_count > 0) {
        return absl::InvalidArgumentError(absl::StrCat("block ", b, ": tensors is NULL"));
      }
      for (uint32_t t = 0; t < block.tensor_count; ++t) {
        const bs_tensor_desc& tensor = block.tensors[t];
        if (tensor.name == nullptr || tensor.dtype == nullptr || tensor.data == nullptr ||
            (tensor.shape == nullptr && tensor.ndim > 0)) {
          return absl::InvalidArgumentError(
              absl::StrCat("block ", b, " tensor ", t, ": name, dtype, shape and data are needed"));
        }
        blockswap::client::TensorUpload upload;
        upload.spec.name = tensor.name;
        upload.spec.dtype = tensor.dtype;
        upload.spec.shape.assign(tensor.shape, tensor.shape + tensor.ndim);
        upload.data = tensor.data;
        uploads[b].push_back(std::move(upload));
      }
    }
    auto model = blockswap::client::Model::Register(*client->connection,
                                                    name == nullptr ? "" : name, uploads);
    if (!model.ok()) return model.status();
    *out = new bs_model{*std::move(model), {}};
    return absl::OkStatus();
  });
}

int bs_model_register_file(bs_client* client, const char* path, const bs_file_options* options,
                           bs_model** model, bs_model** extras) {
  if (client == nullptr || path == nullptr || options == nullptr ||
      options->block_pattern == nullptr || model == nullptr) {
    return InvalidArgument(
        "bs_model_register_file: client, path, options, options->block_pattern and model must "
        "not be NULL");
  }
  *model = nullptr;
  if (extras != nullptr) *extras = nullptr;
  if (int code = Inherited(client, "bs_model_register_file")) return code;
  return Guard([&]() -> absl::Status {
    blockswap::client::FileRegistrationOptions file_options;
    file_options.block_pattern = options->block_pattern;
    file_options.select = options->select == nullptr ? "" : options->select;
    file_options.select_rank = options->select_rank;
    file_options.name = options->name == nullptr ? "" : options->name;
    auto registered = blockswap::client::RegisterFile(*client->connection, path, file_options);
    if (!registered.ok()) return registered.status();
    *model = new bs_model{std::move(registered->model), {}};
    if (extras != nullptr && registered->extras != nullptr) {
      *extras = new bs_model{std::move(registered->extras), {}};
    }
    return absl::OkStatus();
  });
}

int bs_model_open(bs_client* client, const char* model_id, bs_model** out) {
  if (client == nullptr || model_id == nullptr || out == nullptr) {
    return InvalidArgument("bs_model_open: client, model_id and out must not be NULL");
  }
  *out = nullptr;
  if (int code = Inherited(client, "bs_model_open")) return code;
  return Guard([&]() -> absl::Status {
    auto model = blockswap::client::Model::Open(*client->connection, model_id);
    if (!model.ok()) return model.status();
    *out = new bs_model{*std::move(model), {}};
    return absl::OkStatus();
  });
}

void bs_model_close(bs_model* model) { Destroy(model); }

const char* bs_model_id(const bs_model* model) {
  return Unusable(model, "bs_model_id") ? nullptr : model->model->id().c_str();
}

uint32_t bs_model_block_count(const bs_model* model) {
  return Unusable(model, "bs_model_block_count") ? 0 : model->model->block_count();
}

uint64_t bs_model_block_bytes(const bs_model* model, uint32_t block) {
  if (Unusable(model, "bs_model_block_bytes") || block >= model->model->block_count()) return 0;
  return model->model->layout().blocks[block].bytes;
}

uint32_t bs_model_tensor_count(const bs_model* model, uint32_t block) {
  if (Unusable(model, "bs_model_tensor_count") || block >= model->model->block_count()) return 0;
  return static_cast<uint32_t>(model->model->layout().blocks[block].tensors.size());
}

int bs_model_tensor(const bs_model* model, uint32_t block, uint32_t tensor, bs_tensor_info* out) {
  if (model == nullptr || out == nullptr) return InvalidArgument("bs_model_tensor: NULL argument");
  if (int code = Inherited(model, "bs_model_tensor")) return code;
  const auto& blocks = model->model->layout().blocks;
  if (block >= blocks.size()) {
    return Report(absl::OutOfRangeError(
        absl::StrCat("block ", block, " out of range (model has ", blocks.size(), " blocks)")));
  }
  if (tensor >= blocks[block].tensors.size()) {
    return Report(
        absl::OutOfRangeError(absl::StrCat("tensor ", tensor, " out of range (block ", block,
                                           " has ", blocks[block].tensors.size(), ")")));
  }
  const blockswap::TensorSpec& spec = blocks[block].tensors[tensor];
  *out = bs_tensor_info{spec.name.c_str(), spec.dtype.c_str(),
                        spec.shape.data(), static_cast<uint32_t>(spec.shape.size()),
                        spec.offset,       spec.length};
  return Report(absl::OkStatus());
}

const void* bs_model_master(const bs_model* model, uint32_t block) {
  return Unusable(model, "bs_model_master") ? nullptr : model->model->master(block);
}

int bs_model_match_block(const bs_model* model, uint32_t block, const bs_tensor_desc* tensors,
                         uint32_t count, uint64_t* offsets) {
  if (model == nullptr || (count > 0 && (tensors == nullptr || offsets == nullptr))) {
    return InvalidArgument("bs_model_match_block: model, tensors and offsets must not be NULL");
  }
  if (int code = Inherited(model, "bs_model_match_block")) return code;
  return Guard([&]() -> absl::Status {
    const auto& blocks = model->model->layout().blocks;
    if (block >= blocks.size()) {
      return absl::OutOfRangeError(
          absl::StrCat("block ", block, " out of range (model has ", blocks.size(), " blocks)"));
    }
    std::vector<blockswap::client::WantedTensor> wanted(count);
    for (uint32_t t = 0; t < count; ++t) {
      const bs_tensor_desc& tensor = tensors[t];
      if (tensor.name == nullptr || tensor.dtype == nullptr ||
          (tensor.shape == nullptr && tensor.ndim > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", t, ": name, dtype and shape are needed"));
      }
      wanted[t] = {tensor.name, tensor.dtype, absl::MakeConstSpan(tensor.shape, tensor.ndim)};
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(
        std::vector<uint64_t> found,
        blockswap::client::MatchBlock(
            blocks[block], wanted, absl::StrCat("model ", model->model->id(), " block ", block)));
    std::copy(found.begin(), found.end(), offsets);
    return absl::OkStatus();
  });
}

const char* bs_dtype_of_torch(const char* torch_name) {
  if (torch_name == nullptr) {
    InvalidArgument("bs_dtype_of_torch: torch_name is NULL");
    return nullptr;
  }
  absl::StatusOr<absl::string_view> name = blockswap::DtypeOfTorch(torch_name);
  Report(name.status());
  // The table's entries are string literals: NUL-terminated and static.
  return name.ok() ? name->data() : nullptr;
}

int bs_block_layout_bytes(const uint64_t* tensor_bytes, uint32_t count, uint64_t* out) {
  if (out == nullptr || (tensor_bytes == nullptr && count > 0)) {
    return InvalidArgument("bs_block_layout_bytes: tensor_bytes and out must not be NULL");
  }
  return Guard([&]() -> absl::Status {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        *out, blockswap::PackedBlockBytes(absl::MakeConstSpan(tensor_bytes, count)));
    return absl::OkStatus();
  });
}

int bs_ring_create(bs_client* client, const char* device_uuid, uint32_t slot_count,
                   uint64_t slot_bytes, bs_ring** out) {
  if (client == nullptr || device_uuid == nullptr || out == nullptr) {
    return InvalidArgument("bs_ring_create: client, device_uuid and out must not be NULL");
  }
  *out = nullptr;
  if (int code = Inherited(client, "bs_ring_create")) return code;
  return Guard([&]() -> absl::Status {
    auto ring =
        blockswap::client::Ring::Create(*client->connection, device_uuid, slot_count, slot_bytes);
    if (!ring.ok()) return ring.status();
    *out = new bs_ring{*std::move(ring), {}};
    return absl::OkStatus();
  });
}

int bs_ring_close(bs_ring* ring, void* stream, uint32_t timeout_ms) {
  if (ring == nullptr) return InvalidArgument("bs_ring_close: ring is NULL");
  if (int code = Inherited(ring, "bs_ring_close")) return code;
  return Guard([&] { return ring->ring->Close(stream, Millis(timeout_ms)); });
}

void bs_ring_destroy(bs_ring* ring) { Destroy(ring); }

uint32_t bs_ring_slot_count(const bs_ring* ring) {
  return Unusable(ring, "bs_ring_slot_count") ? 0 : ring->ring->shape().slot_count;
}

uint64_t bs_ring_slot_bytes(const bs_ring* ring) {
  return Unusable(ring, "bs_ring_slot_bytes") ? 0 : ring->ring->shape().slot_bytes;
}

void* bs_ring_slot(const bs_ring* ring, uint32_t slot) {
  if (Unusable(ring, "bs_ring_slot") || slot >= ring->ring->shape().slot_count) return nullptr;
  return ring->ring->slot(slot);
}

int bs_ring_load(bs_ring* ring, uint32_t slot, const bs_model* model, uint32_t block,
                 void* stream) {
  if (ring == nullptr || model == nullptr) return InvalidArgument("bs_ring_load: NULL argument");
  if (int code = Inherited(ring, "bs_ring_load")) return code;
  return Guard([&] { return ring->ring->Load(slot, *model->model, block, stream); });
}

int bs_ring_wait(bs_ring* ring, uint32_t slot, void* stream, uint32_t timeout_ms) {
  if (ring == nullptr) return InvalidArgument("bs_ring_wait: ring is NULL");
  if (int code = Inherited(ring, "bs_ring_wait")) return code;
  return Guard([&] { return ring->ring->Wait(slot, stream, Millis(timeout_ms)); });
}

int bs_ring_release(bs_ring* ring, uint32_t slot, void* stream) {
  if (ring == nullptr) return InvalidArgument("bs_ring_release: ring is NULL");
  if (int code = Inherited(ring, "bs_ring_release")) return code;
  return Guard([&] { return ring->ring->Release(slot, stream); });
}

int bs_ring_drain(bs_ring* ring, uint32_t timeout_ms) {
  if (ring == nullptr) return InvalidArgument("bs_ring_drain: ring is NULL");
  if (int code = Inherited(ring, "bs_ring_drain")) return code;
  return Guard([&] { return ring->ring->Drain(Millis(timeout_ms)); });
}

}  // extern "C"
