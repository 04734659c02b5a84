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
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "daemon/store/manifest.h"
#include "shared/backend/backend.h"
#include "tests/support/read_file.h"
#include "tests/support/test_model.h"

namespace blockswap::daemon {
namespace {

namespace fs = std::filesystem;
using ::blockswap::testing::MakeModel;
using ::blockswap::testing::ReadFile;
using ::blockswap::testing::Subset;
using ::blockswap::testing::TestModel;

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
  // Registers `content` in a store that is closed again (as a daemon that
  // stopped): the model's id.
  std::string RegisterAndClose(const TestModel& content) {
    auto store = OpenStore();
    if (store == nullptr) return "";
    auto registered = Register(*store, content);
    EXPECT_TRUE(registered.ok()) << registered.status();
    return registered.ok() ? registered->model->id() : "";
  }

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
  std::set<std::string> expected = {".lock", model.id() + ".manifest"};
  uint64_t block_files = 0;
  for (size_t b = 0; b < model.block_count(); ++b) {
    EXPECT_EQ(model.block_hashes()[b], Sha256Of(content.block(b), model.block_bytes(b)));
    const BlockMaster& master = *model.block_master(b);
    EXPECT_EQ(master.id(), BlockId(content.layout.blocks[b], model.block_hashes()[b]));
    const std::string file = master.id() + ".block";
    expected.insert(file);
    EXPECT_EQ(ModeOf(PathOf(file)), 0400u);
    EXPECT_EQ(fs::file_size(PathOf(file)), master.file_bytes());
    EXPECT_EQ(master.file_bytes() % kBlockPlacementAlignment, 0u);
    block_files += master.file_bytes();
  }
  EXPECT_EQ(model.block(model.block_count()), nullptr);
  EXPECT_EQ(model.id(), ModelId(content.layout, model.block_hashes()));
  EXPECT_EQ(model.masters_bytes(), block_files);
  EXPECT_EQ(store->masters_bytes(), model.masters_bytes());
  EXPECT_EQ(store->block_count(), 3u);
  EXPECT_EQ(Entries(directory_), expected);
  EXPECT_EQ(ModeOf(PathOf(model.id() + ".manifest")), 0600u);
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
  EXPECT_EQ(Entries(directory_).size(), 5u);  // .lock, one manifest, three block files
}

TEST_F(ModelStoreTest, EveryRegistrantOfTheSameContentIsRecordedAndSurvivesARestart) {
  const Registrant alice{1000, 1000, "file /home/alice/m.safetensors", "m"};
  const Registrant nobody{65534, 65534, "upload", "m"};
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
    EXPECT_EQ(Entries(directory_).size(), 5u) << "a rewrite left a temporary file";
    id = first->model->id();
  }
  auto reopened = OpenStore();
  ASSERT_NE(reopened, nullptr);
  std::shared_ptr<const Model> adopted = reopened->Find(id);
  ASSERT_NE(adopted, nullptr);
  EXPECT_EQ(adopted->registrants().List(), (std::vector<Registrant>{alice, nobody}));
  EXPECT_EQ(adopted->source(), alice.source);
}

// Two uids register the same content under their own names: each
// registration keeps its name (across a restart), and evicting one uid's
// registration leaves the model, its blocks and the other's registration;
// the last one's eviction evicts the model.
TEST_F(ModelStoreTest, EachRegistrationKeepsItsNameAndEvictingOneLeavesTheOthers) {
  TestModel content = MakeModel(4);
  std::string id;
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    auto roots = store->Register("roots", content.layout, content.content.data(),
                                 content.content.size(), Registrant{.uid = 0, .gid = 0});
    auto mine = store->Register("mine", content.layout, content.content.data(),
                                content.content.size(), Registrant{.uid = 65534, .gid = 65534});
    ASSERT_TRUE(roots.ok() && mine.ok()) << roots.status() << mine.status();
    id = roots->model->id();
    EXPECT_EQ(
        roots->model->registrants().List(),
        (std::vector<Registrant>{{0, 0, "upload", "roots"}, {65534, 65534, "upload", "mine"}}));
    ASSERT_EQ(store->uid_blocks(65534), 3u);
    roots->model.reset();
    mine->model.reset();

    ASSERT_TRUE(store->EvictRegistration(id, 65534, "a test").ok());
    std::shared_ptr<const Model> kept = store->Find(id);
    ASSERT_NE(kept, nullptr) << "another uid's registration evicted the model";
    EXPECT_EQ(kept->registrants().List(), (std::vector<Registrant>{{0, 0, "upload", "roots"}}));
    EXPECT_EQ(store->uid_blocks(65534), 0u) << "the evicted registration still charges its uid";
    EXPECT_EQ(store->block_count(), 3u);
    EXPECT_EQ(store->EvictRegistration(id, 65534, "a test").code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(Entries(directory_).size(), 5u) << "a rewrite left a temporary file";
  }
  auto reopened = OpenStore();
  ASSERT_NE(reopened, nullptr);
  std::shared_ptr<const Model> adopted = reopened->Find(id);
  ASSERT_NE(adopted, nullptr);
  EXPECT_EQ(adopted->registrants().List(), (std::vector<Registrant>{{0, 0, "upload", "roots"}}));
  adopted.reset();
  ASSERT_TRUE(reopened->EvictRegistration(id, 0, "a test").ok());
  EXPECT_EQ(reopened->Find(id), nullptr) << "its last registration's eviction left the model";
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
  EXPECT_EQ(Entries(directory_).size(), 10u);  // .lock, a manifest, 8 block files
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

// A registration whose caller left while it hashed: it ends with the
// cancellation's status before anything is written.
TEST_F(ModelStoreTest, ARegistrationEndsWithItsCancellationAndLeavesNoFiles) {
  TestModel content = MakeModel(6);
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::atomic<int> asked{0};
  const Cancellation cancellation(
      [&] { return ++asked > 1 ? absl::CancelledError("the client left") : absl::OkStatus(); });
  auto refused = store->Register("m", content.layout, content.content.data(),
                                 content.content.size(), {}, nullptr, cancellation);
  EXPECT_EQ(refused.status(), absl::CancelledError("the client left"));
  EXPECT_EQ(asked.load(), 3) << "not asked once per block";
  EXPECT_EQ(Entries(directory_), std::set<std::string>{".lock"});
  EXPECT_TRUE(store->List().empty());
}

// pinning = "auto": max_pinned_bytes decides which blocks are pinned, not
// what is held; the blocks beyond it are staged (pinned_bytes counts only the
// pinned ones), each block on its own.
TEST_F(ModelStoreTest, UnderAutoTheBlocksOverThePinnedBudgetAreStagedNotRefused) {
  std::unique_ptr<Backend> backend = OpenHostBackend({});
  ModelStoreOptions options = Options(/*max_pinned_bytes=*/3 * 4096);
  options.pinning = PinningPolicy::kAuto;
  auto store = ModelStore::Open(options, backend->devices()[0].get());
  ASSERT_TRUE(store.ok()) << store.status();
  auto first = Register(**store, MakeModel(7, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->model->block_master(0)->pinned());
  auto second = Register(**store, MakeModel(6));  // 3 x 4096: two fit what is left
  ASSERT_TRUE(second.ok()) << second.status();
  size_t staged = 0;
  for (size_t b = 0; b < second->model->block_count(); ++b) {
    const BlockMaster& block = *second->model->block_master(b);
    EXPECT_NE(block.pinned(), block.staged()) << "block " << b;
    staged += block.staged();
  }
  EXPECT_EQ(staged, 1u);
  EXPECT_EQ((*store)->pinned_bytes(), 3u * 4096);
  EXPECT_EQ((*store)->masters_bytes(), 4u * 4096);
  EXPECT_EQ((*store)->staged_blocks().blocks, 1u);
  EXPECT_EQ((*store)->staged_blocks().bytes, 4096u);
  EXPECT_TRUE((*store)->CheckCapacity(1000, 1 << 20, 1).ok()) << "the pin budget refuses nothing";
}

// A device that refuses to pin (the host backend's pin limit standing in for
// a small RLIMIT_MEMLOCK): under "auto" the blocks are staged and the model
// registered; under "always" the registration fails saying why and leaves
// nothing behind.
TEST_F(ModelStoreTest, ABlockTheDeviceRefusesIsStagedUnderAutoAndRefusedUnderAlways) {
  std::unique_ptr<Backend> backend = OpenHostBackend({.pin_limit_bytes = 4096});
  // "always" first: its store would refuse to adopt auto's staged blocks.
  for (PinningPolicy policy : {PinningPolicy::kAlways, PinningPolicy::kAuto}) {
    SCOPED_TRACE(PinningPolicyName(policy));
    ModelStoreOptions options = Options();
    options.pinning = policy;
    auto store = ModelStore::Open(options, backend->devices()[0].get());
    ASSERT_TRUE(store.ok()) << store.status();
    auto model = Register(**store, MakeModel(6));  // 3 blocks of 4096: one pins
    if (policy == PinningPolicy::kAlways) {
      ASSERT_TRUE(absl::IsResourceExhausted(model.status())) << model.status();
      EXPECT_NE(model.status().message().find("pinning = \"always\""), absl::string_view::npos)
          << model.status();
      EXPECT_EQ(Entries(directory_), std::set<std::string>{".lock"});
      EXPECT_EQ((*store)->pinned_bytes(), 0u);
      continue;
    }
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*store)->staged_blocks().blocks, 2u);
    EXPECT_EQ((*store)->pinned_bytes(), 4096u);
    ExpectBlocksEqual(*model->model, MakeModel(6));
  }
}

TEST_F(ModelStoreTest, CheckCapacityAnswersBeforeAnUpload) {
  auto store = OpenStore(/*max_pinned_bytes=*/8192);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->CheckCapacity(1000, 8192, 2).ok());
  absl::Status refused = store->CheckCapacity(1000, 8193, 3);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("would exceed --max-pinned-bytes=8192 (0 already pinned)"),
            absl::string_view::npos)
      << refused;
  auto unlimited = OpenStoreAt(directory_ + "-unlimited");
  ASSERT_NE(unlimited, nullptr);
  absl::Status too_big = unlimited->CheckCapacity(1000, uint64_t{1} << 60, 1);
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
  WriteFile(PathOf(forged_id + ".masters"), "old masters", 0600);
  // A sealed model whose manifest others may read.
  ASSERT_EQ(::chmod(PathOf(loose_id + ".manifest").c_str(), 0644), 0);

  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->stats().adopted, 1u);
  // The stray files, the forged manifest, and the loose model's manifest and
  // its three blocks (named by no adopted manifest).
  EXPECT_EQ(store->stats().removed, 8u);
  EXPECT_EQ(store->stats().copies, 0u);
  auto model = store->Find(kept_id);
  ASSERT_NE(model, nullptr);
  std::set<std::string> expected = {".lock", kept_id + ".manifest"};
  for (size_t b = 0; b < model->block_count(); ++b) {
    expected.insert(model->block_master(b)->id() + ".block");
  }
  EXPECT_EQ(Entries(directory_), expected);
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
  EXPECT_EQ(store->stats().removed, 4u);  // a manifest and its three blocks
  EXPECT_EQ(store->masters_bytes(), 3u * 4096);
  EXPECT_EQ(Entries(directory_).size(), 5u);
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
  for (size_t b = 0; b < model.block_count(); ++b) {
    const BlockMaster& master = *model.block_master(b);
    auto fd = master.OpenReadOnly();
    ASSERT_TRUE(fd.ok()) << fd.status();
    EXPECT_EQ(::fcntl(fd->get(), F_GETFL) & O_ACCMODE, O_RDONLY);
    EXPECT_NE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC, 0);
    void* writable =
        ::mmap(nullptr, master.file_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd->get(), 0);
    EXPECT_EQ(writable, MAP_FAILED);
    EXPECT_EQ(errno, EACCES);
    void* readable = ::mmap(nullptr, master.file_bytes(), PROT_READ, MAP_SHARED, fd->get(), 0);
    ASSERT_NE(readable, MAP_FAILED);
    EXPECT_EQ(std::memcmp(readable, content.block(b), model.block_bytes(b)), 0) << "block " << b;
    ::munmap(readable, master.file_bytes());
  }
}

// The file bytes of the distinct blocks of `models`.
uint64_t UnionFileBytes(const std::vector<std::shared_ptr<const Model>>& models) {
  std::map<std::string, uint64_t> blocks;
  for (const auto& model : models) {
    for (size_t b = 0; b < model->block_count(); ++b) {
      blocks[model->block_master(b)->id()] = model->block_master(b)->file_bytes();
    }
  }
  uint64_t bytes = 0;
  for (const auto& [id, file_bytes] : blocks) bytes += file_bytes;
  return bytes;
}

TEST_F(ModelStoreTest, ModelsThatShareBlocksHoldEachDistinctBlockOnce) {
  TestModel weights = MakeModel(20, 6);
  TestModel front = Subset(weights, 0, 4);  // blocks 0-3
  TestModel back = Subset(weights, 2, 4);   // blocks 2-5: 2 and 3 are shared
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto a = Register(*store, front, "front");
  auto b = Register(*store, back, "back");
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_FALSE(b->already_present);
  EXPECT_NE(a->model->id(), b->model->id()) << "model ids keep their meaning";
  EXPECT_EQ(a->model->id(), ModelId(front.layout, a->model->block_hashes()));
  ExpectBlocksEqual(*a->model, front);
  ExpectBlocksEqual(*b->model, back);
  EXPECT_EQ(a->model->block_master(2), b->model->block_master(0)) << "block 2 is held twice";
  EXPECT_EQ(store->block_count(), 6u);
  EXPECT_EQ(store->masters_bytes(), UnionFileBytes({a->model, b->model}));
  EXPECT_LT(store->masters_bytes(), a->model->masters_bytes() + b->model->masters_bytes());
  const uint64_t shared =
      a->model->block_master(2)->file_bytes() + a->model->block_master(3)->file_bytes();
  EXPECT_EQ(ModelStore::SharedBytes({a->model, b->model}), (std::vector<uint64_t>{shared, shared}));
  EXPECT_EQ(ModelStore::SharedBytes({a->model}), std::vector<uint64_t>{0})
      << "shared only among the models given (those a caller may see)";
  EXPECT_EQ(Entries(directory_).size(), 1u + 2 + 6);  // .lock, 2 manifests, 6 blocks

  // Evicting the first model keeps the blocks the second names.
  const std::string only_front = a->model->block_master(0)->id() + ".block";
  const std::string front_id = a->model->id();
  a = absl::UnknownError("released");
  ASSERT_TRUE(store->Evict(front_id).ok());
  EXPECT_EQ(store->block_count(), 4u);
  EXPECT_EQ(store->masters_bytes(), b->model->masters_bytes());
  EXPECT_EQ(ModelStore::SharedBytes(store->List()), std::vector<uint64_t>{0});
  EXPECT_FALSE(Entries(directory_).contains(only_front));
  EXPECT_EQ(Entries(directory_).size(), 1u + 1 + 4);
  ExpectBlocksEqual(*b->model, back);
  ASSERT_TRUE(store->Verify(b->model->id()).ok());

  // And a restart adopts it with its four blocks.
  const std::string back_id = b->model->id();
  b = absl::UnknownError("released");
  store.reset();
  store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto adopted = store->Find(back_id);
  ASSERT_NE(adopted, nullptr);
  ExpectBlocksEqual(*adopted, back);
  EXPECT_EQ(store->block_count(), 4u);
  EXPECT_EQ(store->stats().removed, 0u);
}

TEST_F(ModelStoreTest, AnLruEvictionForRoomFreesOnlyTheBlocksNoOtherModelNames) {
  TestModel weights = MakeModel(21, 4);
  TestModel first = Subset(weights, 0, 3);
  TestModel second = Subset(weights, 1, 3);
  auto store = OpenStore(/*max_pinned_bytes=*/5 * 4096);  // 4 blocks of one page fit, 5 do not
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Register(*store, first).ok());
  auto kept = Register(*store, second);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(store->masters_bytes(), 4u * 4096);
  // Two new blocks: the first model goes (it is the least recently used and
  // unreferenced); only its block 0 is freed, the others stay for `second`.
  TestModel other = MakeModel(22, 2);
  auto room = Register(*store, other);
  ASSERT_TRUE(room.ok()) << room.status();
  EXPECT_EQ(store->List().size(), 2u);
  EXPECT_EQ(store->stats().evicted, 1u);
  EXPECT_EQ(store->block_count(), 5u);
  EXPECT_EQ(store->masters_bytes(), 5u * 4096);
  ExpectBlocksEqual(*kept->model, second);
}

TEST_F(ModelStoreTest, ConcurrentRegistrationsOfOverlappingModelsWriteEachBlockOnce) {
  TestModel weights = MakeModel(23, 12, 16 * 1024);
  std::vector<TestModel> subsets;
  for (size_t streamed : {2, 4, 6, 8, 12})
    subsets.push_back(Subset(weights, 12 - streamed, streamed));
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::atomic<int> ready{0};
  std::vector<absl::StatusOr<RegisterResult>> results(subsets.size(),
                                                      absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < subsets.size(); ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < static_cast<int>(subsets.size())) std::this_thread::yield();
      results[t] = Register(*store, subsets[t]);
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<std::shared_ptr<const Model>> models;
  for (size_t t = 0; t < subsets.size(); ++t) {
    ASSERT_TRUE(results[t].ok()) << results[t].status();
    ExpectBlocksEqual(*results[t]->model, subsets[t]);
    models.push_back(results[t]->model);
  }
  EXPECT_EQ(store->block_count(), 12u);
  EXPECT_EQ(store->masters_bytes(), UnionFileBytes(models));
  EXPECT_EQ(Entries(directory_).size(), 1u + subsets.size() + 12);
}

TEST_F(ModelStoreTest, AManifestOfANewerFormatIsLeftInPlaceAndNotCounted) {
  const std::string id = RegisterAndClose(MakeModel(26, 3));
  ASSERT_FALSE(id.empty());
  nlohmann::json json = nlohmann::json::parse(ReadFile(PathOf(id + ".manifest")));
  json["version"] = 7;
  WriteFile(PathOf(id + ".manifest"), json.dump(), 0600);
  // A file of that newer format this daemon does not know, and a temporary
  // file of ours.
  WriteFile(PathOf(std::string(64, 'c') + ".chunk"), "newer", 0400);
  WriteFile(PathOf("draft-0-0.block.tmp"), "partial", 0600);
  std::set<std::string> before = Entries(directory_);
  before.erase("draft-0-0.block.tmp");

  auto store = OpenStore();
  ASSERT_NE(store, nullptr) << "the daemon must still start";
  EXPECT_EQ(store->Find(id), nullptr);
  EXPECT_EQ(store->stats().kept_unknown, 1u);
  EXPECT_EQ(store->stats().adopted, 0u);
  EXPECT_EQ(store->masters_bytes(), 0u) << "what it cannot read is not counted";
  EXPECT_EQ(store->block_count(), 0u);
  EXPECT_EQ(Entries(directory_), before) << "a manifest it cannot read, or its files, went";
  // It still registers new content beside it.
  auto other = Register(*store, MakeModel(27, 1));
  ASSERT_TRUE(other.ok()) << other.status();
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

// What one uid's models may hold.
absl::StatusOr<RegisterResult> RegisterAs(ModelStore& store, const TestModel& model, uid_t uid) {
  return store.Register("uid model", model.layout, model.content.data(), model.content.size(),
                        Registrant{.uid = uid, .gid = uid});
}

// A model of `blocks` blocks registered by `uid` that nobody holds any more
// (evictable); its id, or "" when it was refused.
std::string RegisterIdle(ModelStore& store, uint8_t seed, size_t blocks, uid_t uid) {
  auto registered = RegisterAs(store, MakeModel(seed, blocks), uid);
  EXPECT_TRUE(registered.ok()) << registered.status();
  return registered.ok() ? registered->model->id() : "";
}

int OpenDescriptors() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

TEST_F(ModelStoreTest, AUidOverItsBlockLimitIsRefusedNamingTheLimitItsUseAndTheKey) {
  ModelStoreOptions options = Options();
  options.uid_limits.max_blocks = 4;
  auto store = ModelStore::Open(options, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(RegisterAs(**store, MakeModel(1, 3), 1000).ok());
  auto refused = RegisterAs(**store, MakeModel(2, 3), 1000);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(),
                        "uid 1000 would hold 6 blocks of masters (3 held + 3 of this model), over "
                        "max_master_blocks_per_uid = 4"))
      << refused.status().message();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "raise max_master_blocks_per_uid"))
      << refused.status().message();
  EXPECT_EQ((*store)->block_count(), 3u) << "nothing of the refused model stays";
  EXPECT_TRUE(RegisterAs(**store, MakeModel(2, 3), 1001).ok()) << "another uid has its own limit";
}

TEST_F(ModelStoreTest, AUidOverItsByteLimitIsRefusedNamingTheKey) {
  ModelStoreOptions options = Options();
  options.uid_limits.max_bytes = 3 * 4096;
  auto store = ModelStore::Open(options, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(RegisterAs(**store, MakeModel(1, 3), 1000).ok());
  auto refused = RegisterAs(**store, MakeModel(2, 1), 1000);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(),
                        "uid 1000 would hold 16384 bytes of masters (12288 held + 4096 of this "
                        "model), over max_master_bytes_per_uid = 12288"))
      << refused.status().message();
}

// A block counts in full for every uid whose models name it, and a uid over
// its limit gets the same answer whether or not anyone holds the content.
TEST_F(ModelStoreTest, EveryUidIsChargedInFullAndItsRefusalSaysNothingOfOthers) {
  ModelStoreOptions options = Options();
  options.uid_limits.max_blocks = 5;
  auto store = ModelStore::Open(options, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  const TestModel shared = MakeModel(1, 3);
  auto first = RegisterAs(**store, shared, 1000);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = RegisterAs(**store, shared, 1001);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->already_present);
  EXPECT_EQ((*store)->uid_blocks(1000), 3u);
  EXPECT_EQ((*store)->uid_blocks(1001), 3u) << "sharing halves nobody's charge";
  EXPECT_EQ((*store)->uid_bytes(1001), 3u * 4096);

  // uids 1002 and 1003 hold 3 blocks each; then 1002 registers the held
  // content and 1003 content nobody holds, 3 blocks each.
  ASSERT_TRUE(RegisterAs(**store, MakeModel(7, 3), 1002).ok());
  ASSERT_TRUE(RegisterAs(**store, MakeModel(8, 3), 1003).ok());
  auto held = RegisterAs(**store, shared, 1002);
  auto novel = RegisterAs(**store, MakeModel(9, 3), 1003);
  ASSERT_EQ(held.status().code(), absl::StatusCode::kResourceExhausted) << held.status();
  ASSERT_EQ(novel.status().code(), absl::StatusCode::kResourceExhausted) << novel.status();
  EXPECT_EQ(absl::StrReplaceAll(held.status().message(), {{"uid 1002", "uid N"}}),
            absl::StrReplaceAll(novel.status().message(), {{"uid 1003", "uid N"}}));
  EXPECT_EQ((*store)->uid_blocks(1002), 3u);

  // Evicting the shared model releases both uids' charges.
  const std::string id = first->model->id();
  first = absl::UnknownError("released");
  second = absl::UnknownError("released");
  ASSERT_TRUE((*store)->Evict(id).ok());
  EXPECT_EQ((*store)->uid_blocks(1000), 0u);
  EXPECT_EQ((*store)->uid_blocks(1001), 0u);
}

TEST_F(ModelStoreTest, TheNodesBlockLimitRefusesNamingTheKeyAndTheMappings) {
  ModelStoreOptions options = Options();
  options.max_blocks = 4;
  auto store = ModelStore::Open(options, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  auto kept = RegisterAs(**store, MakeModel(1, 3), 1000);  // held: it cannot be evicted
  ASSERT_TRUE(kept.ok()) << kept.status();
  auto refused = RegisterAs(**store, MakeModel(2, 2), 1001);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(), "would exceed max_master_blocks = 4 (3 held"))
      << refused.status().message();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "vm.max_map_count"))
      << refused.status().message();
}

// Room for a new model is made from the unused models of the uid holding
// the most of what is short, even when another uid's unused model is older.
TEST_F(ModelStoreTest, UnderPressureTheUnusedModelsOfTheHeaviestUidGoFirst) {
  ModelStoreOptions options = Options();
  options.max_blocks = 6;
  auto store = ModelStore::Open(options, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  auto modest = RegisterAs(**store, MakeModel(1, 1), 1000);  // the least recently used
  auto flood_a = RegisterAs(**store, MakeModel(2, 2), 2000);
  auto flood_b = RegisterAs(**store, MakeModel(3, 2), 2000);
  ASSERT_TRUE(modest.ok() && flood_a.ok() && flood_b.ok());
  const std::string modest_id = modest->model->id();
  const std::string flood_a_id = flood_a->model->id();
  modest = flood_a = flood_b = absl::UnknownError("released");  // none in use
  auto fresh = RegisterAs(**store, MakeModel(4, 2), 3000);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_NE((*store)->Find(modest_id), nullptr) << "the modest uid's model was evicted";
  EXPECT_EQ((*store)->Find(flood_a_id), nullptr);
  EXPECT_EQ((*store)->uid_blocks(2000), 2u);
}

// Checks before work: a registration that evicting every unused model would
// not make room for is refused with nothing evicted, as one over its uid's
// own limit is, whether it is an upload (Register) or a file's draft
// (BeginDraft, which reserves room before the file is read).
TEST_F(ModelStoreTest, AModelThatCouldNeverFitEvictsNothing) {
  ModelStoreOptions options = Options();
  options.max_blocks = 4;
  auto store = ModelStore::Open(options, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string idle_id = RegisterIdle(**store, 1, 3, 1000);

  auto refused = RegisterAs(**store, MakeModel(2, 5), 2000);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "evicting every model no session holds would free only 3 blocks"))
      << refused.status().message();
  auto draft = (*store)->BeginDraft(MakeModel(3, 5).layout, "draft", Registrant{.uid = 2000});
  EXPECT_EQ(draft.status().code(), absl::StatusCode::kResourceExhausted) << draft.status();
  EXPECT_NE((*store)->Find(idle_id), nullptr) << "an unused model was evicted for nothing";
  EXPECT_EQ((*store)->stats().evicted, 0u);
}

TEST_F(ModelStoreTest, ADraftOverItsUidsLimitEvictsNothing) {
  ModelStoreOptions options = Options();
  options.max_blocks = 3;
  options.uid_limits.max_blocks = 2;
  auto store = ModelStore::Open(options, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string idle_id = RegisterIdle(**store, 1, 2, 1000);

  // 3 blocks fit the node once the idle model goes, never uid 2000's limit.
  auto draft = (*store)->BeginDraft(MakeModel(2, 3).layout, "draft", Registrant{.uid = 2000});
  ASSERT_EQ(draft.status().code(), absl::StatusCode::kResourceExhausted) << draft.status();
  EXPECT_TRUE(absl::StrContains(draft.status().message(), "max_master_blocks_per_uid = 2"))
      << draft.status().message();
  EXPECT_NE((*store)->Find(idle_id), nullptr) << "an unused model was evicted for nothing";
  EXPECT_EQ((*store)->stats().evicted, 0u);
  // Within the limit, room is made: the idle model goes, counted by the
  // limit that was short.
  draft = (*store)->BeginDraft(MakeModel(2, 2).layout, "draft", Registrant{.uid = 2000});
  EXPECT_TRUE(draft.ok()) << draft.status();
  EXPECT_EQ((*store)->Find(idle_id), nullptr);
  EXPECT_EQ((*store)->stats().evicted_by[static_cast<int>(EvictionReason::kMaxMasterBlocks)], 1u);
}

TEST_F(ModelStoreTest, EvictionsAreCountedByReason) {
  ModelStoreOptions options = Options();
  options.max_blocks = 4;
  auto store = ModelStore::Open(options, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string first_id = RegisterIdle(**store, 1, 2, 1000);
  RegisterIdle(**store, 2, 2, 1000);
  ASSERT_TRUE((*store)->Evict(first_id).ok());
  ASSERT_TRUE(RegisterAs(**store, MakeModel(3, 4), 1001).ok());  // the second goes for room
  const ModelStoreStats stats = (*store)->stats();
  EXPECT_EQ(stats.evicted, 2u);
  EXPECT_EQ(stats.evicted_by[static_cast<int>(EvictionReason::kOperator)], 1u);
  EXPECT_EQ(stats.evicted_by[static_cast<int>(EvictionReason::kMaxMasterBlocks)], 1u);
  EXPECT_EQ(EvictionReasonName(EvictionReason::kMaxMasterBlocks), "max_master_blocks");
}

// Sealed masters keep no descriptor (OpenReadOnly opens the file by name),
// so a model of many blocks costs the daemon none once registered.
TEST_F(ModelStoreTest, ASealedModelOfManyBlocksKeepsNoDescriptor) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  const int before = OpenDescriptors();
  TestModel content = MakeModel(30, 200, 1);
  auto registered = Register(*store, content);
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_LE(OpenDescriptors(), before + 1);
  auto fd = registered->model->block_master(199)->OpenReadOnly();
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(::fcntl(fd->get(), F_GETFL) & O_ACCMODE, O_RDONLY);
}

}  // namespace
}  // namespace blockswap::daemon
