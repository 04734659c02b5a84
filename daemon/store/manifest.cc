#include "daemon/store/manifest.h"

#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

using Json = nlohmann::json;

constexpr char kManifestFormat[] = "blockswap-manifest";
constexpr uint64_t kManifestVersion = 1;

uint64_t U64(const Json& object, const char* key) {
  const Json& value = object.at(key);
  if (!value.is_number_unsigned())
    throw std::invalid_argument(absl::StrCat(key, " is not a count"));
  return value.get<uint64_t>();
}

std::string String(const Json& object, const char* key) {
  const Json& value = object.at(key);
  if (!value.is_string()) throw std::invalid_argument(absl::StrCat(key, " is not a string"));
  return value.get<std::string>();
}

}  // namespace

std::string EncodeManifest(const Manifest& model) {
  Json blocks = Json::array();
  for (size_t b = 0; b < model.layout.blocks.size(); ++b) {
    const BlockSpec& block = model.layout.blocks[b];
    Json tensors = Json::array();
    for (const TensorSpec& tensor : block.tensors) {
      tensors.push_back({{"name", tensor.name},
                         {"dtype", tensor.dtype},
                         {"shape", tensor.shape},
                         {"offset", tensor.offset},
                         {"length", tensor.length}});
    }
    blocks.push_back({{"bytes", block.bytes},
                      {"master_offset", model.master_offsets[b]},
                      {"sha256", DigestHex(model.block_hashes[b])},
                      {"tensors", std::move(tensors)}});
  }
  Json registrants = Json::array();
  for (const Registrant& registrant : model.registrants) {
    registrants.push_back(
        {{"uid", registrant.uid}, {"gid", registrant.gid}, {"source", registrant.source}});
  }
  Json manifest = {{"format", kManifestFormat},
                   {"version", kManifestVersion},
                   {"id", model.id},
                   {"name", model.name},
                   {"source", model.source},
                   {"registrants", std::move(registrants)},
                   {"masters_bytes", model.masters_bytes},
                   {"blocks", std::move(blocks)}};
  // Tensor names are valid UTF-8 (ValidateLayout); a model name that is not
  // is informational only, so its bad bytes become U+FFFD instead of failing.
  return manifest.dump(1, ' ', false, Json::error_handler_t::replace);
}

absl::StatusOr<Manifest> ParseManifest(const std::string& text) {
  // nlohmann reports a wrong type or a missing key by exception; they stop
  // here.
  try {
    Json json = Json::parse(text);
    if (String(json, "format") != kManifestFormat || U64(json, "version") != kManifestVersion) {
      return absl::FailedPreconditionError("not a version 1 blockswap manifest");
    }
    Manifest manifest;
    manifest.id = String(json, "id");
    manifest.name = String(json, "name");
    // Manifests written before models had a source have none.
    manifest.source = json.contains("source") ? String(json, "source") : "upload";
    // Manifests written before registrants were recorded have none.
    if (json.contains("registrants")) {
      for (const Json& registrant : json.at("registrants")) {
        const uint64_t uid = U64(registrant, "uid");
        const uint64_t gid = U64(registrant, "gid");
        if (uid > UINT32_MAX || gid > UINT32_MAX) {
          throw std::invalid_argument("a registrant's uid or gid is out of range");
        }
        manifest.registrants.push_back(Registrant{static_cast<uid_t>(uid), static_cast<gid_t>(gid),
                                                  String(registrant, "source")});
      }
    }
    manifest.masters_bytes = U64(json, "masters_bytes");
    for (const Json& block_json : json.at("blocks")) {
      BlockSpec& block = manifest.layout.blocks.emplace_back();
      block.bytes = U64(block_json, "bytes");
      manifest.master_offsets.push_back(U64(block_json, "master_offset"));
      BLOCKSWAP_ASSIGN_OR_RETURN(manifest.block_hashes.emplace_back(),
                                 DigestFromHex(String(block_json, "sha256")));
      for (const Json& tensor_json : block_json.at("tensors")) {
        TensorSpec& tensor = block.tensors.emplace_back();
        tensor.name = String(tensor_json, "name");
        tensor.dtype = String(tensor_json, "dtype");
        for (const Json& dim : tensor_json.at("shape")) {
          if (!dim.is_number_unsigned()) throw std::invalid_argument("a dimension is not a count");
          tensor.shape.push_back(dim.get<uint64_t>());
        }
        tensor.offset = U64(tensor_json, "offset");
        tensor.length = U64(tensor_json, "length");
      }
    }
    return manifest;
  } catch (const std::exception& error) {
    return absl::FailedPreconditionError(absl::StrCat("malformed manifest: ", error.what()));
  }
}

}  // namespace blockswap::daemon
