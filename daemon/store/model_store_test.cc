#include "daemon/store/model_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "shared/backend/backend.h"

namespace blockswap::daemon {
namespace {

namespace fs = std::filesystem;

// A model whose content is a staging area as Register expects it.
struct TestModel {
  ModelLayout layout;
  std::vector<std::byte> content;

  // The expected bytes of block b.
  const std::byte* block(size_t b) const {
    return content.data() + StagingOffsets(layout)->offsets[b];
  }
};

// `blocks` blocks of two tensors each, filled with bytes derived from
// `seed`, zero padding.
TestModel MakeModel(uint8_t seed, size_t blocks = 3, uint64_t columns = 100) {
  TestModel model;
  for (size_t b = 0; b < blocks; ++b) {
    auto block = PackBlock({TensorSpec{.name = "w", .dtype = "F32", .shape = {b + 1, columns}},
                            TensorSpec{.name = "bias", .dtype = "BF16", .shape = {10}}});
    model.layout.blocks.push_back(*block);
  }
  BlockPlacement staging = *StagingOffsets(model.layout);
  model.content.assign(staging.total_bytes, std::byte{0});
  for (size_t b = 0; b < blocks; ++b) {
    for (const TensorSpec& tensor : model.layout.blocks[b].tensors) {
      for (uint64_t i = 0; i < tensor.length; ++i) {
        model.content[staging.offsets[b] + tensor.offset + i] =
            static_cast<std::byte>(seed * 31 + b * 7 + i);
      }
    }
  }
  return model;
}

absl::StatusOr<RegisterResult> Register(ModelStore& store, const TestModel& model,
                                        absl::string_view name = "test model") {
  return store.Register(name, model.layout, model.content.data(), model.content.size());
}

std::set<std::string> Entries(const std::string& directory) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

void WriteFile(const std::string& path, absl::string_view data, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(::fchmod(fd, mode), 0);
  ::close(fd);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Each test gets its own directory under /dev/shm, removed at the end.
class ModelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    directory_ = absl::StrCat("/dev/shm/blockswap-test-", ::getpid(), "-", counter++, "-",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  ModelStoreOptions Options(uint64_t max_pinned_bytes = 0) const {
    return ModelStoreOptions{.directory = directory_, .max_pinned_bytes = max_pinned_bytes};
  }
  std::unique_ptr<ModelStore> OpenStore(uint64_t max_pinned_bytes = 0,
                                        Device* pin_device = nullptr) {
    auto store = ModelStore::Open(Options(max_pinned_bytes), pin_device);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  std::unique_ptr<ModelStore> OpenStoreAt(const std::string& directory) {
    auto store = ModelStore::Open(ModelStoreOptions{.directory = directory}, nullptr);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  std::string PathOf(absl::string_view name) const { return absl::StrCat(directory_, "/", name); }

  std::string directory_;
};

void ExpectBlocksEqual(const Model& model, const TestModel& expected) {
  ASSERT_EQ(model.block_count(), expected.layout.blocks.size());
  for (size_t b = 0; b < model.block_count(); ++b) {
    ASSERT_EQ(model.block_bytes(b), expected.layout.blocks[b].bytes);
    EXPECT_EQ(std::memcmp(model.block(b), expected.block(b), model.block_bytes(b)), 0)
        << "block " << b;
  }
}

TEST(ModelStorePlacement, StagingPutsEachBlockOnA4096ByteBoundary) {
  TestModel model = MakeModel(1, 3, 600);  // blocks of 2816, 5120 and 7680 bytes
  auto staging = StagingOffsets(model.layout);
  ASSERT_TRUE(staging.ok()) << staging.status();
  EXPECT_EQ(staging->offsets, (std::vector<uint64_t>{0, 4096, 12288}));
  EXPECT_EQ(staging->total_bytes, 20480u);
}

TEST(ModelStorePlacement, NoMasterBlockStraddlesA64GiBBoundary) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  ModelLayout layout;
  for (int b = 0; b < 3; ++b) {
    layout.blocks.push_back(
        *PackBlock({TensorSpec{.name = "w", .dtype = "U8", .shape = {40 * kGiB}}}));
  }
  auto master = MasterOffsets(layout);
  ASSERT_TRUE(master.ok()) << master.status();
  EXPECT_EQ(master->offsets, (std::vector<uint64_t>{0, 64 * kGiB, 128 * kGiB}));
  EXPECT_EQ(master->total_bytes, 168 * kGiB);
  // The staging area has no such rule.
  EXPECT_EQ(StagingOffsets(layout)->offsets, (std::vector<uint64_t>{0, 40 * kGiB, 80 * kGiB}));

  ModelLayout huge;
  huge.blocks.push_back(*PackBlock({TensorSpec{.name = "w", .dtype = "U8", .shape = {65 * kGiB}}}));
  auto refused = MasterOffsets(huge);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("more than the 68719476736 bytes of one pinned piece"),
            absl::string_view::npos)
      << refused.status();
}

TEST_F(ModelStoreTest, OpenCreatesAPrivateDirectory) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ModeOf(directory_), 0700u);
  EXPECT_EQ(Entries(directory_), std::set<std::string>{".lock"});
}

TEST_F(ModelStoreTest, RegisterThenFind) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  TestModel content = MakeModel(1);
  auto result = Register(*store, content, "flux-dev");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->already_present);
  const Model& model = *result->model;
  EXPECT_TRUE(IsModelId(model.id()));
  EXPECT_EQ(model.name(), "flux-dev");
  EXPECT_EQ(store->Find(model.id()), result->model);
  EXPECT_EQ(store->Find(std::string(64, '0')), nullptr);
  ASSERT_EQ(store->List().size(), 1u);
  ExpectBlocksEqual(model, content);
  for (size_t b = 0; b < model.block_count(); ++b) {
    EXPECT_EQ(model.master_offset(b) % kBlockPlacementAlignment, 0u);
    EXPECT_EQ(model.block_hashes()[b], Sha256Of(content.block(b), model.block_bytes(b)));
  }
  EXPECT_EQ(model.block(model.block_count()), nullptr);
  EXPECT_EQ(model.id(), ModelId(content.layout, model.block_hashes()));
  EXPECT_EQ(store->masters_bytes(), model.masters_bytes());
  EXPECT_EQ(Entries(directory_),
            (std::set<std::string>{".lock", model.id() + ".manifest", model.id() + ".masters"}));
  EXPECT_EQ(ModeOf(PathOf(model.id() + ".masters")), 0400u);
  EXPECT_EQ(ModeOf(PathOf(model.id() + ".manifest")), 0600u);
  EXPECT_EQ(fs::file_size(PathOf(model.id() + ".masters")), model.masters_bytes());
}

TEST_F(ModelStoreTest, SameContentTwiceIsOneModel) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  TestModel content = MakeModel(2);
  auto first = Register(*store, content, "first");
  auto second = Register(*store, content, "second");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE(first->already_present);
  EXPECT_TRUE(second->already_present);
  EXPECT_EQ(first->model, second->model);
  EXPECT_EQ(second->model->name(), "first");
  EXPECT_EQ(store->stats().copies, 1u);
  EXPECT_EQ(Entries(directory_).size(), 3u);  // .lock, one manifest, one masters file
}

TEST_F(ModelStoreTest, EveryRegistrantOfTheSameContentIsRecordedAndSurvivesARestart) {
  const Registrant alice{1000, 1000, "file /home/alice/m.safetensors"};
  const Registrant nobody{65534, 65534, "upload"};
  TestModel content = MakeModel(2);
  std::string id;
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    auto first =
        store->Register("m", content.layout, content.content.data(), content.content.size(), alice);
    ASSERT_TRUE(first.ok()) << first.status();
    auto again =
        store->Register("m", content.layout, content.content.data(), content.content.size(), alice);
    auto second = store->Register("m", content.layout, content.content.data(),
                                  content.content.size(), nobody);
    ASSERT_TRUE(again.ok() && second.ok());
    EXPECT_TRUE(second->already_present);
    EXPECT_EQ(second->model->registrants().List(), (std::vector<Registrant>{alice, nobody}))
        << "a registration recorded twice, or the second registrant missing";
    EXPECT_EQ(store->stats().copies, 1u) << "the same content was copied again";
    EXPECT_EQ(Entries(directory_).size(), 3u) << "a rewrite left a temporary file";
    id = first->model->id();
  }
  auto reopened = OpenStore();
  ASSERT_NE(reopened, nullptr);
  std::shared_ptr<const Model> adopted = reopened->Find(id);
  ASSERT_NE(adopted, nullptr);
  EXPECT_EQ(adopted->registrants().List(), (std::vector<Registrant>{alice, nobody}));
  EXPECT_EQ(adopted->source(), alice.source);
}

TEST_F(ModelStoreTest, OneUserAddsAtMostFourSourcesToAModel) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto registered = Register(*store, MakeModel(3));
  ASSERT_TRUE(registered.ok()) << registered.status();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(store->AddRegistrant(registered->model, {7, 7, absl::StrCat("file /p", i)}).ok());
  }
  ASSERT_TRUE(store->AddRegistrant(registered->model, {8, 8, "upload"}).ok());
  std::vector<Registrant> list = registered->model->registrants().List();
  EXPECT_EQ(std::count_if(list.begin(), list.end(), [](const Registrant& r) { return r.uid == 7; }),
            4);
  EXPECT_EQ(list.back(), (Registrant{8, 8, "upload"})) << "another uid must still get in";
}

TEST_F(ModelStoreTest, AManifestWrittenBeforeRegistrantsWereRecordedIsAdoptedWithNone) {
  TestModel content = MakeModel(4);
  std::string id;
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    auto registered = Register(*store, content);
    ASSERT_TRUE(registered.ok()) << registered.status();
    id = registered->model->id();
  }
  const std::string manifest = PathOf(id + ".manifest");
  nlohmann::json json = nlohmann::json::parse(ReadFile(manifest));
  ASSERT_TRUE(json.contains("registrants"));
  json.erase("registrants");
  WriteFile(manifest, json.dump(), 0600);
  auto reopened = OpenStore();
  ASSERT_NE(reopened, nullptr);
  std::shared_ptr<const Model> adopted = reopened->Find(id);
  ASSERT_NE(adopted, nullptr) << "an older manifest was not adopted";
  EXPECT_TRUE(adopted->registrants().List().empty());
  EXPECT_EQ(adopted->source(), "upload");
}

TEST_F(ModelStoreTest, ConcurrentRegistrationsOfTheSameContentCopyOnce) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  TestModel content = MakeModel(3, 8, 64 * 1024);  // ~14 MiB, so the calls overlap
  std::atomic<int> ready{0};
  std::vector<absl::StatusOr<RegisterResult>> results(4, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < 4) std::this_thread::yield();
      results[t] = Register(*store, content);
    });
  }
  for (std::thread& thread : threads) thread.join();
  int copied = 0;
  for (const auto& result : results) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->model, results[0]->model);
    copied += result->already_present ? 0 : 1;
  }
  EXPECT_EQ(copied, 1);
  EXPECT_EQ(store->stats().copies, 1u);
  EXPECT_EQ(store->List().size(), 1u);
  EXPECT_EQ(Entries(directory_).size(), 3u);
  ExpectBlocksEqual(*results[0]->model, content);
}

TEST_F(ModelStoreTest, DifferentContentGetsDifferentIds) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto a = Register(*store, MakeModel(4));
  auto b = Register(*store, MakeModel(5));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->model->id(), b->model->id());
  EXPECT_EQ(store->List().size(), 2u);
  EXPECT_EQ(store->stats().copies, 2u);
  EXPECT_EQ(store->masters_bytes(), a->model->masters_bytes() + b->model->masters_bytes());
}

TEST_F(ModelStoreTest, ExceedingThePinnedBudgetIsRefusedAndLeavesNoFiles) {
  TestModel content = MakeModel(6);                       // 3 blocks, 3 x 4096 bytes of masters
  auto store = OpenStore(/*max_pinned_bytes=*/3 * 4096);  // the model alone would fit
  ASSERT_NE(store, nullptr);
  auto first = Register(*store, MakeModel(7, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(store->masters_bytes(), 4096u);
  auto refused = Register(*store, content);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find(
                "model of 12288 bytes would exceed --max-pinned-bytes=12288 (4096 already pinned)"),
            absl::string_view::npos)
      << refused.status();
  EXPECT_EQ(store->masters_bytes(), 4096u);
  EXPECT_EQ(Entries(directory_).size(), 3u);  // only the first model's files and .lock
}

// pinning = "auto": max_pinned_bytes decides what is pinned, not what is
// held; the model beyond it is staged (pinned_bytes counts only the pinned).
TEST_F(ModelStoreTest, UnderAutoAModelOverThePinnedBudgetIsStagedNotRefused) {
  std::unique_ptr<Backend> backend = OpenHostBackend({});
  ModelStoreOptions options = Options(/*max_pinned_bytes=*/3 * 4096);
  options.pinning = PinningPolicy::kAuto;
  auto store = ModelStore::Open(options, backend->devices()[0].get());
  ASSERT_TRUE(store.ok()) << store.status();
  auto first = Register(**store, MakeModel(7, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->model->pinned());
  auto second = Register(**store, MakeModel(6));  // 3 x 4096: over what is left
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->model->staged());
  EXPECT_FALSE(second->model->pinned());
  EXPECT_EQ((*store)->pinned_bytes(), 4096u);
  EXPECT_EQ((*store)->masters_bytes(), 4096u + 3 * 4096);
  EXPECT_TRUE((*store)->CheckCapacity(1 << 20).ok()) << "the pin budget refuses nothing";
}

TEST_F(ModelStoreTest, CheckCapacityAnswersBeforeAnUpload) {
  auto store = OpenStore(/*max_pinned_bytes=*/8192);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->CheckCapacity(8192).ok());
  absl::Status refused = store->CheckCapacity(8193);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("would exceed --max-pinned-bytes=8192 (0 already pinned)"),
            absl::string_view::npos)
      << refused;
  auto unlimited = OpenStoreAt(directory_ + "-unlimited");
  ASSERT_NE(unlimited, nullptr);
  absl::Status too_big = unlimited->CheckCapacity(uint64_t{1} << 60);
  EXPECT_EQ(too_big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.message().find("bytes free"), absl::string_view::npos) << too_big;
  unlimited.reset();
  fs::remove_all(directory_ + "-unlimited");
}

TEST_F(ModelStoreTest, RefusesNonZeroPaddingAndShortContent) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  TestModel content = MakeModel(8);
  TestModel dirty = content;
  // Block 1: w is [0, 800), bias [1024, 1044); 900 is padding.
  dirty.content[StagingOffsets(dirty.layout)->offsets[1] + 900] = std::byte{1};
  auto refused = Register(*store, dirty);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("block 1: padding byte at offset 900 is 0x01"),
            absl::string_view::npos)
      << refused.status();
  auto short_content =
      store->Register("short", content.layout, content.content.data(), content.content.size() - 1);
  EXPECT_EQ(short_content.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_content.status().message().find("staging area needs"), absl::string_view::npos);
  ModelLayout invalid = content.layout;
  invalid.blocks[0].tensors[1].offset = 8;
  EXPECT_EQ(store->Register("bad", invalid, content.content.data(), content.content.size())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Entries(directory_), std::set<std::string>{".lock"});
}

TEST_F(ModelStoreTest, ReopenAdoptsSealedModelsAndRemovesEverythingElse) {
  TestModel kept = MakeModel(9);
  TestModel loose = MakeModel(10);
  std::string kept_id, loose_id;
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    auto a = Register(*store, kept, "kept");
    auto b = Register(*store, loose, "loose");
    ASSERT_TRUE(a.ok() && b.ok());
    kept_id = a->model->id();
    loose_id = b->model->id();
  }
  // A registration interrupted by a crash.
  WriteFile(PathOf(kept_id + ".masters.tmp"), "partial", 0600);
  // Masters without a manifest.
  WriteFile(PathOf(std::string(64, 'b') + ".masters"), std::string(4096, '\0'), 0600);
  // A manifest whose id is not the one its layout and hashes give.
  nlohmann::json forged = nlohmann::json::parse(ReadFile(PathOf(kept_id + ".manifest")));
  const std::string forged_id(64, 'a');
  forged["id"] = forged_id;
  WriteFile(PathOf(forged_id + ".manifest"), forged.dump(), 0600);
  WriteFile(PathOf(forged_id + ".masters"), ReadFile(PathOf(kept_id + ".masters")), 0600);
  // A sealed model whose manifest others may read.
  ASSERT_EQ(::chmod(PathOf(loose_id + ".manifest").c_str(), 0644), 0);

  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->stats().adopted, 1u);
  EXPECT_EQ(store->stats().removed, 6u);
  EXPECT_EQ(store->stats().copies, 0u);
  EXPECT_EQ(Entries(directory_),
            (std::set<std::string>{".lock", kept_id + ".manifest", kept_id + ".masters"}));
  auto model = store->Find(kept_id);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->name(), "kept");
  EXPECT_EQ(store->Find(loose_id), nullptr);
  EXPECT_EQ(store->masters_bytes(), model->masters_bytes());
  ExpectBlocksEqual(*model, kept);
  // Registering the adopted content again copies nothing.
  auto again = Register(*store, kept);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->already_present);
  EXPECT_EQ(again->model, model);
}

TEST_F(ModelStoreTest, ReopenWithASmallerBudgetRemovesWhatNoLongerFits) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Register(*store, MakeModel(11)).ok());
    ASSERT_TRUE(Register(*store, MakeModel(12)).ok());
  }
  auto store = OpenStore(/*max_pinned_bytes=*/4 * 4096);  // room for one of 3 x 4096
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->stats().adopted, 1u);
  EXPECT_EQ(store->stats().removed, 2u);
  EXPECT_EQ(store->masters_bytes(), 3u * 4096);
  EXPECT_EQ(Entries(directory_).size(), 3u);
}

TEST_F(ModelStoreTest, ASecondOpenOfTheSameDirectoryIsRefused) {
  auto first = OpenStore();
  ASSERT_NE(first, nullptr);
  TestModel content = MakeModel(13);
  auto registered = Register(*first, content);
  ASSERT_TRUE(registered.ok());
  std::set<std::string> before = Entries(directory_);

  auto second = ModelStore::Open(Options(), nullptr);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  EXPECT_NE(second.status().message().find("another blockswapd is using " + directory_),
            absl::string_view::npos)
      << second.status();
  EXPECT_EQ(Entries(directory_), before);
  EXPECT_EQ(first->Find(registered->model->id()), registered->model);
  ExpectBlocksEqual(*registered->model, content);
}

TEST_F(ModelStoreTest, AWorldWritableDirectoryIsRefused) {
  ASSERT_EQ(::mkdir(directory_.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(directory_.c_str(), 0777), 0);
  auto store = ModelStore::Open(Options(), nullptr);
  ASSERT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(
      store.status().message().find(absl::StrCat(
          "masters directory ", directory_, " belongs to uid ", ::geteuid(), " with mode 0777")),
      absl::string_view::npos)
      << store.status();
  EXPECT_NE(store.status().message().find(absl::StrCat("rm -rf ", directory_)),
            absl::string_view::npos)
      << store.status();
  EXPECT_TRUE(fs::is_empty(directory_));
}

// A squatter's directory: made by another uid before blockswapd started. A
// process that is not root cannot make one for itself to test against (it
// cannot chown), so this case runs only as root; the mode case above runs as
// anyone.
TEST_F(ModelStoreTest, ADirectoryOfAnotherUidIsRefusedSayingWhatToRemove) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another uid";
  ASSERT_EQ(::mkdir(directory_.c_str(), 0700), 0);
  ASSERT_EQ(::chown(directory_.c_str(), 65534, 65534), 0);
  auto store = ModelStore::Open(Options(), nullptr);
  ASSERT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find(absl::StrCat(
                directory_, " belongs to uid 65534 with mode 0700, but blockswapd (uid 0)")),
            absl::string_view::npos)
      << store.status();
  EXPECT_NE(
      store.status().message().find(absl::StrCat("Remove it as root (rm -rf ", directory_, ")")),
      absl::string_view::npos)
      << store.status();
}

TEST_F(ModelStoreTest, ASymbolicLinkIsRefused) {
  std::string target = directory_ + "-target";
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(target.c_str(), directory_.c_str()), 0);
  auto store = ModelStore::Open(Options(), nullptr);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_TRUE(fs::is_empty(target));
  fs::remove_all(target);
}

TEST_F(ModelStoreTest, OpenReadOnlyGivesADescriptorThatCannotBeMappedWritable) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  TestModel content = MakeModel(14);
  auto registered = Register(*store, content);
  ASSERT_TRUE(registered.ok());
  const Model& model = *registered->model;
  auto fd = model.OpenReadOnly();
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(::fcntl(fd->get(), F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_NE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC, 0);
  void* writable =
      ::mmap(nullptr, model.masters_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd->get(), 0);
  EXPECT_EQ(writable, MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
  void* readable = ::mmap(nullptr, model.masters_bytes(), PROT_READ, MAP_SHARED, fd->get(), 0);
  ASSERT_NE(readable, MAP_FAILED);
  for (size_t b = 0; b < model.block_count(); ++b) {
    EXPECT_EQ(std::memcmp(static_cast<const std::byte*>(readable) + model.master_offset(b),
                          content.block(b), model.block_bytes(b)),
              0)
        << "block " << b;
  }
  ::munmap(readable, model.masters_bytes());
}

TEST_F(ModelStoreTest, PinsOnTheGivenDevice) {
  std::unique_ptr<Backend> backend = OpenHostBackend(HostBackendOptions{});
  auto store = OpenStore(0, backend->devices()[0].get());
  ASSERT_NE(store, nullptr);
  TestModel content = MakeModel(15);
  auto registered = Register(*store, content);
  ASSERT_TRUE(registered.ok()) << registered.status();
  ExpectBlocksEqual(*registered->model, content);
  store.reset();
  // Adoption pins too.
  store = OpenStore(0, backend->devices()[0].get());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->stats().adopted, 1u);
}

}  // namespace
}  // namespace blockswap::daemon
