#include "tools/blockswapctl/model_id_prefix.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace blockswap::ctl {
namespace {

// An ambiguous prefix names at most this many candidates (a prefix of one
// digit on a node with hundreds of models would otherwise print them all).
constexpr size_t kCandidatesNamed = 8;

bool AllHexDigits(absl::string_view text) {
  for (char c : text) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

bool IsFullModelId(absl::string_view text) {
  return text.size() == kModelIdDigits && AllHexDigits(text);
}

absl::StatusOr<std::string> ExpandModelIdPrefix(absl::string_view prefix,
                                                const v1::ModelsReply& models) {
  if (prefix.empty()) return absl::InvalidArgumentError("the model id is empty");
  if (prefix.size() > kModelIdDigits || !AllHexDigits(prefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", prefix, "' is not a model id (up to ", kModelIdDigits, " hex digits)"));
  }
  // Ids are lowercase hex; the prefix may have been typed in either case.
  const std::string lowered = absl::AsciiStrToLower(prefix);
  std::vector<const v1::ModelInfo*> matches;
  for (const v1::ModelInfo& model : models.models()) {
    if (absl::StartsWith(model.model_id(), lowered)) matches.push_back(&model);
  }
  if (matches.size() == 1) return matches.front()->model_id();
  if (matches.empty()) {
    return absl::NotFoundError(absl::StrCat("no model id starts with '", prefix, "' (",
                                            models.models_size(),
                                            " models registered; blockswapctl models lists them)"));
  }
  std::vector<std::string> named;
  for (size_t i = 0; i < matches.size() && i < kCandidatesNamed; ++i) {
    const v1::ModelInfo& model = *matches[i];
    named.push_back(model.name().empty() ? model.model_id()
                                         : absl::StrCat(model.model_id(), " (", model.name(), ")"));
  }
  if (matches.size() > kCandidatesNamed) {
    named.push_back(absl::StrCat("and ", matches.size() - kCandidatesNamed, " more"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model id prefix '", prefix, "' matches ", matches.size(),
                   " models; give more digits: ", absl::StrJoin(named, ", ")));
}

}  // namespace blockswap::ctl
