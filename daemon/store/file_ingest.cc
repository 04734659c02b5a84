#include "daemon/store/file_ingest.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "daemon/store/parallel_for.h"
#include "shared/base/regular_file.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

// One preadv reads at most this much (a thread's bounce buffer), so the
// block's hash runs on bytes still in the core's cache.
constexpr uint64_t kReadRunBytes = uint64_t{1} << 20;
constexpr size_t kMaxIovecs = 1024;  // IOV_MAX on Linux
// How often a registration waiting for a concurrent read of the same files
// asks whether its caller still wants it.
constexpr absl::Duration kCancellationPoll = absl::Milliseconds(100);

absl::Status PreadAll(int fd, std::vector<iovec> iov, uint64_t position, absl::string_view path) {
  size_t first = 0;
  while (first < iov.size()) {
    ssize_t got = ::preadv(fd, iov.data() + first, static_cast<int>(iov.size() - first),
                           static_cast<off_t>(position));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("reading ", path, " at byte ", position));
    }
    if (got == 0) {
      return absl::DataLossError(absl::StrCat(path, " ended at byte ", position,
                                              ", before its header says (was it truncated "
                                              "while blockswapd read it?)"));
    }
    position += static_cast<uint64_t>(got);
    for (auto n = static_cast<size_t>(got); n > 0;) {
      size_t take = std::min(n, iov[first].iov_len);
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
      iov[first].iov_len -= take;
      n -= take;
      if (iov[first].iov_len == 0) ++first;
    }
    while (first < iov.size() && iov[first].iov_len == 0) ++first;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PreadString(int fd, uint64_t position, uint64_t bytes,
                                        absl::string_view path) {
  std::string out(bytes, '\0');
  if (bytes == 0) return out;
  BLOCKSWAP_RETURN_IF_ERROR(PreadAll(fd, {iovec{out.data(), out.size()}}, position, path));
  return out;
}

// Reads the tensors of block b (sources[t] -> spec.tensors[t].offset) in runs
// of bytes adjacent in the file: each run lands in `bounce` as the block's
// flat image (tensors at their offsets, zero padding between them), is hashed
// there while in cache, and is written into the master with one pwrite.
absl::StatusOr<Sha256Digest> FillBlock(const std::vector<int>& fds,
                                       const std::vector<std::string>& paths,
                                       const BlockSpec& spec,
                                       const std::vector<TensorSource>& sources,
                                       const MasterDraft& draft, size_t b,
                                       std::vector<std::byte>& bounce, uint64_t* bytes_read) {
  static const std::byte kZeros[kTensorAlignment] = {};
  Sha256 hash;
  uint64_t hashed = 0;  // the block is hashed (and written) up to here
  size_t t = 0;
  uint64_t done = 0;    // of tensor t
  while (t < sources.size()) {
    if (sources[t].bytes == 0) {
      ++t;
      continue;
    }
    const size_t shard = sources[t].shard;
    const uint64_t start = sources[t].file_offset + done;
    const uint64_t image_start = hashed;  // padding before the first tensor is in the image
    uint64_t next = start;
    uint64_t image_end = image_start;
    std::vector<iovec> iov;
    while (t < sources.size() && iov.size() < kMaxIovecs) {
      const TensorSource& source = sources[t];
      if (source.bytes == 0) {
        ++t;
        continue;
      }
      if (source.shard != shard || source.file_offset + done != next) break;
      const uint64_t at = spec.tensors[t].offset + done;  // in the block
      if (at - image_start >= bounce.size()) break;
      uint64_t take = std::min(source.bytes - done, bounce.size() - (at - image_start));
      std::memset(bounce.data() + (image_end - image_start), 0, at - image_end);  // padding
      iov.push_back(iovec{bounce.data() + (at - image_start), static_cast<size_t>(take)});
      image_end = at + take;
      done += take;
      next += take;
      if (done == source.bytes) ++t, done = 0;
    }
    BLOCKSWAP_RETURN_IF_ERROR(PreadAll(fds[shard], std::move(iov), start, paths[shard]));
    *bytes_read += next - start;
    hash.Update(bounce.data(), image_end - image_start);
    BLOCKSWAP_RETURN_IF_ERROR(
        draft.Write(b, image_start, bounce.data(), image_end - image_start));
    hashed = image_end;
  }
  // Trailing padding: zero, left as a hole that CommitDraft reserves.
  for (; hashed < spec.bytes; hashed += std::min<uint64_t>(sizeof(kZeros), spec.bytes - hashed)) {
    hash.Update(kZeros, std::min<uint64_t>(sizeof(kZeros), spec.bytes - hashed));
  }
  return hash.Finish();
}

std::string KeyOf(const struct stat& st) {
  return absl::StrCat(st.st_dev, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".",
                      st.st_mtim.tv_nsec, ":", st.st_ctim.tv_sec, ".", st.st_ctim.tv_nsec, ";");
}

}  // namespace

bool FileIngest::Lookup(const std::string& key, IngestResult* result) const {
  auto it = known_.find(key);
  if (it == known_.end()) return false;
  auto model = store_.Find(it->second.model_id);
  std::shared_ptr<const Model> extras;
  if (!it->second.extras_id.empty()) extras = store_.Find(it->second.extras_id);
  if (model == nullptr || (!it->second.extras_id.empty() && extras == nullptr)) return false;
  *result = IngestResult{.model = std::move(model), .extras = std::move(extras), .read_file = false};
  return true;
}

absl::StatusOr<IngestResult> FileIngest::Register(std::vector<UniqueFd> fds, const IngestSpec& spec,
                                                  absl::string_view name, uid_t uid, gid_t gid,
                                                  const Cancellation& cancellation) {
  if (fds.empty() || fds.size() > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("a registration names ", fds.size(), " files (1..", kMaxShards, ")"));
  }
  std::vector<OpenFile> files;
  std::string key;
  for (size_t i = 0; i < fds.size(); ++i) {
    OpenFile& file = files.emplace_back();
    file.fd = std::move(fds[i]);
    std::string link = absl::StrCat("/proc/self/fd/", file.fd.get());
    char target[PATH_MAX];
    ssize_t length = ::readlink(link.c_str(), target, sizeof(target) - 1);
    file.path = length > 0 ? std::string(target, static_cast<size_t>(length))
                           : absl::StrCat("file ", i, " of the registration");
    struct stat st {};
    if (::fstat(file.fd.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat of ", file.path));
    int flags = ::fcntl(file.fd.get(), F_GETFL);
    BLOCKSWAP_RETURN_IF_ERROR(CheckRegularFile(st, file.path));
    if (flags < 0 || (flags & O_PATH) != 0 || (flags & O_ACCMODE) == O_WRONLY) {
      return absl::InvalidArgumentError(
          absl::StrCat("the descriptor of ", file.path, " was not opened for reading"));
    }
    file.size = static_cast<uint64_t>(st.st_size);
    absl::StrAppend(&key, KeyOf(st));
  }
  std::vector<std::string> paths;
  for (const OpenFile& file : files) paths.push_back(file.path);
  std::string source = absl::StrCat("file ", absl::StrJoin(paths, ", "));
  if (source.size() > 1000) source = absl::StrCat(source.substr(0, 1000), "...");
  const Registrant registrant{uid, gid, std::move(source)};
  absl::StrAppend(&key, "\n", spec.block_pattern.size(), ":", spec.block_pattern, "\n",
                  spec.select.size(), ":", spec.select, "\n", spec.select_rank);

  IngestResult known;
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      if (Lookup(key, &known)) {
        ++stats_.known;
        break;
      }
      // The same file being read by another call: its result is ours; if it
      // fails, this call reads itself.
      if (!in_progress_.contains(key)) break;
      done_.WaitWithTimeout(&mu_, kCancellationPoll);
      BLOCKSWAP_RETURN_IF_ERROR(cancellation.Check());
    }
    if (known.model == nullptr) in_progress_.insert(key);
  }
  if (known.model != nullptr) {
    // Read before, perhaps by another user: this one opened the file too, so
    // it gets its own access to the content.
    // Under the names this registration would have given them (as Read does).
    Registrant named = registrant;
    named.name = name.empty() ? files[0].path.substr(files[0].path.rfind('/') + 1)
                              : std::string(name);
    BLOCKSWAP_RETURN_IF_ERROR(store_.AddRegistrant(known.model, named));
    if (known.extras != nullptr) {
      named.name = absl::StrCat(named.name, " (extras)");
      BLOCKSWAP_RETURN_IF_ERROR(store_.AddRegistrant(known.extras, named));
    }
    return known;
  }
  auto result = Read(files, spec, name, registrant, cancellation);
  absl::MutexLock lock(&mu_);
  in_progress_.erase(key);
  done_.SignalAll();
  if (result.ok()) {
    known_[key] = Known{result->model->id(), result->extras ? result->extras->id() : ""};
  }
  return result;
}

absl::StatusOr<IngestResult> FileIngest::Read(const std::vector<OpenFile>& files,
                                              const IngestSpec& spec, absl::string_view name,
                                              const Registrant& registrant,
                                              const Cancellation& cancellation) {
  // Every header's length first: the registration's are refused together,
  // before any is read, when they are too long.
  std::vector<uint64_t> lengths;
  uint64_t header_bytes = 0;
  for (const OpenFile& file : files) {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        std::string prefix,
        PreadString(file.fd.get(), 0, std::min<uint64_t>(file.size, 8), file.path));
    auto length = SafetensorsHeaderBytes(prefix, file.size);
    if (!length.ok()) return Annotate(length.status(), file.path);
    lengths.push_back(*length);
    header_bytes += *length;
  }
  if (header_bytes > kMaxHeaderBytesPerRegistration) {
    return absl::InvalidArgumentError(
        absl::StrCat("the headers of the ", files.size(), " files of this registration take ",
                     header_bytes, " bytes together (limit ", kMaxHeaderBytesPerRegistration, ")"));
  }
  std::vector<SafetensorsHeader> headers;
  std::vector<std::string> paths;
  std::vector<int> fds;
  for (size_t i = 0; i < files.size(); ++i) {
    const OpenFile& file = files[i];
    BLOCKSWAP_ASSIGN_OR_RETURN(std::string text, PreadString(file.fd.get(), kSafetensorsPrefixBytes,
                                                             lengths[i], file.path));
    auto header = ParseSafetensorsHeader(text, file.size, cancellation);
    if (!header.ok()) return Annotate(header.status(), file.path);
    headers.push_back(*std::move(header));
    paths.push_back(file.path);
    fds.push_back(file.fd.get());
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(IngestPlan plan, PlanIngest(headers, paths, spec));
  // The model's and the extras' room together, from the headers alone: a
  // registration that could never commit is refused before any tensor is
  // read and before anyone's model is evicted for it.
  uint64_t declared_bytes = 0;
  for (const ModelLayout* layout : {&plan.layout, &plan.extras}) {
    for (const BlockSpec& block : layout->blocks) declared_bytes += BlockFileBytes(block.bytes);
  }
  BLOCKSWAP_RETURN_IF_ERROR(store_.CheckCapacity(
      registrant.uid, declared_bytes, plan.layout.blocks.size() + plan.extras.blocks.size()));

  std::string model_name(name);
  if (model_name.empty()) model_name = paths[0].substr(paths[0].rfind('/') + 1);
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<MasterDraft> draft,
                             store_.BeginDraft(plan.layout, model_name, registrant));
  std::unique_ptr<MasterDraft> extras_draft;
  if (!plan.extras.blocks.empty()) {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        extras_draft,
        store_.BeginDraft(plan.extras, absl::StrCat(model_name, " (extras)"), registrant));
  }

  // One unit per block (the extras block last in the list), taken in the
  // order of their first bytes in the files: the pass runs front to back.
  struct Unit {
    MasterDraft* draft;
    size_t block;
    const std::vector<TensorSource>* sources;
  };
  std::vector<Unit> units;
  for (size_t b = 0; b < plan.layout.blocks.size(); ++b) {
    units.push_back({draft.get(), b, &plan.sources[b]});
  }
  if (extras_draft) units.push_back({extras_draft.get(), 0, &plan.extras_sources});
  auto first_byte = [](const Unit& unit) {
    const TensorSource& s = unit.sources->front();
    return std::make_pair(s.shard, s.file_offset);
  };
  std::stable_sort(units.begin(), units.end(),
                   [&](const Unit& a, const Unit& b) { return first_byte(a) < first_byte(b); });
  std::vector<Sha256Digest> hashes(plan.layout.blocks.size());
  std::vector<Sha256Digest> extras_hashes(extras_draft ? 1 : 0);
  std::vector<uint64_t> bytes_read(units.size(), 0);
  BLOCKSWAP_RETURN_IF_ERROR(ParallelFor(units.size(), [&](size_t u) -> absl::Status {
    BLOCKSWAP_RETURN_IF_ERROR(cancellation.Check());
    const Unit& unit = units[u];
    thread_local std::vector<std::byte> bounce;
    bounce.resize(kReadRunBytes);
    BLOCKSWAP_ASSIGN_OR_RETURN(
        Sha256Digest digest,
        FillBlock(fds, paths, unit.draft->layout().blocks[unit.block], *unit.sources,
                  *unit.draft, unit.block, bounce, &bytes_read[u]));
    (unit.draft == draft.get() ? hashes[unit.block] : extras_hashes[0]) = digest;
    return absl::OkStatus();
  }));

  IngestResult result;
  result.read_file = true;
  BLOCKSWAP_ASSIGN_OR_RETURN(RegisterResult model, store_.CommitDraft(std::move(draft), hashes));
  result.model = std::move(model.model);
  if (extras_draft) {
    BLOCKSWAP_ASSIGN_OR_RETURN(RegisterResult extras,
                               store_.CommitDraft(std::move(extras_draft), extras_hashes));
    result.extras = std::move(extras.model);
  }
  absl::MutexLock lock(&mu_);
  ++stats_.reads;
  stats_.bytes_read += std::accumulate(bytes_read.begin(), bytes_read.end(), uint64_t{0});
  return result;
}

FileIngestStats FileIngest::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace blockswap::daemon
