// The offloader's checks of what the trainer passes (blockswap.h,
// "offloader"), each refusal's message written once for every integration.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/c_api/c_api_offloader_internal.h"
#include "shared/base/status.h"

namespace blockswap::client::c_api {

absl::Status CheckFrozen(const bs_offloader& o, uint32_t block, const bs_offloader_tensor& t) {
  if (!t.requires_grad) return absl::OkStatus();
  const std::string name = Text(t.name);
  return absl::InvalidArgumentError(absl::StrCat(
      o.Label(block), " tensor '", name,
      "' requires grad, but streamed tensors must be frozen: the swap tensor selector returned ",
      name, " of ", o.Label(block),
      ", which requires grad (it is trained), and the next load overwrites its slot. Leave it "
      "out of the selector (the default one streams frozen base weights only and skips "
      "adapters), or freeze it with requires_grad_(false) if it is not meant to train."));
}

absl::Status CheckNotMeta(const bs_offloader& o, uint32_t block, const bs_offloader_tensor& t) {
  if (!t.is_meta) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      o.Label(block), " tensor '", Text(t.name),
      "' is a meta tensor (never materialised): set BlockSwapConfig.model_id or model_file to "
      "bind it to a model blockswapd holds"));
}

}  // namespace blockswap::client::c_api

using blockswap::client::c_api::CheckFrozen;
using blockswap::client::c_api::OnOffloader;
using blockswap::client::c_api::Report;
using blockswap::client::c_api::Text;

extern "C" {

int bs_offloader_check_block(const bs_offloader* offloader, uint32_t block,
                             const bs_offloader_tensor* tensors, uint32_t count) {
  return OnOffloader(
      offloader, "bs_offloader_check_block", [&](const bs_offloader& o) -> absl::Status {
        if (!o.Streams(block)) return absl::OkStatus();
        if (count == 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(o.Label(block), " streams, but the selector picked no tensor in it"));
        }
        for (uint32_t k = 0; k < count; ++k) {
          BLOCKSWAP_RETURN_IF_ERROR(CheckFrozen(o, block, tensors[k]));
        }
        return absl::OkStatus();
      });
}

int bs_offloader_check_materialised(const bs_offloader* offloader, uint32_t block,
                                    const char* tensor, int is_meta) {
  return OnOffloader(
      offloader, "bs_offloader_check_materialised", [&](const bs_offloader& o) -> absl::Status {
        if (!is_meta) return absl::OkStatus();
        return absl::InvalidArgumentError(
            absl::StrCat(o.Label(block), " tensor '", Text(tensor),
                         "' is a meta tensor (never materialised) that no model gives: only "
                         "the selector's tensors are bound to the daemon's model (set "
                         "model_id or model_file; a model of every block feeds resident "
                         "blocks too, one of only the streaming blocks does not)"));
      });
}

int bs_offloader_refuse_selection(const bs_offloader* offloader, uint32_t block, const char* owner,
                                  const char* picked) {
  return OnOffloader(
      offloader, "bs_offloader_refuse_selection", [&](const bs_offloader& o) -> absl::Status {
        if (Text(picked).empty()) {
          return absl::InvalidArgumentError(absl::StrCat("the swap tensor selector returned a ",
                                                         Text(owner), " that is not part of ",
                                                         o.Label(block)));
        }
        return absl::InvalidArgumentError(absl::StrCat(
            "the swap tensor selector returned '", Text(picked), "' of ", Text(owner), " of ",
            o.Label(block),
            ", which is neither a parameter nor a registered buffer of it (an adapter wrapper's "
            "property? select the wrapped module's tensor, e.g. its base_layer.weight)"));
      });
}

int bs_offloader_refuse_capture(const char* what) {
  return Report(absl::FailedPreconditionError(absl::StrCat(
      "blockswap: ", Text(what),
      " during CUDA graph capture. Streamed blocks are loaded by blockswapd and waited for on "
      "the host, which a captured graph cannot replay: capture only the resident part of the "
      "model, or run the offloaded blocks outside the graph")));
}

}  // extern "C"
