#include "shared/base/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "shared/base/dtype.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {

using Json = nlohmann::json;

constexpr absl::string_view kMetadataKey = "__metadata__";
// Dimensions of one tensor; the model layout allows no more either.
constexpr size_t kMaxRank = 64;

// Thrown from the parser callback to stop at the first duplicate name (the
// JSON library would otherwise keep the last value silently).
struct DuplicateKey {
  std::string key;
};

absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what,
                               bool refuse_duplicate_top_level_keys) {
  std::set<std::string> seen;
  Json::parser_callback_t callback = [&](int depth, Json::parse_event_t event, Json& value) {
    if (refuse_duplicate_top_level_keys && depth == 1 && event == Json::parse_event_t::key) {
      const std::string& key = value.get_ref<const std::string&>();
      if (!seen.insert(key).second) throw DuplicateKey{key};
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const DuplicateKey& duplicate) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " names tensor ", Quoted(duplicate.key), " twice"));
  } catch (const Json::exception& error) {
    std::string message = absl::StrCat(what, " is not valid JSON: ", error.what());
    if (absl::StrContains(message, "UTF-8")) {
      absl::StrAppend(&message, " (names and strings must be valid UTF-8)");
    }
    return absl::InvalidArgumentError(message);
  }
}

absl::StatusOr<uint64_t> Unsigned(const Json& value, absl::string_view what) {
  if (!value.is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", value.type_name(), " ", Quoted(value.dump()),
                     ", not an unsigned integer"));
  }
  return value.get<uint64_t>();
}

absl::StatusOr<SafetensorsTensor> ParseTensor(const std::string& name, const Json& entry,
                                              uint64_t data_bytes) {
  const std::string label = absl::StrCat("tensor ", Quoted(name));
  if (name.empty()) return absl::InvalidArgumentError("a tensor has an empty name");
  if (name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("name of ", label, " contains a NUL byte"));
  }
  if (!entry.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, " is ", entry.type_name(), ", not an object"));
  }
  SafetensorsTensor tensor;
  tensor.name = name;
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return absl::InvalidArgumentError(
          absl::StrCat(label, " has an unknown field ", Quoted(key),
                       " (expected dtype, shape and data_offsets)"));
    }
  }
  auto dtype = entry.find("dtype");
  auto shape = entry.find("shape");
  auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || shape == entry.end() || offsets == entry.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, " lacks ",
                     dtype == entry.end()   ? "dtype"
                     : shape == entry.end() ? "shape"
                                            : "data_offsets"));
  }
  if (!dtype->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": dtype is ", dtype->type_name(), ", not a string"));
  }
  tensor.dtype = dtype->get<std::string>();
  if (auto bits = DtypeBits(tensor.dtype); !bits.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", bits.status().message()));
  }
  if (!shape->is_array() || shape->size() > kMaxRank) {
    return absl::InvalidArgumentError(
        shape->is_array() ? absl::StrCat(label, " has ", shape->size(), " dimensions (limit ",
                                         kMaxRank, ")")
                          : absl::StrCat(label, ": shape is ", shape->type_name(),
                                         ", not an array"));
  }
  for (size_t d = 0; d < shape->size(); ++d) {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        uint64_t dim, Unsigned((*shape)[d], absl::StrCat(label, ": dimension ", d)));
    tensor.shape.push_back(dim);
  }
  if (!offsets->is_array() || offsets->size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": data_offsets is ", Quoted(offsets->dump()),
                     ", not [begin, end]"));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(tensor.begin,
                             Unsigned((*offsets)[0], absl::StrCat(label, ": data_offsets[0]")));
  BLOCKSWAP_ASSIGN_OR_RETURN(tensor.end,
                             Unsigned((*offsets)[1], absl::StrCat(label, ": data_offsets[1]")));
  if (tensor.begin > tensor.end) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": data_offsets [", tensor.begin, ", ",
                                                   tensor.end, "] end before they begin"));
  }
  if (tensor.end > data_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": data_offsets [", tensor.begin, ", ", tensor.end,
                     "] reach past the data section of ", data_bytes, " bytes"));
  }
  auto expected = TensorBytes(tensor.dtype, tensor.shape);
  if (!expected.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", expected.status().message()));
  }
  if (*expected != tensor.end - tensor.begin) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": ", tensor.dtype, " ", FormatShape(tensor.shape), " is ", *expected,
        " bytes but data_offsets [", tensor.begin, ", ", tensor.end, "] hold ",
        tensor.end - tensor.begin));
  }
  return tensor;
}

}  // namespace

absl::StatusOr<uint64_t> SafetensorsHeaderBytes(absl::string_view prefix, uint64_t file_size) {
  if (file_size < kSafetensorsPrefixBytes || prefix.size() < kSafetensorsPrefixBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("file of ", file_size,
                     " bytes is too short for a safetensors file (its header length alone takes ",
                     kSafetensorsPrefixBytes, " bytes)"));
  }
  uint64_t length = 0;
  for (size_t i = 0; i < kSafetensorsPrefixBytes; ++i) {
    length |= uint64_t{static_cast<uint8_t>(prefix[i])} << (8 * i);
  }
  if (length > file_size - kSafetensorsPrefixBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("header length ", length, " reaches past the end of the file (", file_size,
                     " bytes, so at most ", file_size - kSafetensorsPrefixBytes, ")"));
  }
  if (length > kSafetensorsMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("header length ", length, " exceeds the limit of ",
                                                   kSafetensorsMaxHeaderBytes, " bytes"));
  }
  return length;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view header,
                                                         uint64_t file_size) {
  SafetensorsHeader result;
  result.header_bytes = header.size();
  if (file_size < kSafetensorsPrefixBytes ||
      header.size() > file_size - kSafetensorsPrefixBytes) {
    return absl::InvalidArgumentError(absl::StrCat("header of ", header.size(),
                                                   " bytes does not fit in a file of ", file_size,
                                                   " bytes"));
  }
  result.data_offset = kSafetensorsPrefixBytes + header.size();
  result.data_bytes = file_size - result.data_offset;
  BLOCKSWAP_ASSIGN_OR_RETURN(Json json, ParseJson(header, "the safetensors header",
                                                  /*refuse_duplicate_top_level_keys=*/true));
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the safetensors header is ", json.type_name(), ", not an object"));
  }
  result.tensors.reserve(json.size());
  for (const auto& [key, value] : json.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat("__metadata__ is ", value.type_name(), ", not an object"));
      }
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) {
          return absl::InvalidArgumentError(absl::StrCat("__metadata__ entry ", Quoted(meta_key),
                                                         " is ", meta_value.type_name(),
                                                         ", not a string"));
        }
        result.metadata.emplace(meta_key, meta_value.get<std::string>());
      }
      continue;
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(SafetensorsTensor tensor,
                               ParseTensor(key, value, result.data_bytes));
    result.tensors.push_back(std::move(tensor));
  }
  std::sort(result.tensors.begin(), result.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  uint64_t covered = 0;  // the data section is covered up to here
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& tensor : result.tensors) {
    if (tensor.begin < covered) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", Quoted(tensor.name), " at [", tensor.begin, ", ", tensor.end,
          ") overlaps tensor ", Quoted(previous->name), " at [", previous->begin, ", ",
          previous->end, ")"));
    }
    if (tensor.begin > covered) {
      return absl::InvalidArgumentError(absl::StrCat("bytes [", covered, ", ", tensor.begin,
                                                     ") of the data section belong to no tensor "
                                                     "(the format has no holes)"));
    }
    covered = tensor.end;
    previous = &tensor;
  }
  if (covered != result.data_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data section has ", result.data_bytes, " bytes but its tensors cover ",
                     covered, " (the file has trailing bytes or was cut short)"));
  }
  return result;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsPrefix(absl::string_view bytes,
                                                         uint64_t file_size) {
  BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t length, SafetensorsHeaderBytes(bytes, file_size));
  if (bytes.size() - kSafetensorsPrefixBytes < length) {
    return absl::InvalidArgumentError(absl::StrCat("only ", bytes.size(),
                                                   " bytes given for a header that ends at byte ",
                                                   kSafetensorsPrefixBytes + length));
  }
  return ParseSafetensorsHeader(bytes.substr(kSafetensorsPrefixBytes, length), file_size);
}

absl::StatusOr<std::vector<std::string>> ParseSafetensorsIndex(absl::string_view text) {
  BLOCKSWAP_ASSIGN_OR_RETURN(Json json, ParseJson(text, "the safetensors index",
                                                  /*refuse_duplicate_top_level_keys=*/false));
  auto map = json.is_object() ? json.find("weight_map") : json.end();
  if (!json.is_object() || map == json.end() || !map->is_object() || map->empty()) {
    return absl::InvalidArgumentError(
        "the safetensors index has no weight_map object naming at least one tensor");
  }
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("weight_map entry ", Quoted(tensor), " is ",
                                                     shard.type_name(), ", not a file name"));
    }
    const std::string& file = shard.get_ref<const std::string&>();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight_map entry ", Quoted(tensor), " names shard ", Quoted(file),
                       ", not a plain file name beside the index"));
    }
    shards.insert(file);
  }
  return std::vector<std::string>(shards.begin(), shards.end());
}

}  // namespace blockswap
