// For the store's unit tests: a MasterFiles on a fresh directory under
// /dev/shm (a real tmpfs), removed with everything in it at the end.
#ifndef BLOCKSWAP_DAEMON_STORE_SCRATCH_MASTERS_TEST_H_
#define BLOCKSWAP_DAEMON_STORE_SCRATCH_MASTERS_TEST_H_

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/store/master_files.h"
#include "gtest/gtest.h"

namespace blockswap::daemon {

class ScratchMastersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    path_ = absl::StrCat("/dev/shm/blockswap-scratch-masters-", ::getpid(), "-", counter++);
    std::filesystem::remove_all(path_);
    auto files = MasterFiles::Open(path_);
    ASSERT_TRUE(files.ok()) << files.status();
    files_ = std::move(files).value();
  }
  void TearDown() override {
    files_.reset();
    std::filesystem::remove_all(path_);
  }

  std::string path_;
  std::unique_ptr<MasterFiles> files_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_SCRATCH_MASTERS_TEST_H_
