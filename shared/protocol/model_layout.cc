#include "shared/protocol/model_layout.h"

#include <openssl/evp.h>

#include <algorithm>
#include <new>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "shared/base/message_text.h"
#include "shared/os/shared_memory.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto lead = static_cast<uint8_t>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length;
    uint32_t code_point;
    uint32_t smallest;  // anything below is an overlong encoding
    if ((lead & 0xE0) == 0xC0) {
      length = 2, code_point = lead & 0x1F, smallest = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, code_point = lead & 0x0F, smallest = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, code_point = lead & 0x07, smallest = 0x10000;
    } else {
      return false;
    }
    if (text.size() - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      auto next = static_cast<uint8_t>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code_point = (code_point << 6) | (next & 0x3F);
    }
    if (code_point < smallest || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

// Checks one block; `where` is "block 3" (or "the block" for PackBlock).
// Adds the block's size to *total_bytes, keeping it within the limit.
absl::Status ValidateBlock(const BlockSpec& block, absl::string_view where,
                           const LayoutLimits& limits, uint64_t* total_bytes) {
  if (block.tensors.empty())
    return absl::InvalidArgumentError(absl::StrCat(where, " has no tensors"));
  if (block.tensors.size() > limits.max_tensors_per_block) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has ", block.tensors.size(),
                                                   " tensors (limit ", limits.max_tensors_per_block,
                                                   ")"));
  }
  std::unordered_map<std::string_view, size_t> seen;
  seen.reserve(block.tensors.size());
  uint64_t end = 0;
  size_t previous = 0;  // the tensor that ends at `end`
  // Messages are built only on failure: the common path allocates nothing
  // per tensor but its entry in `seen`.
  auto label_of = [&](size_t t) {
    return absl::StrCat("tensor ", Quoted(block.tensors[t].name), " of ", where);
  };
  for (size_t t = 0; t < block.tensors.size(); ++t) {
    const TensorSpec& tensor = block.tensors[t];
    auto by_index = [&] { return absl::StrCat("tensor ", t, " of ", where); };
    if (tensor.name.empty()) return absl::InvalidArgumentError(by_index() + " has an empty name");
    if (tensor.name.size() > limits.max_name_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("name of ", by_index(), " has ",
                                                     tensor.name.size(), " bytes (limit ",
                                                     limits.max_name_bytes, ")"));
    }
    if (tensor.name.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("name of ", by_index(), " contains a NUL byte"));
    }
    if (!IsValidUtf8(tensor.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("name of ", by_index(), " is not valid UTF-8"));
    }
    auto [it, inserted] = seen.emplace(std::string_view(tensor.name.data(), tensor.name.size()), t);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(label_of(t), " appears twice (tensors ", it->second, " and ", t, ")"));
    }
    if (tensor.shape.size() > limits.max_rank) {
      return absl::InvalidArgumentError(absl::StrCat(label_of(t), " has ", tensor.shape.size(),
                                                     " dimensions (limit ", limits.max_rank, ")"));
    }
    auto expected = TensorBytes(tensor.dtype, tensor.shape);
    if (!expected.ok()) return Annotate(expected.status(), label_of(t));
    if (tensor.length != *expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(label_of(t), ": length ", tensor.length, " does not match ", tensor.dtype,
                       " ", FormatShape(tensor.shape), " (", *expected, " bytes)"));
    }
    if (tensor.offset % kTensorAlignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          label_of(t), ": offset ", tensor.offset, " is not ", kTensorAlignment, "-byte aligned"));
    }
    if (tensor.offset < end) {
      return absl::InvalidArgumentError(
          absl::StrCat(label_of(t), ": offset ", tensor.offset, " overlaps ", label_of(previous),
                       ", which ends at ", end, " (tensors must ascend without overlap)"));
    }
    // Both terms are bounded before they are added, so the sum cannot wrap.
    if (tensor.offset > limits.max_total_bytes || tensor.length > limits.max_total_bytes ||
        tensor.offset + tensor.length > limits.max_total_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(label_of(t), ": bytes [", tensor.offset, ", +", tensor.length,
                       ") reach past the model size limit of ", limits.max_total_bytes, " bytes"));
    }
    end = tensor.offset + tensor.length;
    previous = t;
  }
  uint64_t expected_bytes = RoundUp(end, kTensorAlignment);
  if (block.bytes != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": bytes ", block.bytes,
                                                   " does not match its tensors (the last ends at ",
                                                   end, ", so ", expected_bytes, " expected)"));
  }
  if (block.bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has 0 bytes (every tensor is empty)"));
  }
  if (block.bytes > limits.max_total_bytes - *total_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " of ", block.bytes, " bytes takes the model past the limit of ",
                     limits.max_total_bytes, " bytes (", *total_bytes, " before it)"));
  }
  *total_bytes += block.bytes;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BlockSpec> PackBlock(std::vector<TensorSpec> tensors) {
  const LayoutLimits limits;
  BlockSpec block;
  uint64_t end = 0;
  for (TensorSpec& tensor : tensors) {
    auto length = TensorBytes(tensor.dtype, tensor.shape);
    if (!length.ok())
      return Annotate(length.status(), absl::StrCat("tensor ", Quoted(tensor.name)));
    // Bounded sizes keep the offsets from wrapping; ValidateBlock reports the
    // limit precisely.
    if (*length > limits.max_total_bytes || end > limits.max_total_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", Quoted(tensor.name), " of ", *length, " bytes at offset ", end,
                       " passes the model size limit of ", limits.max_total_bytes, " bytes"));
    }
    tensor.offset = RoundUp(end, kTensorAlignment);
    tensor.length = *length;
    end = tensor.offset + tensor.length;
  }
  block.bytes = RoundUp(end, kTensorAlignment);
  block.tensors = std::move(tensors);
  uint64_t total = 0;
  BLOCKSWAP_RETURN_IF_ERROR(ValidateBlock(block, "the block", limits, &total));
  return block;
}

absl::StatusOr<uint64_t> PackedBlockBytes(absl::Span<const uint64_t> lengths) {
  const uint64_t limit = LayoutLimits{}.max_total_bytes;
  uint64_t end = 0;
  for (size_t t = 0; t < lengths.size(); ++t) {
    if (lengths[t] > limit || end > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t, " of ", lengths[t], " bytes at offset ", end,
                       " passes the model size limit of ", limit, " bytes"));
    }
    end = RoundUp(end, kTensorAlignment) + lengths[t];
  }
  return RoundUp(end, kTensorAlignment);
}

absl::Status ValidateLayout(const ModelLayout& layout, const LayoutLimits& limits) {
  if (layout.blocks.empty()) return absl::InvalidArgumentError("layout has no blocks");
  if (layout.blocks.size() > limits.max_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("layout has ", layout.blocks.size(),
                                                   " blocks (limit ", limits.max_blocks, ")"));
  }
  uint64_t total = 0;
  for (size_t b = 0; b < layout.blocks.size(); ++b) {
    BLOCKSWAP_RETURN_IF_ERROR(
        ValidateBlock(layout.blocks[b], absl::StrCat("block ", b), limits, &total));
  }
  return absl::OkStatus();
}

v1::ModelLayout LayoutToProto(const ModelLayout& layout) {
  v1::ModelLayout proto;
  proto.mutable_blocks()->Reserve(static_cast<int>(layout.blocks.size()));
  for (const BlockSpec& block : layout.blocks) {
    v1::BlockLayout* block_proto = proto.add_blocks();
    block_proto->set_bytes(block.bytes);
    for (const TensorSpec& tensor : block.tensors) {
      v1::TensorLayout* tensor_proto = block_proto->add_tensors();
      tensor_proto->set_name(tensor.name);
      tensor_proto->set_dtype(tensor.dtype);
      tensor_proto->mutable_shape()->Add(tensor.shape.begin(), tensor.shape.end());
      tensor_proto->set_offset(tensor.offset);
      tensor_proto->set_length(tensor.length);
    }
  }
  return proto;
}

absl::StatusOr<ModelLayout> LayoutFromProto(const v1::ModelLayout& proto,
                                            const LayoutLimits& limits) {
  // Counts are checked before anything is copied, so an oversized request
  // costs no allocation.
  if (static_cast<uint64_t>(proto.blocks_size()) > limits.max_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("layout has ", proto.blocks_size(),
                                                   " blocks (limit ", limits.max_blocks, ")"));
  }
  ModelLayout layout;
  layout.blocks.reserve(proto.blocks_size());
  for (int b = 0; b < proto.blocks_size(); ++b) {
    const v1::BlockLayout& block_proto = proto.blocks(b);
    if (static_cast<uint64_t>(block_proto.tensors_size()) > limits.max_tensors_per_block) {
      return absl::InvalidArgumentError(absl::StrCat("block ", b, " has ",
                                                     block_proto.tensors_size(), " tensors (limit ",
                                                     limits.max_tensors_per_block, ")"));
    }
    BlockSpec& block = layout.blocks.emplace_back();
    block.bytes = block_proto.bytes();
    block.tensors.reserve(block_proto.tensors_size());
    for (const v1::TensorLayout& tensor_proto : block_proto.tensors()) {
      TensorSpec& tensor = block.tensors.emplace_back();
      tensor.name = tensor_proto.name();
      tensor.dtype = tensor_proto.dtype();
      tensor.shape.assign(tensor_proto.shape().begin(), tensor_proto.shape().end());
      tensor.offset = tensor_proto.offset();
      tensor.length = tensor_proto.length();
    }
  }
  BLOCKSWAP_RETURN_IF_ERROR(ValidateLayout(layout, limits));
  return layout;
}

absl::Status CheckBlockPadding(const BlockSpec& block, const void* block_data) {
  const auto* bytes = static_cast<const uint8_t*>(block_data);
  auto check = [&](uint64_t begin, uint64_t end) -> absl::Status {
    for (uint64_t i = begin; i < end; ++i) {
      if (bytes[i] != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "padding byte at offset ", i, " is 0x", absl::Hex(bytes[i], absl::kZeroPad2),
            ", not zero (the bytes between and after tensors must be zero)"));
      }
    }
    return absl::OkStatus();
  };
  uint64_t end = 0;
  for (const TensorSpec& tensor : block.tensors) {
    BLOCKSWAP_RETURN_IF_ERROR(check(end, tensor.offset));
    end = tensor.offset + tensor.length;
  }
  return check(end, block.bytes);
}

void Sha256::Free::operator()(evp_md_ctx_st* context) const { EVP_MD_CTX_free(context); }

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (context_ == nullptr || EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) != 1) {
    throw std::bad_alloc();
  }
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&& other) noexcept = default;
Sha256& Sha256::operator=(Sha256&& other) noexcept = default;

void Sha256::Update(const void* data, size_t bytes) {
  if (bytes == 0) return;
  if (EVP_DigestUpdate(context_.get(), data, bytes) != 1) throw std::bad_alloc();
}

Sha256Digest Sha256::Finish() {
  Sha256Digest digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context_.get(), digest.data(), &length) != 1 || length != digest.size() ||
      EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) != 1) {
    throw std::bad_alloc();
  }
  return digest;
}

Sha256Digest Sha256Of(const void* data, size_t bytes) {
  Sha256 hash;
  hash.Update(data, bytes);
  return hash.Finish();
}

std::string DigestHex(const Sha256Digest& digest) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

bool IsModelId(absl::string_view id) {
  return id.size() == 64 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

absl::StatusOr<Sha256Digest> DigestFromHex(absl::string_view hex) {
  if (!IsModelId(hex)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quoted(hex), " is not a SHA-256 digest (64 lowercase hex digits)"));
  }
  std::string bytes = absl::HexStringToBytes(hex);
  Sha256Digest digest{};
  std::copy(bytes.begin(), bytes.end(), digest.begin());
  return digest;
}

namespace {

void AppendTensorLines(const BlockSpec& block, std::string* out) {
  for (const TensorSpec& tensor : block.tensors) {
    absl::StrAppend(out, "tensor ", tensor.name.size(), ":", tensor.name, " ", tensor.dtype, " ",
                    absl::StrJoin(tensor.shape, ","), " ", tensor.offset, " ", tensor.length, "\n");
  }
}

}  // namespace

std::string CanonicalLayoutEncoding(const ModelLayout& layout) {
  std::string out = absl::StrCat("blockswap-model-v1\nblocks ", layout.blocks.size(), "\n");
  for (size_t b = 0; b < layout.blocks.size(); ++b) {
    const BlockSpec& block = layout.blocks[b];
    absl::StrAppend(&out, "block ", b, " bytes ", block.bytes, " tensors ", block.tensors.size(),
                    "\n");
    AppendTensorLines(block, &out);
  }
  return out;
}

std::string BlockId(const BlockSpec& block, const Sha256Digest& bytes_hash) {
  std::string encoding = absl::StrCat("blockswap-block-v1\nbytes ", block.bytes, " tensors ",
                                      block.tensors.size(), "\n");
  AppendTensorLines(block, &encoding);
  Sha256 hash;
  hash.Update(encoding);
  hash.Update(bytes_hash.data(), bytes_hash.size());
  return DigestHex(hash.Finish());
}

std::string ModelId(const ModelLayout& layout, absl::Span<const Sha256Digest> block_hashes) {
  Sha256 hash;
  hash.Update(CanonicalLayoutEncoding(layout));
  for (const Sha256Digest& digest : block_hashes) hash.Update(digest.data(), digest.size());
  return DigestHex(hash.Finish());
}

}  // namespace blockswap
