// MasterFiles on a real tmpfs directory: the lock, a block's way from a
// temporary file to a sealed master and back, and the checks on what is
// read back.
#include "daemon/store/master_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/store/manifest.h"
#include "daemon/store/scratch_masters_test.h"
#include "gtest/gtest.h"

namespace blockswap::daemon {
namespace {

namespace fs = std::filesystem;

class MasterFilesTest : public ScratchMastersTest {
 protected:
  bool Exists(const std::string& name) const { return fs::exists(files_->PathOf(name)); }

  // A block of `bytes` written as a draft is, under `temp`.
  std::unique_ptr<BlockMaster> Drafted(const std::string& id, const std::string& bytes,
                                       const std::string& temp) {
    auto block = files_->CreateBlock(id, bytes.size(), temp, /*allocate=*/false);
    EXPECT_TRUE(block.ok()) << block.status();
    if (!block.ok()) return nullptr;
    EXPECT_TRUE(files_->WriteInto(temp, 0, bytes.data(), bytes.size(), "the test's block").ok());
    return std::move(block).value();
  }
};

TEST_F(MasterFilesTest, ASecondOpenIsRefusedWhileTheFirstHoldsTheLock) {
  auto second = MasterFiles::Open(path_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("another blockswapd"), std::string::npos)
      << second.status();
  files_.reset();
  EXPECT_TRUE(MasterFiles::Open(path_).ok()) << "the lock outlived the files that held it";
}

TEST_F(MasterFilesTest, ASealedBlockIsReadOnlyUnderItsIdAndLoadsBackItsBytes) {
  const std::string bytes = "the bytes of one block";
  std::unique_ptr<BlockMaster> block = Drafted("b1", bytes, "b1.block.tmp");
  ASSERT_NE(block, nullptr);
  int pinned = 0;
  ASSERT_TRUE(files_
                  ->SealBlock(*block, "b1.block.tmp",
                              [&](BlockMaster&) {
                                ++pinned;
                                return absl::OkStatus();
                              })
                  .ok());
  EXPECT_EQ(pinned, 1);
  EXPECT_FALSE(Exists("b1.block.tmp"));
  struct stat st {};
  ASSERT_EQ(::stat(files_->PathOf("b1.block").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), BlockFileBytes(bytes.size()));

  auto loaded = files_->LoadBlock("b1", bytes.size());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(std::memcmp((*loaded)->data(), bytes.data(), bytes.size()), 0);
  EXPECT_FALSE(files_->LoadBlock("b1", bytes.size() + 4096).ok())
      << "a block file of another size was taken for this block";
}

TEST_F(MasterFilesTest, ABlockThatCannotBePinnedLeavesNoFile) {
  std::unique_ptr<BlockMaster> block = Drafted("b2", "unpinnable", "b2.block.tmp");
  ASSERT_NE(block, nullptr);
  absl::Status sealed = files_->SealBlock(*block, "b2.block.tmp", [](BlockMaster&) {
    return absl::ResourceExhaustedError("no pinned memory left");
  });
  EXPECT_EQ(sealed.code(), absl::StatusCode::kResourceExhausted) << sealed;
  EXPECT_FALSE(Exists("b2.block.tmp"));
  EXPECT_FALSE(Exists("b2.block"));
}

TEST_F(MasterFilesTest, AManifestIsReadOnlyUnderTheIdItNames) {
  Manifest manifest;
  manifest.id = std::string(64, 'a');
  const std::string text = EncodeManifest(manifest);
  const std::string name = std::string(64, 'b') + ".manifest";
  {
    std::FILE* file = std::fopen(files_->PathOf(name).c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fwrite(text.data(), 1, text.size(), file);
    std::fclose(file);
  }
  ASSERT_EQ(::chmod(files_->PathOf(name).c_str(), 0600), 0);
  auto read = files_->ReadManifest(std::string(64, 'b'));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(read.status().message().find("names model " + std::string(64, 'a')), std::string::npos)
      << read.status();
  ASSERT_EQ(::chmod(files_->PathOf(name).c_str(), 0644), 0);
  read = files_->ReadManifest(std::string(64, 'b'));
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("mode"), std::string::npos)
      << "a manifest others may read was read: " << read.status();
}

TEST_F(MasterFilesTest, AStrayDirectoryAndFileAreRemovedAndListedNoMore) {
  ASSERT_TRUE(fs::create_directory(files_->PathOf("stray-dir")));
  {
    std::FILE* file = std::fopen(files_->PathOf("stray.tmp").c_str(), "w");
    std::fclose(file);
  }
  auto before = files_->List();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(*before, (std::vector<std::string>{".lock", "stray-dir", "stray.tmp"}));
  EXPECT_TRUE(files_->RemoveStray("stray-dir").ok());
  EXPECT_TRUE(files_->RemoveStray("stray.tmp").ok());
  EXPECT_EQ(*files_->List(), std::vector<std::string>{".lock"});
}

}  // namespace
}  // namespace blockswap::daemon
