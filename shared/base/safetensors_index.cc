#include "shared/base/safetensors_index.h"

#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "shared/base/json_error.h"
#include "shared/base/message_text.h"

namespace blockswap {

absl::StatusOr<std::vector<std::string>> ParseSafetensorsIndex(absl::string_view text) {
  using Json = nlohmann::json;
  Json json;
  try {
    json = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& error) {
    return NotJson("the safetensors index", error.what());
  }
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
      return absl::InvalidArgumentError(absl::StrCat("weight_map entry ", Quoted(tensor),
                                                     " names shard ", Quoted(file),
                                                     ", not a plain file name beside the index"));
    }
    shards.insert(file);
  }
  return std::vector<std::string>(shards.begin(), shards.end());
}

}  // namespace blockswap
