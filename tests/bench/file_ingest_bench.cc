// P6: registering a model from a safetensors file (FileIngest: read, copy into
// the master on /dev/shm, SHA-256 of every block) against the stages it
// cannot avoid, each measured alone in the same run with every core:
//   read      the file (page cache warm), pread of 8 MiB pieces
//   write     as many bytes into a new /dev/shm file, pwrite of 8 MiB pieces
//   sha256    of as many bytes (in /dev/shm), 64 MiB pieces
// and prints median seconds and the ratio slowest stage / ingestion (the
// goal is >= 0.8: ingestion costs little more than its slowest part).
//
//   file_ingest_bench [--mib 2048] [--rounds 3] [--dir /var/tmp] [--shm /dev/shm]
//
// Checks the free space of both directories first and removes everything it
// made. The load average is printed before and after: the machine may be
// shared.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/store/file_ingest.h"
#include "daemon/store/parallel_for.h"
#include "shared/protocol/model_layout.h"
#include "tests/support/safetensors_writer.h"

namespace blockswap {
namespace {

namespace fs = std::filesystem;
using daemon::ParallelFor;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kPiece = uint64_t{8} << 20;
constexpr uint64_t kHashPiece = uint64_t{64} << 20;

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

uint64_t FreeBytes(const std::string& dir) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return 0;
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

template <typename Fn>
double Seconds(Fn&& fn) {
  auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "file_ingest_bench: %s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

double ReadStage(const std::string& path, uint64_t size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Check(absl::InternalError("open"), path.c_str());
  size_t pieces = (size + kPiece - 1) / kPiece;
  double seconds = Seconds([&] {
    Check(ParallelFor(pieces, [&](size_t p) -> absl::Status {
            thread_local std::vector<char> buffer(kPiece);
            uint64_t at = p * kPiece;
            uint64_t n = std::min(kPiece, size - at);
            if (::pread(fd, buffer.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) {
              return absl::DataLossError("short read");
            }
            return absl::OkStatus();
          }),
          "read stage");
  });
  ::close(fd);
  return seconds;
}

double WriteStage(const std::string& path, uint64_t size) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) Check(absl::InternalError("create"), path.c_str());
  std::vector<char> source(kPiece, 'x');
  size_t pieces = (size + kPiece - 1) / kPiece;
  double seconds = Seconds([&] {
    Check(ParallelFor(pieces, [&](size_t p) -> absl::Status {
            uint64_t at = p * kPiece;
            uint64_t n = std::min(kPiece, size - at);
            if (::pwrite(fd, source.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) {
              return absl::ResourceExhaustedError("short write");
            }
            return absl::OkStatus();
          }),
          "write stage");
  });
  ::close(fd);
  return seconds;
}

double HashStage(const std::string& path, uint64_t size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (data == MAP_FAILED) Check(absl::InternalError("mmap"), path.c_str());
  size_t pieces = (size + kHashPiece - 1) / kHashPiece;
  std::vector<Sha256Digest> digests(pieces);
  double seconds = Seconds([&] {
    Check(ParallelFor(pieces, [&](size_t p) -> absl::Status {
            uint64_t at = p * kHashPiece;
            digests[p] = Sha256Of(static_cast<const char*>(data) + at,
                                  std::min(kHashPiece, size - at));
            return absl::OkStatus();
          }),
          "sha256 stage");
  });
  ::munmap(data, size);
  return seconds;
}

double IngestStage(const std::string& file, const std::string& store_dir, std::string* id) {
  auto store = daemon::ModelStore::Open({.directory = store_dir}, nullptr);
  Check(store.status(), "opening the store");
  daemon::FileIngest ingest(**store);
  std::vector<UniqueFd> files;
  files.emplace_back(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  absl::StatusOr<daemon::IngestResult> result;
  double seconds = Seconds([&] {
    result = ingest.Register(std::move(files),
                             {.block_pattern = R"(^transformer_blocks\.(\d+)\.)"}, "bench");
  });
  Check(result.status(), "ingesting");
  *id = result->model->id();
  result = absl::UnknownError("released");
  store->reset();
  fs::remove_all(store_dir);
  return seconds;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

int Main(int argc, char** argv) {
  uint64_t mib = 2048;
  int rounds = 3;
  std::string dir = fs::temp_directory_path().string();
  std::string shm = "/dev/shm";
  CLI::App app{"P6: safetensors ingestion against its unavoidable stages"};
  app.add_option("--mib", mib, "file size in MiB")->check(CLI::Range(1, 1 << 20));
  app.add_option("--rounds", rounds, "rounds (the median is printed)")->check(CLI::Range(1, 99));
  app.add_option("--dir", dir, "where the file is written");
  app.add_option("--shm", shm, "the tmpfs of the masters");
  CLI11_PARSE(app, argc, argv);

  const uint64_t blocks = std::max<uint64_t>(2, mib / 64);
  const uint64_t tensor_bytes = (mib << 20) / (blocks * 4);
  const uint64_t rows = std::max<uint64_t>(1, tensor_bytes / 4096);
  std::vector<testing::WriterTensor> tensors;
  for (uint64_t b = 0; b < blocks; ++b) {
    for (int t = 0; t < 4; ++t) {
      tensors.push_back({absl::StrCat("transformer_blocks.", b, ".w", t, ".weight"), "F32",
                         {rows, 1024}});
    }
  }
  const uint64_t size = blocks * 4 * rows * 4096;
  // The file, one stage file and one master at a time, plus a margin.
  if (FreeBytes(dir) < size + (uint64_t{1} << 30) || FreeBytes(shm) < 2 * size + (uint64_t{1} << 30)) {
    std::fprintf(stderr, "file_ingest_bench: not enough room: %s has %llu bytes free, %s %llu\n",
                 dir.c_str(), static_cast<unsigned long long>(FreeBytes(dir)), shm.c_str(),
                 static_cast<unsigned long long>(FreeBytes(shm)));
    return 1;
  }
  const std::string tag = absl::StrCat("blockswap-bench-", ::getpid());
  const std::string file = absl::StrCat(dir, "/", tag, ".safetensors");
  const std::string stage = absl::StrCat(shm, "/", tag, "-stage");
  const std::string store_dir = absl::StrCat(shm, "/", tag, "-store");
  std::printf("file_ingest_bench: %llu MiB file (%llu blocks x 4 F32 [%llu,1024]), %u cores, "
              "%d rounds, load average %s\n",
              static_cast<unsigned long long>(size >> 20), static_cast<unsigned long long>(blocks),
              static_cast<unsigned long long>(rows), std::thread::hardware_concurrency(), rounds,
              LoadAverage().c_str());
  Check(testing::WriteSafetensorsFile(file, tensors, 1), "writing the file");
  const uint64_t file_size = fs::file_size(file);
  ReadStage(file, file_size);  // warms the page cache

  std::vector<double> read, write, hash, ingest;
  std::string id;
  for (int r = 0; r < rounds; ++r) {
    read.push_back(ReadStage(file, file_size));
    write.push_back(WriteStage(stage, size));
    hash.push_back(HashStage(stage, size));
    fs::remove(stage);
    ingest.push_back(IngestStage(file, store_dir, &id));
    std::printf("round %d: read %.3f s, write %.3f s, sha256 %.3f s, ingest %.3f s\n", r + 1,
                read.back(), write.back(), hash.back(), ingest.back());
  }
  fs::remove(file);

  const double gib = static_cast<double>(size) / (1 << 30);
  struct Row {
    const char* name;
    double seconds;
  } rows_out[] = {{"read file (page cache)", Median(read)},
                  {"write into /dev/shm", Median(write)},
                  {"sha256, all cores", Median(hash)},
                  {"ingest (FileIngest)", Median(ingest)}};
  const Row* slowest = &rows_out[0];
  for (int i = 0; i < 3; ++i) {
    if (rows_out[i].seconds > slowest->seconds) slowest = &rows_out[i];
  }
  for (const Row& row : rows_out) {
    std::printf("%-24s %8.3f s  %6.2f GiB/s\n", row.name, row.seconds, gib / row.seconds);
  }
  std::printf("slowest stage: %s; ratio slowest / ingest = %.2f (goal >= 0.80); model %s; "
              "load average %s\n",
              slowest->name, slowest->seconds / rows_out[3].seconds, id.substr(0, 16).c_str(),
              LoadAverage().c_str());
  return 0;
}

}  // namespace
}  // namespace blockswap

int main(int argc, char** argv) { return blockswap::Main(argc, argv); }
