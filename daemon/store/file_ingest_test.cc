#include "daemon/store/file_ingest.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/safetensors_writer.h"

namespace blockswap::daemon {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 42;
const IngestSpec kWeights{.block_pattern = R"(^transformer_blocks\.(\d+)\.)",
                          .select = R"(\.weight$)"};

std::set<std::string> Entries(const std::string& directory) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

UniqueFd OpenRead(const std::string& path, int flags = O_RDONLY) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  return UniqueFd(fd);
}

std::vector<UniqueFd> Files(const std::string& path) {
  std::vector<UniqueFd> files;
  files.push_back(OpenRead(path));
  return files;
}

// A store in its own /dev/shm directory and a scratch directory for files.
class FileIngestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string tag = absl::StrCat(::getpid(), "-", counter++, "-", name);
    store_dir_ = absl::StrCat("/dev/shm/blockswap-ingest-", tag);
    file_dir_ = absl::StrCat(fs::temp_directory_path().string(), "/blockswap-ingest-", tag);
    fs::remove_all(store_dir_);
    fs::create_directories(file_dir_);
    file_ = file_dir_ + "/model.safetensors";
    ASSERT_TRUE(testing::WriteSafetensorsFile(file_, testing::TransformerTensors(4, 2, 16), kSeed)
                    .ok());
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(store_dir_);
    fs::remove_all(store_dir_ + "-upload");
    fs::remove_all(file_dir_);
  }
  ModelStore& Store(uint64_t max_pinned_bytes = 0) {
    if (store_ == nullptr) {
      auto store = ModelStore::Open({.directory = store_dir_, .max_pinned_bytes = max_pinned_bytes},
                                    nullptr);
      EXPECT_TRUE(store.ok()) << store.status();
      store_ = std::move(store).value();
    }
    return *store_;
  }

  std::string store_dir_;
  std::string file_dir_;
  std::string file_;
  std::unique_ptr<ModelStore> store_;
};

// The staging content of `layout` filled as a client would upload the file's
// tensors: each tensor's bytes from the writer, found by its full name.
std::vector<std::byte> UploadContent(const ModelLayout& layout,
                                     const std::function<std::string(size_t, const TensorSpec&)>&
                                         full_name) {
  BlockPlacement staging = *StagingOffsets(layout);
  std::vector<std::byte> content(staging.total_bytes, std::byte{0});
  for (size_t b = 0; b < layout.blocks.size(); ++b) {
    for (const TensorSpec& tensor : layout.blocks[b].tensors) {
      std::string bytes = testing::TensorContent(full_name(b, tensor), tensor.length, kSeed);
      std::memcpy(content.data() + staging.offsets[b] + tensor.offset, bytes.data(), bytes.size());
    }
  }
  return content;
}

TEST_F(FileIngestTest, AFileAndAnUploadOfTheSameBlocksAreOneModelId) {
  FileIngest ingest(Store());
  auto result = ingest.Register(Files(file_), kWeights, "");
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->read_file);
  const ModelLayout& layout = result->model->layout();
  ASSERT_EQ(layout.blocks.size(), 4u);
  ASSERT_EQ(layout.blocks[0].tensors.size(), 2u);
  EXPECT_EQ(layout.blocks[0].tensors[1].name, "attn.w1.weight");
  EXPECT_EQ(result->model->name(), "model.safetensors");
  EXPECT_THAT(result->model->source(), HasSubstr("file " + file_));

  // The same tensors uploaded into another store (another daemon).
  auto upload_store = ModelStore::Open({.directory = store_dir_ + "-upload"}, nullptr);
  ASSERT_TRUE(upload_store.ok()) << upload_store.status();
  auto blocks = UploadContent(layout, [](size_t b, const TensorSpec& t) {
    return absl::StrCat("transformer_blocks.", b, ".", t.name);
  });
  auto uploaded = (*upload_store)->Register("upload", layout, blocks.data(), blocks.size());
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_EQ(uploaded->model->id(), result->model->id());
  for (size_t b = 0; b < layout.blocks.size(); ++b) {
    EXPECT_EQ(std::memcmp(uploaded->model->block(b), result->model->block(b), layout.blocks[b].bytes),
              0)
        << "block " << b;
  }
  // The extras too: every bias, the embedding and the norm, under full names.
  ASSERT_NE(result->extras, nullptr);
  const ModelLayout& extras = result->extras->layout();
  auto extras_content = UploadContent(extras, [](size_t, const TensorSpec& t) { return t.name; });
  auto uploaded_extras =
      (*upload_store)->Register("extras", extras, extras_content.data(), extras_content.size());
  ASSERT_TRUE(uploaded_extras.ok()) << uploaded_extras.status();
  EXPECT_EQ(uploaded_extras->model->id(), result->extras->id());
  EXPECT_EQ(extras.blocks[0].tensors.size(), 4u * 2 + 2);
}

TEST_F(FileIngestTest, AFileModelSharesItsBlocksWithUploadsOfTheSameWeights) {
  FileIngest ingest(Store());
  auto result = ingest.Register(Files(file_), kWeights, "");
  ASSERT_TRUE(result.ok()) << result.status();
  const ModelLayout& layout = result->model->layout();
  const size_t held = Store().block_count();
  const uint64_t pinned = Store().masters_bytes();
  // A trainer streaming blocks 1-3 of the same weights uploads only those.
  ModelLayout streamed;
  streamed.blocks.assign(layout.blocks.begin() + 1, layout.blocks.end());
  auto content = UploadContent(streamed, [](size_t b, const TensorSpec& t) {
    return absl::StrCat("transformer_blocks.", b + 1, ".", t.name);
  });
  auto uploaded = Store().Register("streamed", streamed, content.data(), content.size());
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_FALSE(uploaded->already_present);
  EXPECT_EQ(Store().block_count(), held) << "a block of the file model was stored again";
  EXPECT_EQ(Store().masters_bytes(), pinned);
  for (size_t b = 0; b < streamed.blocks.size(); ++b) {
    EXPECT_EQ(uploaded->model->block_master(b), result->model->block_master(b + 1)) << b;
  }
  // Blocks 1-3 of the file model are now shared with the upload.
  EXPECT_EQ(ModelStore::SharedBytes({result->model, uploaded->model})[0],
            uploaded->model->masters_bytes());
}

TEST_F(FileIngestTest, TensorsLargerThanOneReadAndOddSizesMatchAnUpload) {
  // Runs of the reader split inside a tensor (1 MiB pieces), padding of every
  // length, a block whose tensors are all small.
  std::vector<testing::WriterTensor> tensors = {
      {"blocks.0.big", "F32", {700001}},  {"blocks.0.odd", "U8", {3}},
      {"blocks.0.f4", "F4", {10}},        {"blocks.0.huge", "F16", {1500007}},
      {"blocks.1.scalar", "BF16", {}},    {"blocks.1.b", "BOOL", {5}},
      {"blocks.1.c", "C64", {3, 3}},      {"tail", "F8_E4M3", {7}}};
  std::string path = file_dir_ + "/odd.safetensors";
  ASSERT_TRUE(testing::WriteSafetensorsFile(path, tensors, kSeed).ok());
  FileIngest ingest(Store());
  auto result = ingest.Register(Files(path), {.block_pattern = R"(^blocks\.(\d+)\.)"}, "");
  ASSERT_TRUE(result.ok()) << result.status();
  const ModelLayout& layout = result->model->layout();
  ASSERT_EQ(layout.blocks.size(), 2u);
  auto content = UploadContent(layout, [](size_t b, const TensorSpec& t) {
    return absl::StrCat("blocks.", b, ".", t.name);
  });
  BlockPlacement staging = *StagingOffsets(layout);
  for (size_t b = 0; b < layout.blocks.size(); ++b) {
    EXPECT_EQ(std::memcmp(result->model->block(b), content.data() + staging.offsets[b],
                          layout.blocks[b].bytes),
              0)
        << "block " << b;
  }
  auto upload_store = ModelStore::Open({.directory = store_dir_ + "-upload"}, nullptr);
  ASSERT_TRUE(upload_store.ok()) << upload_store.status();
  auto uploaded = (*upload_store)->Register("upload", layout, content.data(), content.size());
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_EQ(uploaded->model->id(), result->model->id());
}

TEST_F(FileIngestTest, RegisteringTheSameFileAgainReadsNothing) {
  FileIngest ingest(Store());
  auto first = ingest.Register(Files(file_), kWeights, "");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = ingest.Register(Files(file_), kWeights, "");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->read_file);
  EXPECT_EQ(second->model, first->model);
  EXPECT_EQ(ingest.stats().reads, 1u);
  EXPECT_EQ(ingest.stats().known, 1u);
  // Another selector is another model: read again.
  auto all = ingest.Register(Files(file_), {.block_pattern = kWeights.block_pattern}, "");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->read_file);
  EXPECT_NE(all->model->id(), first->model->id());
  EXPECT_EQ(ingest.stats().reads, 2u);
  // A changed file (new mtime) is read again; the same content is the same id.
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, file_.c_str(), times, 0), 0);
  auto touched = ingest.Register(Files(file_), kWeights, "");
  ASSERT_TRUE(touched.ok()) << touched.status();
  EXPECT_TRUE(touched->read_file);
  EXPECT_EQ(touched->model->id(), first->model->id());
  EXPECT_EQ(ingest.stats().reads, 3u);
}

TEST_F(FileIngestTest, ASecondUserRegisteringAKnownFileIsRecordedForTheModelAndItsExtras) {
  FileIngest ingest(Store());
  auto first = ingest.Register(Files(file_), kWeights, "", 1000, 100);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_NE(first->extras, nullptr);
  auto second = ingest.Register(Files(file_), kWeights, "", 1001, 101);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->read_file);
  // Each registration under the names it gave the model and its extras
  // (none given: the file's name), the second's too though nothing was read.
  const std::string name = file_.substr(file_.rfind('/') + 1);
  const std::string source = "file " + file_;
  EXPECT_EQ(second->model->registrants().List(),
            (std::vector<Registrant>{{1000, 100, source, name}, {1001, 101, source, name}}));
  const std::string extras = name + " (extras)";
  EXPECT_EQ(second->extras->registrants().List(),
            (std::vector<Registrant>{{1000, 100, source, extras}, {1001, 101, source, extras}}));
}

TEST_F(FileIngestTest, EightConcurrentRegistrationsReadTheFileOnce) {
  FileIngest ingest(Store());
  std::vector<absl::StatusOr<IngestResult>> results(8, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = ingest.Register(Files(file_), kWeights, ""); });
  }
  for (std::thread& thread : threads) thread.join();
  int reads = 0;
  for (const auto& result : results) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->model, results[0]->model);
    reads += result->read_file;
  }
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(ingest.stats().reads, 1u);
  EXPECT_EQ(Store().stats().copies, 2u);  // the model and its extras, once each
}

TEST_F(FileIngestTest, OverThePinnedBudgetIsResourceExhaustedAndLeavesNothing) {
  FileIngest ingest(Store(/*max_pinned_bytes=*/8192));  // 4 blocks of 8 KiB
  auto result = ingest.Register(Files(file_), kWeights, "");
  ASSERT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted) << result.status();
  // The blocks' 32 KiB and the extras' 8 KiB, checked together from the
  // header before anything is read.
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("model of 40960 bytes would exceed --max-pinned-bytes=8192 (0 already "
                        "pinned)"));
  EXPECT_EQ(Entries(store_dir_), std::set<std::string>{".lock"});
  EXPECT_EQ(Store().masters_bytes(), 0u);
  EXPECT_TRUE(Store().List().empty());
  EXPECT_EQ(ingest.stats().reads, 0u);
}

TEST_F(FileIngestTest, ShardsAreOneModel) {
  auto tensors = testing::TransformerTensors(4, 1, 8);
  std::vector<testing::WriterTensor> first(tensors.begin(), tensors.begin() + 5);
  std::vector<testing::WriterTensor> second(tensors.begin() + 5, tensors.end());
  ASSERT_TRUE(testing::WriteSafetensorsFile(file_dir_ + "/a.safetensors", first, kSeed).ok());
  ASSERT_TRUE(testing::WriteSafetensorsFile(file_dir_ + "/b.safetensors", second, kSeed).ok());
  std::vector<UniqueFd> files;
  files.push_back(OpenRead(file_dir_ + "/a.safetensors"));
  files.push_back(OpenRead(file_dir_ + "/b.safetensors"));
  FileIngest ingest(Store());
  auto result = ingest.Register(std::move(files), kWeights, "sharded");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->model->block_count(), 4u);
  // Block 3 lives in the second shard: its bytes are the writer's.
  std::string expected = testing::TensorContent("transformer_blocks.3.attn.w0.weight", 8 * 64 * 4,
                                                kSeed);
  EXPECT_EQ(std::memcmp(result->model->block(3), expected.data(), expected.size()), 0);
}

TEST_F(FileIngestTest, BadFilesAreRefusedPreciselyAndLeaveNothing) {
  FileIngest ingest(Store());
  auto refuse = [&](std::vector<UniqueFd> files, const IngestSpec& spec) {
    auto result = ingest.Register(std::move(files), spec, "");
    EXPECT_FALSE(result.ok());
    EXPECT_EQ(Entries(store_dir_), std::set<std::string>{".lock"});
    return result.status();
  };
  // Truncated: the header promises more data than the file holds.
  std::string cut = file_dir_ + "/cut.safetensors";
  fs::copy_file(file_, cut);
  fs::resize_file(cut, fs::file_size(cut) - 100);
  absl::Status status = refuse(Files(cut), kWeights);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr(cut));
  EXPECT_THAT(std::string(status.message()), HasSubstr("reach past the data section"));
  // Shorter than its own header length.
  std::string stub = file_dir_ + "/stub.safetensors";
  ASSERT_TRUE(testing::WriteFileBytes(stub, std::string("\x40\0\0\0\0\0\0\0{}", 10)).ok());
  status = refuse(Files(stub), kWeights);
  EXPECT_THAT(std::string(status.message()), HasSubstr("header length 64 reaches past the end"));
  // Not opened for reading, or not a regular file.
  std::vector<UniqueFd> write_only;
  write_only.push_back(OpenRead(file_, O_WRONLY));
  status = refuse(std::move(write_only), kWeights);
  EXPECT_THAT(std::string(status.message()), HasSubstr("was not opened for reading"));
  std::vector<UniqueFd> path_only;
  path_only.push_back(OpenRead(file_, O_PATH));
  EXPECT_THAT(std::string(refuse(std::move(path_only), kWeights).message()),
              HasSubstr("was not opened for reading"));
  std::vector<UniqueFd> directory;
  directory.push_back(OpenRead(file_dir_, O_RDONLY | O_DIRECTORY));
  EXPECT_THAT(std::string(refuse(std::move(directory), kWeights).message()),
              HasSubstr("is a directory, not a regular file"));
  // A pattern that matches nothing.
  status = refuse(Files(file_), {.block_pattern = R"(^blocks\.(\d+)\.)"});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ingest.stats().reads, 0u);
  EXPECT_TRUE(Store().List().empty());
}

// Three shards whose length prefixes claim headers of 100 MiB each (sparse
// files): refused together from the prefixes, before any header is read.
TEST_F(FileIngestTest, ShardsWhoseHeadersTakeTooMuchTogetherAreRefusedBeforeReading) {
  std::vector<UniqueFd> files;
  for (int i = 0; i < 3; ++i) {
    const std::string path = absl::StrCat(file_dir_, "/shard-", i, ".safetensors");
    std::string prefix(8, '\0');
    for (int b = 0; b < 8; ++b)
      prefix[b] = static_cast<char>(kSafetensorsMaxHeaderBytes >> (8 * b));
    ASSERT_TRUE(testing::WriteFileBytes(path, prefix).ok());
    fs::resize_file(path, 8 + kSafetensorsMaxHeaderBytes);
    files.push_back(OpenRead(path));
  }
  FileIngest ingest(Store());
  auto result = ingest.Register(std::move(files), kWeights, "");
  ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("the headers of the 3 files of this registration take 314572800 bytes "
                        "together (limit 268435456)"));
  EXPECT_EQ(Entries(store_dir_), std::set<std::string>{".lock"});
}

// Cancelled (its client left) after its first block: the registration ends
// with the cancellation's status and leaves nothing.
TEST_F(FileIngestTest, ACancelledRegistrationStopsBetweenBlocksAndLeavesNothing) {
  std::atomic<int> asked{0};
  const Cancellation cancellation(
      [&] { return ++asked > 1 ? absl::CancelledError("the client left") : absl::OkStatus(); });
  FileIngest ingest(Store());
  auto result = ingest.Register(Files(file_), kWeights, "", 0, 0, cancellation);
  EXPECT_EQ(result.status(), absl::CancelledError("the client left"));
  EXPECT_GE(asked.load(), 2);
  EXPECT_EQ(Entries(store_dir_), std::set<std::string>{".lock"});
  EXPECT_TRUE(Store().List().empty());
  // Nothing of it is remembered: the next registration reads the file.
  auto again = ingest.Register(Files(file_), kWeights, "");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->read_file);
}

TEST_F(FileIngestTest, UnreferencedModelsMakeRoomLeastRecentlyUsedFirst) {
  // Three models of 32 KiB (4 blocks of 8 KiB) plus 8 KiB of extras each, in a
  // budget for two.
  FileIngest ingest(Store(/*max_pinned_bytes=*/2 * (32768 + 8192)));
  std::vector<std::string> ids;
  for (int m = 0; m < 3; ++m) {
    std::string path = absl::StrCat(file_dir_, "/m", m, ".safetensors");
    ASSERT_TRUE(testing::WriteSafetensorsFile(path, testing::TransformerTensors(4, 2, 16), m).ok());
    if (m == 2) {
      ASSERT_NE(Store().Find(ids[0]), nullptr);  // model 0 used: model 1 is the oldest
    }
    auto result = ingest.Register(Files(path), kWeights, "");
    ASSERT_TRUE(result.ok()) << result.status();
    ids.push_back(result->model->id());
  }
  EXPECT_NE(Store().Find(ids[0]), nullptr);
  EXPECT_EQ(Store().Find(ids[1]), nullptr);
  EXPECT_NE(Store().Find(ids[2]), nullptr);
  EXPECT_GE(Store().stats().evicted, 1u);
  EXPECT_EQ(Entries(store_dir_).count(ids[1] + ".manifest"), 0u);
}

TEST_F(FileIngestTest, AHeldModelIsNeitherEvictedNorMakesRoom) {
  FileIngest ingest(Store(/*max_pinned_bytes=*/32768 + 8192));
  auto held = ingest.Register(Files(file_), kWeights, "");
  ASSERT_TRUE(held.ok()) << held.status();
  absl::Status evict = Store().Evict(held->model->id());
  EXPECT_EQ(evict.code(), absl::StatusCode::kFailedPrecondition) << evict;
  EXPECT_THAT(std::string(evict.message()), HasSubstr("still referenced 1 time(s)"));
  std::string other = file_dir_ + "/other.safetensors";
  ASSERT_TRUE(testing::WriteSafetensorsFile(other, testing::TransformerTensors(4, 2, 16), 9).ok());
  EXPECT_EQ(ingest.Register(Files(other), kWeights, "").status().code(),
            absl::StatusCode::kResourceExhausted);
  std::string id = held->model->id();
  held = absl::UnknownError("dropped");
  EXPECT_TRUE(Store().Evict(id).ok());
  EXPECT_EQ(Store().Evict(id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Store().stats().evicted, 1u);
}

TEST_F(FileIngestTest, VerifyFindsAChangedMasterByte) {
  FileIngest ingest(Store());
  auto result = ingest.Register(Files(file_), kWeights, "");
  ASSERT_TRUE(result.ok()) << result.status();
  const std::string id = result->model->id();
  auto verified = Store().Verify(id);
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->blocks, 4u);
  // Flip a byte of block 2 in its master file, as a stray writer would.
  int fd =
      ::open(absl::StrCat(store_dir_, "/", result->model->block_master(2)->id(), ".block").c_str(),
             O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  char byte = 0;
  off_t at = 5;
  ASSERT_EQ(::pread(fd, &byte, 1, at), 1);
  byte ^= 0x5a;
  ASSERT_EQ(::pwrite(fd, &byte, 1, at), 1);
  ::close(fd);
  auto broken = Store().Verify(id);
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("block(s) 2 of 4"));
}

}  // namespace
}  // namespace blockswap::daemon
