// What the offloader's translation units share (c_api_offloader.cc, the
// sequence; c_api_offloader_checks.cc, the checks of what the trainer
// passes): the handle behind bs_offloader. Private to libblockswap.so.
#ifndef BLOCKSWAP_CLIENT_C_API_C_API_OFFLOADER_INTERNAL_H_
#define BLOCKSWAP_CLIENT_C_API_C_API_OFFLOADER_INTERNAL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "blockswap/blockswap.h"
#include "client/c_api/c_api_internal.h"

// The handles are the C ABI's own, destroyed by their destroy functions
// (which, in a forked child, only forget what they hold).
struct bs_offloader {
  blockswap::client::OwnerProcess owner;  // as bs_client's (c_api_internal.h)
  // The configuration's strings, owned.
  std::string kind, socket_path, client_name, model_id, model_file, model_block_pattern,
      model_select, model_name, name_hint;
  bs_offloader_config config{};
  std::vector<uint32_t> streaming;  // rank -> block
  std::vector<uint32_t> rank_of;    // block -> rank, UINT32_MAX for a resident block
  uint32_t ring_slots = 0;

  bs_client* client = nullptr;
  std::string device_uuid;
  bs_model* model = nullptr;
  std::vector<bs_model*> retired;  // opened by an earlier, refused bs_offloader_open_model
  bool every_block = false;        // model block b is block b
  std::vector<std::vector<uint64_t>> offsets;  // by block; empty: not matched
  bs_ring* ring = nullptr;
  bs_scheduler* scheduler = nullptr;
  std::vector<uint32_t> slot_block;  // slot -> block bound there, UINT32_MAX: none
  bs_offloader_bind_fn on_bind = nullptr;
  void* user_data = nullptr;

  std::string Label(uint32_t block) const {
    return kind.empty() ? absl::StrCat("block ", block) : absl::StrCat(kind, " block ", block);
  }
  bool Streams(uint32_t block) const {
    return block < rank_of.size() && rank_of[block] != UINT32_MAX;
  }
  uint32_t ModelBlock(uint32_t block) const { return every_block ? block : rank_of[block]; }
  bool FromDaemon() const { return !model_id.empty() || !model_file.empty(); }
};

namespace blockswap::client::c_api {

inline std::string Text(const char* text) { return text == nullptr ? "" : text; }

template <typename Offloader, typename Body>
int OnOffloader(Offloader* offloader, const char* what, Body&& body) {
  return blockswap::client::c_api::OnHandle(offloader, what, "offloader", std::forward<Body>(body));
}

// A streamed tensor must be frozen (the next load overwrites its slot).
absl::Status CheckFrozen(const bs_offloader& o, uint32_t block, const bs_offloader_tensor& t);
// A tensor packed into a model must hold bytes.
absl::Status CheckNotMeta(const bs_offloader& o, uint32_t block, const bs_offloader_tensor& t);

}  // namespace blockswap::client::c_api

#endif  // BLOCKSWAP_CLIENT_C_API_C_API_OFFLOADER_INTERNAL_H_
