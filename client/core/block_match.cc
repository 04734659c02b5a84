#include "client/core/block_match.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "shared/base/message_text.h"

namespace blockswap::client {

absl::StatusOr<std::vector<uint64_t>> MatchBlock(const BlockSpec& block,
                                                 absl::Span<const WantedTensor> wanted,
                                                 absl::string_view where) {
  std::unordered_map<std::string_view, const TensorSpec*> by_name;
  for (const TensorSpec& tensor : block.tensors) by_name.emplace(std::string_view(tensor.name), &tensor);
  std::vector<uint64_t> offsets;
  offsets.reserve(wanted.size());
  std::unordered_map<std::string_view, size_t> seen;
  for (size_t t = 0; t < wanted.size(); ++t) {
    const WantedTensor& want = wanted[t];
    if (auto [it, inserted] = seen.emplace(std::string_view(want.name.data(), want.name.size()), t); !inserted) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", Quoted(want.name),
                                                     " is streamed twice (tensors ", it->second,
                                                     " and ", t, ")"));
    }
    const auto found = by_name.find(std::string_view(want.name.data(), want.name.size()));
    if (found == by_name.end()) {
      std::string names;
      for (const TensorSpec& tensor : block.tensors) {
        absl::StrAppend(&names, names.empty() ? "" : ", ", Quoted(tensor.name));
      }
      return absl::NotFoundError(absl::StrCat(where, ": the selector streams ", Quoted(want.name),
                                              ", which the model's block does not have (it has ",
                                              names, ")"));
    }
    const TensorSpec& tensor = *found->second;
    if (tensor.dtype != want.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(where, " tensor ", Quoted(want.name),
                                                     ": the model has dtype ", tensor.dtype,
                                                     ", the module ", want.dtype));
    }
    if (!std::equal(tensor.shape.begin(), tensor.shape.end(), want.shape.begin(),
                    want.shape.end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " tensor ", Quoted(want.name), ": the model has shape ",
          FormatShape(tensor.shape), ", the module ", FormatShape(want.shape)));
    }
    offsets.push_back(tensor.offset);
  }
  if (seen.size() < block.tensors.size()) {
    for (const TensorSpec& tensor : block.tensors) {
      if (seen.contains(std::string_view(tensor.name))) continue;
      const size_t more = block.tensors.size() - seen.size() - 1;
      return absl::FailedPreconditionError(
          absl::StrCat(where, " has tensor ", Quoted(tensor.name),
                       more > 0 ? absl::StrCat(" (and ", more, " more)") : std::string(),
                       " that the selector does not stream in the module"));
    }
  }
  return offsets;
}

}  // namespace blockswap::client
