// The C ABI of the offloader (blockswap.h, "offloader"): the sequence the
// LibTorch layer and the Python package share, over the C ABI's own client,
// model, ring and scheduler, with every refusal's message written once here
// (the checks of what the trainer passes: c_api_offloader_checks.cc).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/c_api/c_api_internal.h"
#include "client/c_api/c_api_offloader_internal.h"
#include "shared/base/status.h"

using blockswap::client::c_api::CheckFrozen;
using blockswap::client::c_api::CheckNotMeta;
using blockswap::client::c_api::Guard;
using blockswap::client::c_api::Inherited;
using blockswap::client::c_api::OnOffloader;
using blockswap::client::c_api::Report;
using blockswap::client::c_api::Text;
using blockswap::client::c_api::Unusable;

namespace {

constexpr uint32_t kNone = UINT32_MAX;
constexpr double kMaxReconnectSeconds = 3600;

// The failure of a C ABI call made here, with `what` before its message.
absl::Status Failed(int code, absl::string_view what) {
  return absl::Status(static_cast<absl::StatusCode>(code), absl::StrCat(what, bs_last_error()));
}
#define BLOCKSWAP_C_CALL(what, call)                                                \
  do {                                                                              \
    if (const int blockswap_c_code = (call)) return Failed(blockswap_c_code, what); \
  } while (false)

// A UUID as the daemon spells it or without nvidia-smi's "GPU-" (torch's).
std::string BareUuid(std::string uuid) {
  absl::AsciiStrToLower(&uuid);
  if (absl::StartsWith(uuid, "gpu-")) uuid.erase(0, 4);
  return uuid;
}

std::string Listed(const std::vector<std::string>& items) {
  return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
}

// The hooks that need the scheduler refuse before the first prepare.
absl::Status RequireStarted(const bs_offloader& o) {
  if (o.scheduler != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "blockswap: the offloader was never prepared: prepare the blocks "
      "(prepare_block_devices_before_forward, PrepareBlockDevicesBeforeForward) before the "
      "first forward pass");
}

// Registers the streaming blocks' tensors (model block r is streaming rank r).
absl::Status Register(bs_offloader& o, const bs_offloader_block* blocks) {
  std::vector<std::vector<bs_tensor_desc>> tensors(o.streaming.size());
  std::vector<bs_block_desc> descs;
  for (size_t r = 0; r < o.streaming.size(); ++r) {
    const bs_offloader_block& block = blocks[o.streaming[r]];
    for (uint32_t k = 0; k < block.tensor_count; ++k) {
      const bs_offloader_tensor& t = block.tensors[k];
      BLOCKSWAP_RETURN_IF_ERROR(CheckNotMeta(o, o.streaming[r], t));
      tensors[r].push_back(bs_tensor_desc{t.name, t.dtype, t.shape, t.ndim, t.data});
    }
    descs.push_back(bs_block_desc{tensors[r].data(), static_cast<uint32_t>(tensors[r].size())});
  }
  const std::string name = o.model_name.empty() ? o.kind : o.model_name;
  BLOCKSWAP_C_CALL(absl::StrCat("registering the ", o.streaming.size(), " streaming blocks of ",
                                name.empty() ? "the model" : name, ": "),
                   bs_model_register(o.client, name.c_str(), descs.data(),
                                     static_cast<uint32_t>(descs.size()), &o.model));
  return absl::OkStatus();
}

// Opens the model of model_id, or registers model_file, and checks that it
// holds every block or only the streaming ones.
absl::Status OpenFromDaemon(bs_offloader& o) {
  if (!o.model_file.empty()) {
    const bs_file_options options{o.model_block_pattern.c_str(), o.model_select.c_str(),
                                  o.config.model_select_rank, nullptr};
    // The library's message already says "registering FILE".
    BLOCKSWAP_C_CALL(
        "BlockSwapConfig.model_file: ",
        bs_model_register_file(o.client, o.model_file.c_str(), &options, &o.model, nullptr));
  } else {
    BLOCKSWAP_C_CALL(absl::StrCat("opening model ", o.model_id, ": "),
                     bs_model_open(o.client, o.model_id.c_str(), &o.model));
  }
  const uint32_t have = bs_model_block_count(o.model);
  const uint32_t n = o.config.num_blocks;
  const auto count = static_cast<uint32_t>(o.streaming.size());
  if (have != n && have != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", bs_model_id(o.model), " has ", have, " blocks; the offloader has ",
                     n, " blocks of which ", count, " stream: the model must hold every block (", n,
                     ") or only the streaming ones (", count, ", in order)"));
  }
  o.every_block = have == n && count < n;
  return absl::OkStatus();
}

// Matches block `block`'s tensors with its model block (bs_model_match_block).
absl::Status Match(bs_offloader& o, uint32_t block, const bs_offloader_block& tensors) {
  std::vector<bs_tensor_desc> descs;
  for (uint32_t k = 0; k < tensors.tensor_count; ++k) {
    const bs_offloader_tensor& t = tensors.tensors[k];
    descs.push_back(bs_tensor_desc{t.name, t.dtype, t.shape, t.ndim, nullptr});
  }
  std::vector<uint64_t>& offsets = o.offsets[block];
  offsets.assign(descs.size(), 0);
  const int code = bs_model_match_block(o.model, o.ModelBlock(block), descs.data(),
                                        static_cast<uint32_t>(descs.size()), offsets.data());
  if (code == BS_OK) return absl::OkStatus();
  std::string hint;
  if (code == BS_NOT_FOUND && !o.name_hint.empty()) {
    hint = absl::StrCat("; ", o.name_hint);
  } else if (code == BS_FAILED_PRECONDITION && o.FromDaemon() && o.model_select.empty()) {
    hint =
        "; the file's blocks hold every tensor matching model_block_pattern unless "
        "BlockSwapConfig.model_select picks the streamed ones, e.g. model_select=r\"\\.weight$\", "
        "model_select_rank=2 for the Linears' weights";
  }
  offsets.clear();
  return absl::InvalidArgumentError(absl::StrCat(o.Label(block), ": ", bs_last_error(), hint));
}

void OnBind(void* self, uint32_t block, uint32_t slot, int loaded) {
  auto* o = static_cast<bs_offloader*>(self);
  uint32_t previous = o->slot_block.at(slot);
  if (previous == block) previous = kNone;
  o->slot_block[slot] = block;
  if (o->on_bind != nullptr) o->on_bind(o->user_data, block, slot, previous, loaded);
}

}  // namespace

extern "C" {

int bs_offloader_create(const bs_offloader_config* config, bs_offloader** out) {
  if (config == nullptr || out == nullptr) {
    return Report(absl::InvalidArgumentError("bs_offloader_create: config and out are needed"));
  }
  *out = nullptr;
  return Guard([&]() -> absl::Status {
    if (config->ring_size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("ring_size must be >= 1 (got ", config->ring_size, ")"));
    }
    if (!(config->reconnect_timeout_s >= 0 &&
          config->reconnect_timeout_s <= kMaxReconnectSeconds)) {
      return absl::InvalidArgumentError(
          absl::StrCat("reconnect_timeout_s must be within [0, 3600] seconds (got ",
                       config->reconnect_timeout_s, ")"));
    }
    if (Text(config->model_id) != "" && Text(config->model_file) != "") {
      return absl::InvalidArgumentError(
          "BlockSwapConfig.model_id and model_file are exclusive (the file's model has its own "
          "id)");
    }
    auto o = std::make_unique<bs_offloader>();
    o->kind = Text(config->kind);
    o->socket_path = Text(config->socket_path);
    o->client_name = Text(config->client_name);
    o->model_id = Text(config->model_id);
    o->model_file = Text(config->model_file);
    o->model_block_pattern = Text(config->model_block_pattern);
    o->model_select = Text(config->model_select);
    o->model_name = Text(config->model_name);
    o->name_hint = Text(config->name_hint);
    o->config = *config;
    uint32_t count = 0;
    BLOCKSWAP_C_CALL("placing the streaming blocks: ",
                     bs_place_blocks(config->num_blocks, config->blocks_to_swap, config->ring_size,
                                     nullptr, 0, &count, &o->ring_slots));
    o->streaming.resize(count);
    BLOCKSWAP_C_CALL("placing the streaming blocks: ",
                     bs_place_blocks(config->num_blocks, config->blocks_to_swap, config->ring_size,
                                     o->streaming.data(), count, &count, &o->ring_slots));
    o->rank_of.assign(config->num_blocks, kNone);
    for (uint32_t r = 0; r < count; ++r) o->rank_of[o->streaming[r]] = r;
    o->offsets.resize(config->num_blocks);
    *out = o.release();
    return absl::OkStatus();
  });
}

void bs_offloader_destroy(bs_offloader* offloader) {
  if (offloader == nullptr) return;
  if (!offloader->owner.forked()) (void)bs_offloader_close(offloader, nullptr, 5000);
  // In a forked child each destroy only forgets its handle.
  bs_scheduler_destroy(offloader->scheduler);
  bs_ring_destroy(offloader->ring);
  bs_model_close(offloader->model);
  for (bs_model* model : offloader->retired) bs_model_close(model);
  bs_disconnect(offloader->client);
  delete offloader;
}

uint32_t bs_offloader_ring_slots(const bs_offloader* offloader) {
  return Unusable(offloader, "bs_offloader_ring_slots") ? 0 : offloader->ring_slots;
}

uint32_t bs_offloader_streaming_count(const bs_offloader* offloader) {
  return Unusable(offloader, "bs_offloader_streaming_count")
             ? 0
             : static_cast<uint32_t>(offloader->streaming.size());
}

uint32_t bs_offloader_streaming_block(const bs_offloader* offloader, uint32_t rank) {
  if (Unusable(offloader, "bs_offloader_streaming_block")) return kNone;
  return rank < offloader->streaming.size() ? offloader->streaming[rank] : kNone;
}

int bs_offloader_is_streaming(const bs_offloader* offloader, uint32_t block) {
  return !Unusable(offloader, "bs_offloader_is_streaming") && offloader->Streams(block);
}

int bs_offloader_from_daemon(const bs_offloader* offloader) {
  return !Unusable(offloader, "bs_offloader_from_daemon") && offloader->FromDaemon();
}

int bs_offloader_connect(bs_offloader* offloader) {
  return OnOffloader(offloader, "bs_offloader_connect", [&](bs_offloader& o) -> absl::Status {
    if (o.client != nullptr) return absl::OkStatus();
    // The C ABI resolves an empty path (client/core/socket_path.h); its errors name the path.
    const std::string where =
        o.socket_path.empty() ? "$BLOCKSWAP_SOCKET or the default socket" : o.socket_path;
    BLOCKSWAP_C_CALL(absl::StrCat("connecting to blockswapd at ", where, ": "),
                     bs_connect(o.socket_path.empty() ? nullptr : o.socket_path.c_str(),
                                o.client_name.c_str(), &o.client));
    return absl::OkStatus();
  });
}

int bs_offloader_backend(const bs_offloader* offloader) {
  if (Unusable(offloader, "bs_offloader_backend") || offloader->client == nullptr) return 0;
  return bs_client_backend(offloader->client);
}

int bs_offloader_use_device(bs_offloader* offloader, int cuda_ordinal, const char* device_uuid,
                            const char* device_name) {
  return OnOffloader(offloader, "bs_offloader_use_device", [&](bs_offloader& o) -> absl::Status {
    if (o.client == nullptr) {
      return absl::FailedPreconditionError("bs_offloader_use_device before bs_offloader_connect");
    }
    const std::vector<std::string>& uuids = o.client->connection->device_uuids();
    const std::string device = Text(device_name);
    std::string wanted = BareUuid(Text(device_uuid));
    if (o.client->connection->backend_kind() == blockswap::BackendKind::kHost) {
      if (cuda_ordinal >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "blockswapd at ", o.socket_path.empty() ? "the default socket" : o.socket_path,
            " runs the host backend (devices ", Listed(uuids),
            "; its rings are host memory): it cannot stream to ", device,
            ". Use the cpu device, or a blockswapd with the cuda backend."));
      }
      if (wanted.empty() && !uuids.empty()) wanted = BareUuid(uuids.front());
    } else if (cuda_ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("blockswapd runs the cuda backend (devices ", Listed(uuids),
                       "): it streams to cuda devices, not ", device));
    } else if (wanted.empty()) {
      BLOCKSWAP_ASSIGN_OR_RETURN(wanted, o.client->connection->LocalDeviceUuid(cuda_ordinal));
      wanted = BareUuid(wanted);
    }
    for (const std::string& uuid : uuids) {
      if (BareUuid(uuid) == wanted) {
        o.device_uuid = uuid;
        return absl::OkStatus();
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("device ", device, " (", wanted,
                                                   ") is not one of the devices blockswapd "
                                                   "drives: ",
                                                   Listed(uuids)));
  });
}

int bs_offloader_open_model(bs_offloader* offloader, const bs_offloader_block* blocks) {
  return OnOffloader(offloader, "bs_offloader_open_model", [&](bs_offloader& o) -> absl::Status {
    if (o.client == nullptr || o.scheduler != nullptr || blocks == nullptr) {
      return absl::FailedPreconditionError(
          "bs_offloader_open_model: after bs_offloader_connect and before bs_offloader_start, "
          "with every block");
    }
    // Again after a refusal (the trainer may have fixed what was refused):
    // the model opened before stays mapped, since tensors may still view it.
    if (o.model != nullptr) o.retired.push_back(std::exchange(o.model, nullptr));
    o.every_block = false;
    for (std::vector<uint64_t>& offsets : o.offsets) offsets.clear();
    BLOCKSWAP_RETURN_IF_ERROR(o.FromDaemon() ? OpenFromDaemon(o) : Register(o, blocks));
    for (uint32_t b = 0; b < o.config.num_blocks; ++b) {
      if (!o.Streams(b) && (!o.every_block || blocks[b].tensor_count == 0)) continue;
      BLOCKSWAP_RETURN_IF_ERROR(Match(o, b, blocks[b]));
      if (!o.Streams(b)) {
        // Given to a resident block: what it copies must be frozen too.
        for (uint32_t k = 0; k < blocks[b].tensor_count; ++k) {
          BLOCKSWAP_RETURN_IF_ERROR(CheckFrozen(o, b, blocks[b].tensors[k]));
        }
      }
    }
    return absl::OkStatus();
  });
}

const char* bs_offloader_model_id(const bs_offloader* offloader) {
  if (Unusable(offloader, "bs_offloader_model_id") || offloader->model == nullptr) return "";
  return bs_model_id(offloader->model);
}

const void* bs_offloader_master(const bs_offloader* offloader, uint32_t block) {
  if (Unusable(offloader, "bs_offloader_master") || offloader->model == nullptr ||
      block >= offloader->offsets.size() ||
      (!offloader->Streams(block) && !offloader->every_block)) {
    return nullptr;
  }
  return bs_model_master(offloader->model, offloader->ModelBlock(block));
}

uint64_t bs_offloader_master_bytes(const bs_offloader* offloader, uint32_t block) {
  if (bs_offloader_master(offloader, block) == nullptr) return 0;
  return bs_model_block_bytes(offloader->model, offloader->ModelBlock(block));
}

uint64_t bs_offloader_tensor_offset(const bs_offloader* offloader, uint32_t block,
                                    uint32_t tensor) {
  if (Unusable(offloader, "bs_offloader_tensor_offset") || block >= offloader->offsets.size() ||
      tensor >= offloader->offsets[block].size()) {
    return UINT64_MAX;
  }
  return offloader->offsets[block][tensor];
}

int bs_offloader_start(bs_offloader* offloader, void* stream, bs_offloader_bind_fn on_bind,
                       void* user_data) {
  return OnOffloader(offloader, "bs_offloader_start", [&](bs_offloader& o) -> absl::Status {
    if (o.model == nullptr || o.scheduler != nullptr || o.streaming.empty()) {
      return absl::FailedPreconditionError(
          "bs_offloader_start: once, after bs_offloader_open_model, with blocks to stream");
    }
    uint64_t slot_bytes = 0;
    for (uint32_t block : o.streaming) {
      slot_bytes = std::max(slot_bytes, bs_model_block_bytes(o.model, o.ModelBlock(block)));
    }
    BLOCKSWAP_C_CALL(
        absl::StrCat("creating a ring of ", o.ring_slots, " slots of ", slot_bytes, " bytes on ",
                     o.device_uuid, ": "),
        bs_ring_create(o.client, o.device_uuid.c_str(), o.ring_slots, slot_bytes, &o.ring));
    o.slot_block.assign(o.ring_slots, kNone);
    o.on_bind = on_bind;
    o.user_data = user_data;
    const bs_scheduler_config config{o.config.num_blocks, o.config.blocks_to_swap,
                                     o.config.ring_size, o.config.forward_only,
                                     o.every_block ? 1 : 0};
    BLOCKSWAP_C_CALL(
        "creating the stream scheduler: ",
        bs_scheduler_create(o.client, o.ring, o.model, &config, stream, &OnBind, &o, &o.scheduler));
    BLOCKSWAP_C_CALL("setting the reconnect timeout: ",
                     bs_scheduler_set_reconnect_timeout(
                         o.scheduler, static_cast<uint32_t>(o.config.reconnect_timeout_s * 1000)));
    return absl::OkStatus();
  });
}

int bs_offloader_started(const bs_offloader* offloader) {
  return !Unusable(offloader, "bs_offloader_started") && offloader->scheduler != nullptr;
}

void* bs_offloader_slot(const bs_offloader* offloader, uint32_t slot) {
  if (Unusable(offloader, "bs_offloader_slot") || offloader->ring == nullptr) return nullptr;
  return bs_ring_slot(offloader->ring, slot);
}

uint64_t bs_offloader_slot_bytes(const bs_offloader* offloader) {
  if (Unusable(offloader, "bs_offloader_slot_bytes") || offloader->ring == nullptr) return 0;
  return bs_ring_slot_bytes(offloader->ring);
}

uint32_t bs_offloader_slot_of(const bs_offloader* offloader, uint32_t block) {
  if (Unusable(offloader, "bs_offloader_slot_of") || !offloader->Streams(block)) return kNone;
  return offloader->rank_of[block] % offloader->ring_slots;
}

uint32_t bs_offloader_slot_block(const bs_offloader* offloader, uint32_t slot) {
  if (Unusable(offloader, "bs_offloader_slot_block") || slot >= offloader->slot_block.size()) {
    return kNone;
  }
  return offloader->slot_block[slot];
}

int bs_offloader_prepare(bs_offloader* offloader) {
  return OnOffloader(offloader, "bs_offloader_prepare", [&](bs_offloader& o) -> absl::Status {
    if (o.scheduler == nullptr) return absl::OkStatus();
    BLOCKSWAP_C_CALL("", bs_scheduler_prepare(o.scheduler));
    return absl::OkStatus();
  });
}

int bs_offloader_wait_for_block(bs_offloader* offloader, uint32_t block) {
  return OnOffloader(
      offloader, "bs_offloader_wait_for_block", [&](bs_offloader& o) -> absl::Status {
        if (block >= o.config.num_blocks) {
          return absl::OutOfRangeError(
              absl::StrCat("block ", block, " out of range (", o.config.num_blocks, " blocks)"));
        }
        if (!o.Streams(block)) return absl::OkStatus();
        BLOCKSWAP_RETURN_IF_ERROR(RequireStarted(o));
        BLOCKSWAP_C_CALL("", bs_scheduler_wait_for_block(o.scheduler, block));
        return absl::OkStatus();
      });
}

int bs_offloader_after_forward(bs_offloader* offloader, uint32_t block) {
  return OnOffloader(offloader, "bs_offloader_after_forward", [&](bs_offloader& o) -> absl::Status {
    if (!o.Streams(block)) return absl::OkStatus();
    BLOCKSWAP_RETURN_IF_ERROR(RequireStarted(o));
    BLOCKSWAP_C_CALL("", bs_scheduler_after_forward(o.scheduler, block));
    return absl::OkStatus();
  });
}

int bs_offloader_after_backward(bs_offloader* offloader, uint32_t block) {
  return OnOffloader(offloader, "bs_offloader_after_backward",
                     [&](bs_offloader& o) -> absl::Status {
                       if (o.scheduler == nullptr) return absl::OkStatus();
                       BLOCKSWAP_C_CALL("", bs_scheduler_after_backward(o.scheduler, block));
                       return absl::OkStatus();
                     });
}

int bs_offloader_ensure_block(bs_offloader* offloader, uint32_t block) {
  return OnOffloader(offloader, "bs_offloader_ensure_block", [&](bs_offloader& o) -> absl::Status {
    if (o.scheduler == nullptr || !o.Streams(block) ||
        o.slot_block[o.rank_of[block] % o.ring_slots] == block) {
      return absl::OkStatus();
    }
    BLOCKSWAP_C_CALL("", bs_scheduler_ensure_block(o.scheduler, block));
    return absl::OkStatus();
  });
}

int bs_offloader_set_forward_only(bs_offloader* offloader, int forward_only) {
  return OnOffloader(
      offloader, "bs_offloader_set_forward_only", [&](bs_offloader& o) -> absl::Status {
        o.config.forward_only = forward_only != 0;
        if (o.scheduler == nullptr) return absl::OkStatus();
        BLOCKSWAP_C_CALL("", bs_scheduler_set_forward_only(o.scheduler, forward_only));
        return absl::OkStatus();
      });
}

int bs_offloader_set_reload_hook(bs_offloader* offloader, bs_reload_fn fn, void* user_data) {
  return OnOffloader(
      offloader, "bs_offloader_set_reload_hook", [&](bs_offloader& o) -> absl::Status {
        BLOCKSWAP_RETURN_IF_ERROR(RequireStarted(o));
        BLOCKSWAP_C_CALL("", bs_scheduler_set_reload_hook(o.scheduler, fn, user_data));
        return absl::OkStatus();
      });
}

int bs_offloader_finish_pass(bs_offloader* offloader) {
  return OnOffloader(offloader, "bs_offloader_finish_pass", [&](bs_offloader& o) -> absl::Status {
    if (o.scheduler == nullptr) return absl::OkStatus();
    BLOCKSWAP_C_CALL("", bs_scheduler_finish_pass(o.scheduler));
    return absl::OkStatus();
  });
}

int bs_offloader_last_pass(const bs_offloader* offloader, int direction, bs_pass_stats* out) {
  return OnOffloader(offloader, "bs_offloader_last_pass",
                     [&](const bs_offloader& o) -> absl::Status {
                       if (o.scheduler == nullptr) {
                         return absl::NotFoundError(
                             "no pass has run (the offloader streams "
                             "nothing, or was never prepared)");
                       }
                       BLOCKSWAP_C_CALL("", bs_scheduler_last_pass(o.scheduler, direction, out));
                       return absl::OkStatus();
                     });
}

int bs_offloader_close(bs_offloader* offloader, void* stream, uint32_t timeout_ms) {
  return OnOffloader(offloader, "bs_offloader_close", [&](bs_offloader& o) -> absl::Status {
    bs_scheduler_destroy(std::exchange(o.scheduler, nullptr));
    if (o.ring == nullptr) return absl::OkStatus();
    // CUDA's order: the releases recorded after the stream's last use of the
    // slots, the stream synchronised, the imports closed, and only then the
    // ring freed by the daemon. The ring is closed even when this fails.
    const int code = bs_ring_close(o.ring, stream, timeout_ms);
    bs_ring_destroy(std::exchange(o.ring, nullptr));
    if (code != BS_OK) return Failed(code, "closing the ring: ");
    return absl::OkStatus();
  });
}

}  // extern "C"
