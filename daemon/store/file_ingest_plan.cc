#include "daemon/store/file_ingest_plan.h"

#include <re2/re2.h>

#include <map>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

struct Placed {
  TensorSpec spec;
  TensorSource source;
};

absl::StatusOr<std::unique_ptr<RE2>> Compile(const std::string& pattern, absl::string_view what) {
  RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_unique<RE2>(pattern, options);
  if (!re->ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", Quoted(pattern), " is not a valid regex: ", re->error()));
  }
  return re;
}

absl::StatusOr<BlockSpec> Pack(std::vector<Placed>& placed, absl::string_view what,
                               std::vector<TensorSource>* sources) {
  std::vector<TensorSpec> specs;
  specs.reserve(placed.size());
  for (Placed& p : placed) {
    specs.push_back(std::move(p.spec));
    sources->push_back(p.source);
  }
  auto block = PackBlock(std::move(specs));
  if (!block.ok()) return Annotate(block.status(), what);
  return block;
}

}  // namespace

absl::StatusOr<IngestPlan> PlanIngest(const std::vector<SafetensorsHeader>& shards,
                                      const std::vector<std::string>& names,
                                      const IngestSpec& spec) {
  BLOCKSWAP_ASSIGN_OR_RETURN(auto pattern, Compile(spec.block_pattern, "block pattern"));
  if (pattern->NumberOfCapturingGroups() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block pattern ", Quoted(spec.block_pattern), " has ",
        pattern->NumberOfCapturingGroups(),
        " capture groups; it needs exactly one, the block index (e.g. ^blocks\\.(\\d+)\\.)"));
  }
  std::unique_ptr<RE2> select;
  if (!spec.select.empty()) {
    BLOCKSWAP_ASSIGN_OR_RETURN(select, Compile(spec.select, "selector"));
  }
  std::map<uint64_t, std::vector<Placed>> blocks;
  std::vector<Placed> extras;
  std::set<absl::string_view> seen;
  size_t tensor_count = 0;
  size_t in_blocks = 0;
  std::string files;
  for (size_t s = 0; s < shards.size(); ++s) {
    absl::StrAppend(&files, s == 0 ? "" : ", ", names[s]);
    for (const SafetensorsTensor& tensor : shards[s].tensors) {
      ++tensor_count;
      if (!seen.insert(tensor.name).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", Quoted(tensor.name), " appears in two shards (the second is ", names[s], ")"));
      }
      Placed placed;
      placed.source = {s, shards[s].data_offset + tensor.begin, tensor.end - tensor.begin};
      placed.spec.dtype = tensor.dtype;
      placed.spec.shape = tensor.shape;
      re2::StringPiece match[2];
      bool in_block = pattern->Match(tensor.name, 0, tensor.name.size(), RE2::UNANCHORED, match, 2);
      bool selected = !select || RE2::PartialMatch(tensor.name, *select);
      if (spec.select_rank != 0 && tensor.shape.size() != spec.select_rank) selected = false;
      if (in_block) ++in_blocks;
      if (!in_block || !selected) {
        placed.spec.name = tensor.name;
        extras.push_back(std::move(placed));
        continue;
      }
      absl::string_view captured(match[1].data(), match[1].size());
      uint64_t index;
      if (captured.empty() || !absl::SimpleAtoi(captured, &index) ||
          captured.find_first_not_of("0123456789") != absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("block pattern ", Quoted(spec.block_pattern), " captures ",
                         Quoted(captured), " in tensor ", Quoted(tensor.name),
                         ", not a decimal block index"));
      }
      size_t end = static_cast<size_t>(match[0].data() + match[0].size() - tensor.name.data());
      placed.spec.name = tensor.name.substr(end);
      if (placed.spec.name.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("block pattern ", Quoted(spec.block_pattern), " matches all of tensor ",
                         Quoted(tensor.name), ", leaving no name relative to block ", index));
      }
      blocks[index].push_back(std::move(placed));
    }
  }
  if (in_blocks == 0) {
    return absl::NotFoundError(absl::StrCat("block pattern ", Quoted(spec.block_pattern),
                                            " matches none of the ", tensor_count,
                                            " tensors of ", files));
  }
  if (blocks.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "selector ", Quoted(spec.select), spec.select_rank ? absl::StrCat(" with rank ", spec.select_rank) : "",
        " leaves none of the ", in_blocks, " tensors in blocks of ", files));
  }
  IngestPlan plan;
  uint64_t expected = 0;
  for (auto& [index, placed] : blocks) {
    if (index != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blocks must be numbered 0..N-1, but block ", expected, " has no selected tensor (next: ",
          index, ") in ", files));
    }
    ++expected;
    BLOCKSWAP_ASSIGN_OR_RETURN(
        BlockSpec block,
        Pack(placed, absl::StrCat("block ", index), &plan.sources.emplace_back()));
    plan.layout.blocks.push_back(std::move(block));
  }
  if (!extras.empty()) {
    BLOCKSWAP_ASSIGN_OR_RETURN(BlockSpec block, Pack(extras, "the extras", &plan.extras_sources));
    plan.extras.blocks.push_back(std::move(block));
  }
  BLOCKSWAP_RETURN_IF_ERROR(ValidateLayout(plan.layout));
  return plan;
}

}  // namespace blockswap::daemon
