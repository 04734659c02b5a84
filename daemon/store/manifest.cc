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
                      {"sha256", DigestHex(model.block_hashes[b])},
                      {"block", model.block_ids[b]},
                      {"tensors", std::move(tensors)}});
  }
  Json registrants = Json::array();
  for (const Registrant& registrant : model.registrants) {
    registrants.push_back(
        {{"uid", registrant.uid}, {"gid", registrant.gid}, {"source", registrant.source},
         {"name", registrant.name}});
  }
  Json manifest = {{"format", kManifestFormat},
                   {"version", kManifestVersion},
                   {"id", model.id},
                   {"name", model.name},
                   {"source", model.source},
                   {"registrants", std::move(registrants)},
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
    if (!json.is_object() || !json.contains("format") || !json["format"].is_string() ||
        json["format"].get<std::string>() != kManifestFormat) {
      return absl::FailedPreconditionError("not a blockswap manifest");
    }
    const uint64_t version = U64(json, "version");
    if (version != kManifestVersion) {
      return absl::UnimplementedError(absl::StrCat(
          "a blockswap manifest of format version ", version, " (this blockswapd reads version ",
          kManifestVersion, ": a newer blockswapd wrote it)"));
    }
    Manifest manifest;
    manifest.id = String(json, "id");
    manifest.name = String(json, "name");
    manifest.source = String(json, "source");
    for (const Json& registrant : json.at("registrants")) {
      const uint64_t uid = U64(registrant, "uid");
      const uint64_t gid = U64(registrant, "gid");
      if (uid > UINT32_MAX || gid > UINT32_MAX) {
        throw std::invalid_argument("a registrant's uid or gid is out of range");
      }
      // "name" is absent from manifests written before names were kept per
      // registration: the model's name is the first registration's then, and
      // what the others gave is not known.
      std::string name;
      if (registrant.contains("name")) {
        name = String(registrant, "name");
      } else if (manifest.registrants.empty()) {
        name = manifest.name;
      }
      manifest.registrants.push_back(Registrant{static_cast<uid_t>(uid), static_cast<gid_t>(gid),
                                                String(registrant, "source"), std::move(name)});
    }
    for (const Json& block_json : json.at("blocks")) {
      BlockSpec& block = manifest.layout.blocks.emplace_back();
      block.bytes = U64(block_json, "bytes");
      manifest.block_ids.push_back(String(block_json, "block"));
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
