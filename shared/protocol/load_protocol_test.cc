// The load protocol across two real processes: a producer (the daemon's half,
// RingProducer) and a consumer (the client's half, RingConsumer), spawned
// from this binary (tests/support/ring_peers.h). The host backend runs with
// jitter so that every ordering hazard of docs/protocol.md is exercised; the cuda
// variants run the same peers on a GPU and skip without one.
#include "shared/protocol/load_protocol.h"

#include <sys/socket.h>

#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/support/child_process.h"
#include "tests/support/ring_peers.h"
#include "tests/support/skip_without_test_hooks.h"

namespace blockswap {
namespace {

using testing::ChildProcess;
using testing::kPeerSocketFd;
using testing::PeerExitName;

constexpr char kHostJitterUs[] = "200";

struct PeerResult {
  int producer = -1;
  int consumer = -1;
  std::string Describe() const {
    return absl::StrCat("producer exited ", producer, " (", PeerExitName(producer),
                        "), consumer exited ", consumer, " (", PeerExitName(consumer), ")");
  }
};

// Skips the calling test (returns false) when `backend` cannot run here.
bool BackendAvailable(const std::string& backend, std::string* why) {
  if (backend == "host") return true;
  absl::StatusOr<std::unique_ptr<Backend>> cuda = OpenBackend(BackendChoice::kCuda);
  if (cuda.ok()) return true;
  *why = absl::StrCat("cuda backend unavailable here: ", cuda.status().message());
  return false;
}

absl::StatusOr<PeerResult> RunPeers(const std::string& backend,
                                    std::vector<std::string> producer_args,
                                    std::vector<std::string> consumer_args) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::InternalError("socketpair failed");
  }
  UniqueFd producer_end(fds[0]), consumer_end(fds[1]);
  // The stand-in CUDA driver (tests/standin_driver/) jitters as the host
  // backend does; a real driver ignores the variable.
  std::map<std::string, std::string> env = {{"BLOCKSWAP_HOST_JITTER_US", kHostJitterUs},
                                            {"BLOCKSWAP_STANDIN_JITTER_US", kHostJitterUs}};
  producer_args.push_back("--backend=" + backend);
  consumer_args.push_back("--backend=" + backend);
  auto producer = ChildProcess::Spawn(
      "ring-producer",
      {.args = producer_args, .inherit = {{producer_end.get(), kPeerSocketFd}}, .env = env});
  if (!producer.ok()) return producer.status();
  auto consumer = ChildProcess::Spawn(
      "ring-consumer",
      {.args = consumer_args, .inherit = {{consumer_end.get(), kPeerSocketFd}}, .env = env});
  if (!consumer.ok()) return consumer.status();
  producer_end.Reset();
  consumer_end.Reset();
  PeerResult result;
  // Hard timeouts: a hang is reported as such, never waited out by ctest.
  absl::StatusOr<int> consumer_code = consumer->Wait(absl::Seconds(120));
  if (!consumer_code.ok()) return consumer_code.status();
  result.consumer = *consumer_code;
  absl::StatusOr<int> producer_code = producer->Wait(absl::Seconds(30));
  if (!producer_code.ok()) return producer_code.status();
  result.producer = *producer_code;
  return result;
}

// ---------------------------------------------------------------------------

struct StreamCase {
  std::string backend;
  int slots;
  friend void PrintTo(const StreamCase& c, std::ostream* os) {
    *os << c.backend << " backend, " << c.slots << " slots";
  }
};

class StreamingTest : public ::testing::TestWithParam<StreamCase> {};

TEST_P(StreamingTest, EveryByteOf1000GenerationsPerSlotArrives) {
  const StreamCase& c = GetParam();
  std::string why;
  if (!BackendAvailable(c.backend, &why)) GTEST_SKIP() << why;
  std::string slots = absl::StrCat("--slots=", c.slots);
  auto result = RunPeers(c.backend, {slots, "--blocks=7", "--seed=11"},
                         {"--blocks=7", "--seed=11", "--generations=1000"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->consumer, testing::kPeerOk) << result->Describe();
  EXPECT_EQ(result->producer, testing::kPeerOk) << result->Describe();
}

INSTANTIATE_TEST_SUITE_P(
    Backends, StreamingTest,
    ::testing::Values(StreamCase{"host", 2}, StreamCase{"host", 3}, StreamCase{"host", 4},
                      StreamCase{"cuda", 2}, StreamCase{"cuda", 4}),
    [](const auto& info) { return absl::StrCat(info.param.backend, "_", info.param.slots, "slots"); });

// ---------------------------------------------------------------------------
// Mutation tests: with any single record, wait or publish of the protocol
// switched off — in the protocol code itself — the run must fail visibly.

class MutationTest
    : public ::testing::TestWithParam<std::tuple<std::string, ProtocolStep>> {};

TEST_P(MutationTest, SkippingTheStepIsDetected) {
  BLOCKSWAP_SKIP_WITHOUT_TEST_HOOKS("SkipProtocolStepForTesting");
  const auto& [backend, step] = GetParam();
  std::string why;
  if (!BackendAvailable(backend, &why)) GTEST_SKIP() << why;
  std::string skip = absl::StrCat("--skip=", ProtocolStepName(step));
  bool daemon_step = ProtocolStepName(step).rfind("daemon", 0) == 0;
  std::vector<std::string> producer_args = {"--slots=2", "--blocks=5", "--seed=3"};
  std::vector<std::string> consumer_args = {"--blocks=5", "--seed=3", "--generations=500",
                                            "--timeout-ms=2000"};
  (daemon_step ? producer_args : consumer_args).push_back(skip);
  auto result = RunPeers(backend, producer_args, consumer_args);
  ASSERT_TRUE(result.ok()) << result.status();
  bool detected = result->consumer == testing::kPeerWrongBytes ||
                  result->consumer == testing::kPeerRingFailed ||
                  result->consumer == testing::kPeerTimedOut ||
                  result->producer == testing::kPeerRingFailed;
  EXPECT_TRUE(detected) << "skipping " << ProtocolStepName(step)
                        << " went unnoticed: " << result->Describe();
}

// On cuda too where the build has it: each step must be needed on a GPU (or
// the stand-in driver, tests/standin_driver/) as much as on the host backend.
#if BLOCKSWAP_HAVE_CUDA
#define BLOCKSWAP_MUTATION_BACKENDS "host", "cuda"
#else
#define BLOCKSWAP_MUTATION_BACKENDS "host"
#endif
INSTANTIATE_TEST_SUITE_P(EveryStep, MutationTest,
                         ::testing::Combine(::testing::Values(BLOCKSWAP_MUTATION_BACKENDS),
                                            ::testing::ValuesIn(kSafetyProtocolSteps)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_",
                                               ProtocolStepIdentifier(std::get<1>(info.param)));
                         });

// ---------------------------------------------------------------------------

class MisbehavingConsumerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MisbehavingConsumerTest, SlowConsumerNeverBlocksTheProducerOrLosesBytes) {
  std::string why;
  if (!BackendAvailable(GetParam(), &why)) GTEST_SKIP() << why;
  // Every 25th load the consumer's stream stalls while it still reads the
  // slot; the producer must hold the next copy back without blocking. A
  // producer that blocked would spend the whole stall in one call, so the
  // limit on any call is half the stall: relative to the test's own delay,
  // not to how fast this machine is.
  constexpr int kStallMs = 400;
  auto result = RunPeers(GetParam(), {"--slots=2", absl::StrCat("--max-call-ms=", kStallMs / 2)},
                         {"--generations=150", "--stall-every=25",
                          absl::StrCat("--stall-ms=", kStallMs)});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->producer, testing::kPeerOk) << result->Describe();
  EXPECT_EQ(result->consumer, testing::kPeerOk) << result->Describe();
}

TEST_P(MisbehavingConsumerTest, RequestWithoutReleasingTheSlotIsAProtocolError) {
  std::string why;
  if (!BackendAvailable(GetParam(), &why)) GTEST_SKIP() << why;
  // After 40 loads the consumer asks for a slot's next generation without
  // publishing consumed_seq. The producer rejects it at once (never blocks,
  // never overwrites), the consumer sees the error in the status word and
  // finds the slot's bytes intact.
  // A producer that blocked on the unreleased slot would block until the
  // consumer gave up waiting: no call may take half the consumer's timeout.
  constexpr int kConsumerTimeoutMs = 5000;
  auto result = RunPeers(GetParam(),
                         {"--slots=3", absl::StrCat("--max-call-ms=", kConsumerTimeoutMs / 2)},
                         {"--generations=100", "--rogue-request-after=40",
                          absl::StrCat("--timeout-ms=", kConsumerTimeoutMs)});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->producer, testing::kPeerRingFailed) << result->Describe();
  EXPECT_EQ(result->consumer, testing::kPeerRingFailed) << result->Describe();
}

INSTANTIATE_TEST_SUITE_P(Backends, MisbehavingConsumerTest, ::testing::Values("host", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace blockswap
