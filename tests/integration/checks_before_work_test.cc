// A registration that can never commit, by an allowed user acting as uid
// 65534 (the file-flood role of work_threads_roles.cc), against a daemon
// whose memory holds idle models of uid 65533 (the upload role): it is
// refused from its declared sizes, before the daemon reads, hashes or writes
// any of it and before anyone's model is evicted for it (docs/store.md,
// "Checks before work").
#include <gtest/gtest.h>
#include <unistd.h>

#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "tests/integration/daemon_client_fixture.h"
#include "tests/support/process_cpu.h"
#include "tests/support/safetensors_writer.h"

namespace blockswap::testing {
namespace {

constexpr int kResourceExhausted = 8;  // grpc::StatusCode::RESOURCE_EXHAUSTED
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kMaxMemoryBytes = 512 * kMiB;
constexpr uint64_t kMaxBytesPerUid = 256 * kMiB;
// uid 65533's idle models: three of 64 MiB, so that a model of more than
// 320 MiB fits the node only once some of them are evicted.
constexpr int kIdleModels = 3;
constexpr uint64_t kIdleModelBytes = 64 * kMiB;
// What an impossible registration may cost the daemon: its header, a
// connection and a refusal. Reading and hashing its tensors costs seconds.
constexpr double kMaxRefusalCpuSeconds = 0.2;

class ChecksBeforeWorkTest : public DaemonClientTest {
 protected:
  void StartDaemon(std::vector<std::string> args) {
    args.push_back(absl::StrCat("--max-memory-bytes=", kMaxMemoryBytes));
    std::vector<std::string> roles = {"impossible"};
    for (int m = 0; m < kIdleModels; ++m) roles.push_back(absl::StrCat("idle-", m));
    StartSharedDaemon({.extra_args = std::move(args)}, roles);
  }

  // uid 65533's models, registered by clients that have left: idle, so
  // evictable. Their ids.
  std::set<std::string> RegisterIdleModels() {
    std::set<std::string> ids;
    for (int m = 0; m < kIdleModels; ++m) {
      const std::string name = absl::StrCat("idle-", m);
      EXPECT_EQ(Run("upload", name,
                    {"--uid=65533", absl::StrCat("--bytes=", kIdleModelBytes),
                     absl::StrCat("--seed=", m + 1)}),
                kClientOk)
          << Describe(name);
      EXPECT_TRUE(Report(name).contains("model")) << Describe(name);
      ids.insert(FirstValue(Report(name), "model"));
    }
    return ids;
  }

  // A safetensors file readable by every uid whose header declares `blocks`
  // blocks of one U8 tensor ("layers.<b>.w") of `block_bytes` and b pages
  // more, so that no two blocks are the same block (all zeros, equal
  // layouts would be one), sparse: its data reads as zeros and takes no disk.
  std::string WriteSparseFile(int blocks, uint64_t block_bytes) {
    std::vector<WriterTensor> tensors;
    uint64_t data_bytes = 0;
    for (int b = 0; b < blocks; ++b) {
      const uint64_t bytes = block_bytes + static_cast<uint64_t>(b) * 4096;
      tensors.push_back({absl::StrCat("layers.", b, ".w"), "U8", {bytes}});
      data_bytes += bytes;
    }
    const std::string path = absl::StrCat(dirs_->temp_dir(), "/sparse.safetensors");
    absl::StatusOr<std::string> header = SafetensorsHeaderJson(tensors);
    EXPECT_TRUE(header.ok()) << header.status();
    const std::string head = SafetensorsFileBytesRaw(header.value_or(""), "");
    EXPECT_TRUE(WriteFileBytes(path, head).ok());
    EXPECT_EQ(::truncate(path.c_str(), static_cast<off_t>(head.size() + data_bytes)), 0);
    return path;
  }

  // Registers `file` (`what`, for the log) as uid 65534 and expects it
  // refused by `limit`, with none of `idle` evicted and under
  // kMaxRefusalCpuSeconds of the daemon's CPU time spent on it.
  void ExpectRefusedEvictingNothing(const std::string& file, absl::string_view what,
                                    absl::string_view limit, const std::set<std::string>& idle) {
    const double before = ProcessCpuSeconds(daemon_->pid());
    EXPECT_EQ(Run("file-flood", "impossible",
                  {"--uid=65534", "--file=" + file, "--registrations=1",
                   R"(--block-pattern=^layers\.(\d+)\.)"}),
              kClientOk)
        << Describe("impossible");
    const double cpu = ProcessCpuSeconds(daemon_->pid()) - before;
    const std::string answer = FirstValue(Report("impossible"), "answered");
    std::cout << "uid 65534's " << what << " registration: " << cpu << " s of daemon CPU, "
              << Status().evictions() << " evictions, answer: " << answer << "\n";
    EXPECT_TRUE(absl::StartsWith(answer, absl::StrCat(kResourceExhausted, " "))) << answer;
    EXPECT_TRUE(absl::StrContains(answer, limit)) << answer;
    EXPECT_EQ(Status().evictions(), 0u);
    EXPECT_EQ(IdleModelIds(), idle) << "another user's idle models were evicted";
    EXPECT_LT(cpu, kMaxRefusalCpuSeconds) << "the daemon worked on it before refusing it";
  }

  // The ids of the sealed models, once no session holds any of them (a
  // session ends a moment after its process: the daemon watches its pidfd).
  std::set<std::string> IdleModelIds() {
    for (int attempt = 0;; ++attempt) {
      std::set<std::string> ids;
      bool held = false;
      const auto reply = Models();  // kept: models() refers into it
      for (const auto& model : reply.models()) {
        held = held || model.references() != 0;
        ids.insert(model.model_id());
      }
      if (!held || attempt == 50) {
        EXPECT_FALSE(held) << "a model is still held by a session";
        return ids;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
};

// 384 MiB over uid 65534's 256 MiB: refused by its own limit, and the node,
// which could make room for it by evicting uid 65533's idle models, evicts
// nothing.
TEST_F(ChecksBeforeWorkTest, ARegistrationOverItsUidsLimitIsRefusedBeforeItIsReadOrEvictsAnyone) {
  StartDaemon({absl::StrCat("--max-master-bytes-per-uid=", kMaxBytesPerUid)});
  const std::set<std::string> idle = RegisterIdleModels();
  ASSERT_EQ(IdleModelIds(), idle);
  ExpectRefusedEvictingNothing(WriteSparseFile(4, 96 * kMiB), "384 MiB",
                               "uid 65534 would hold", idle);
  EXPECT_TRUE(absl::StrContains(FirstValue(Report("impossible"), "answered"),
                                "max_master_bytes_per_uid"));
}

// 1 GiB, twice the node's max_memory_bytes, by a uid without a limit of its
// own: evicting every idle model would not make room, so none is evicted.
TEST_F(ChecksBeforeWorkTest, ARegistrationTheNodeCanNeverHoldIsRefusedBeforeItEvictsAnyone) {
  StartDaemon({"--max-master-bytes-per-uid=0"});  // no uid limit: the node's refuses
  const std::set<std::string> idle = RegisterIdleModels();
  ASSERT_EQ(IdleModelIds(), idle);
  ExpectRefusedEvictingNothing(WriteSparseFile(8, 128 * kMiB), "1 GiB", "max_memory_bytes", idle);
}

}  // namespace
}  // namespace blockswap::testing
