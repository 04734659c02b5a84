#include "tests/support/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "shared/base/dtype.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"

namespace blockswap::testing {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t NameSeed(absl::string_view name, uint64_t seed) {
  uint64_t h = seed;
  for (char c : name) h = Mix(h ^ static_cast<uint8_t>(c));
  return h;
}

void FillContent(uint64_t state, uint64_t from, char* out, size_t bytes) {
  // Word w of the tensor is Mix(state + w), little-endian: any slice can be
  // made alone.
  size_t i = 0;
  for (; i < bytes && (from + i) % 8 != 0; ++i) {
    uint64_t position = from + i;
    out[i] = static_cast<char>(Mix(state + position / 8) >> (8 * (position % 8)));
  }
  for (; i + 8 <= bytes; i += 8) {
    uint64_t word = Mix(state + (from + i) / 8);
    for (int k = 0; k < 8; ++k) out[i + k] = static_cast<char>(word >> (8 * k));
  }
  for (; i < bytes; ++i) {
    uint64_t position = from + i;
    out[i] = static_cast<char>(Mix(state + position / 8) >> (8 * (position % 8)));
  }
}

absl::Status WriteAllTo(int fd, const char* data, size_t bytes, const std::string& path) {
  while (bytes > 0) {
    ssize_t wrote = ::write(fd, data, bytes);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("writing ", path));
    }
    data += wrote;
    bytes -= static_cast<size_t>(wrote);
  }
  return absl::OkStatus();
}

std::string PaddedHeader(absl::string_view header) {
  std::string padded(header);
  while (padded.size() % 8 != 0) padded.push_back(' ');
  std::string out(8, '\0');
  uint64_t length = padded.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(length >> (8 * i));
  return out + padded;
}

}  // namespace

std::string TensorContent(absl::string_view name, uint64_t bytes, uint64_t seed) {
  std::string out(bytes, '\0');
  FillContent(NameSeed(name, seed), 0, out.data(), out.size());
  return out;
}

absl::StatusOr<std::string> SafetensorsHeaderJson(const std::vector<WriterTensor>& tensors,
                                                  const std::string& metadata_json) {
  // The text nlohmann's dump() gives an ordered object, written entry by
  // entry: inserting into an ordered_json searches its keys, so a header of
  // 200,000 tensors would take minutes to build.
  std::string header = "{";
  if (!metadata_json.empty()) {
    absl::StrAppend(&header,
                    "\"__metadata__\":", nlohmann::ordered_json::parse(metadata_json).dump());
  }
  uint64_t offset = 0;
  for (const WriterTensor& tensor : tensors) {
    BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t bytes, TensorBytes(tensor.dtype, tensor.shape));
    absl::StrAppend(&header, header.size() > 1 ? "," : "", nlohmann::json(tensor.name).dump(),
                    ":{\"dtype\":", nlohmann::json(tensor.dtype).dump(), ",\"shape\":[",
                    absl::StrJoin(tensor.shape, ","), "],\"data_offsets\":[", offset, ",",
                    offset + bytes, "]}");
    offset += bytes;
  }
  header += "}";
  return header;
}

std::string SafetensorsFileBytesRaw(absl::string_view header, absl::string_view data) {
  return absl::StrCat(PaddedHeader(header), data);
}

absl::StatusOr<std::string> SafetensorsFileBytes(const std::vector<WriterTensor>& tensors,
                                                 uint64_t seed) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::string header, SafetensorsHeaderJson(tensors));
  std::string data;
  for (const WriterTensor& tensor : tensors) {
    BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t bytes, TensorBytes(tensor.dtype, tensor.shape));
    data += TensorContent(tensor.name, bytes, seed);
  }
  return SafetensorsFileBytesRaw(header, data);
}

absl::Status WriteFileBytes(const std::string& path, absl::string_view bytes) {
  int raw = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("creating ", path));
  UniqueFd fd(raw);
  return WriteAllTo(fd.get(), bytes.data(), bytes.size(), path);
}

absl::Status WriteSafetensorsFile(const std::string& path,
                                  const std::vector<WriterTensor>& tensors, uint64_t seed) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::string header, SafetensorsHeaderJson(tensors));
  int raw = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (raw < 0) return ErrnoStatus(errno, absl::StrCat("creating ", path));
  UniqueFd fd(raw);
  std::string prefix = PaddedHeader(header);
  BLOCKSWAP_RETURN_IF_ERROR(WriteAllTo(fd.get(), prefix.data(), prefix.size(), path));
  std::string chunk(size_t{8} << 20, '\0');
  for (const WriterTensor& tensor : tensors) {
    BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t bytes, TensorBytes(tensor.dtype, tensor.shape));
    uint64_t state = NameSeed(tensor.name, seed);
    for (uint64_t done = 0; done < bytes;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), bytes - done));
      FillContent(state, done, chunk.data(), n);
      BLOCKSWAP_RETURN_IF_ERROR(WriteAllTo(fd.get(), chunk.data(), n, path));
      done += n;
    }
  }
  return absl::OkStatus();
}

std::vector<WriterTensor> TransformerTensors(int blocks, int per_block, uint64_t rows) {
  std::vector<WriterTensor> tensors;
  tensors.push_back({"embed.weight", "BF16", {rows, 64}});
  for (int b = 0; b < blocks; ++b) {
    for (int i = 0; i < per_block; ++i) {
      std::string prefix = absl::StrCat("transformer_blocks.", b, ".attn.w", i);
      tensors.push_back({prefix + ".weight", "F32", {rows, 64}});
      tensors.push_back({prefix + ".bias", "F32", {rows}});
    }
  }
  tensors.push_back({"norm_out.scale", "F16", {}});
  return tensors;
}

std::vector<WriterTensor> ManyTinyTensors(size_t count, size_t per_block) {
  std::vector<WriterTensor> tensors;
  tensors.reserve(count);
  for (size_t t = 0; t < count; ++t) {
    tensors.push_back(
        {absl::StrCat("layers.", t / per_block, ".experts.", t % per_block, ".weight"), "U8", {1}});
  }
  return tensors;
}

}  // namespace blockswap::testing
