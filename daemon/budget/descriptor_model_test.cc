#include "daemon/budget/descriptor_model.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>

#include "daemon/runtime/process_stats.h"

namespace blockswap::daemon {
namespace {

TEST(DescriptorModel, ARingTheDaemonCopiesIntoHoldsItsFourPartsWhateverItsSlots) {
  // Memory, the two halves of the control block, the ready words.
  EXPECT_EQ(DescriptorsOfRing(RingCopier::kDaemon), 4u);
  EXPECT_EQ(DescriptorsToSendRing(), 6u) << "the four parts and the doorbell's two";
}

TEST(DescriptorModel, ARingTheTrainerCopiesIntoHoldsNoneOfTheDaemons) {
  EXPECT_EQ(DescriptorsOfRing(RingCopier::kTrainer), 0u);
}

TEST(DescriptorModel, ConnectionsSessionsAndModels) {
  EXPECT_EQ(DescriptorsOfConnection(), 5u);
  EXPECT_EQ(DescriptorsOfSession(), 2u);
  EXPECT_EQ(DescriptorsOfModel(), 0u) << "a sealed master keeps no descriptor";
  EXPECT_EQ(DescriptorsOfUpload(), 1u);
  EXPECT_EQ(DescriptorsOfFileOffer(), 1u);
}

TEST(DescriptorModel, OneUidHoldsItsConnectionsAndItsShare) {
  EXPECT_EQ(DescriptorsOneUidMayHold({.connections = 256,
                                      .sessions = 128,
                                      .rings = 512,
                                      .file_offers = 1024,
                                      .descriptors = 300}),
            256 * 5 + 300u);
}

TEST(DescriptorModel, WithoutAShareTheCountQuotasBoundIt) {
  EXPECT_EQ(DescriptorsOneUidMayHold(
                {.connections = 256, .sessions = 128, .rings = 512, .file_offers = 1024}),
            256 * 5 + 128 * 2 + 512 * 4 + 1024u);
  EXPECT_EQ(DescriptorsOneUidMayHold({.connections = 256, .sessions = 128, .file_offers = 1}),
            UINT64_MAX)
      << "unlimited rings";
  EXPECT_EQ(DescriptorsOneUidMayHold({.descriptors = 300}), UINT64_MAX) << "unlimited connections";
}

TEST(DescriptorModel, AutoIsHalfOfWhatTheReserveLeavesLessTheConnections) {
  // 4096 - 96 open - 1024 reserved = 2976; half 1488; 256 connections hold 1280.
  EXPECT_EQ(AutoMaxDescriptorsPerUid(4096, 96, 256), 208u);
  EXPECT_EQ(AutoMaxDescriptorsPerUid(65536, 96, 256), (65536 - 96 - 1024) / 2 - 1280u);
  EXPECT_EQ(AutoMaxDescriptorsPerUid(0, 96, 256), 0u) << "RLIMIT_NOFILE unlimited";
}

TEST(DescriptorModel, AutoKeepsEnoughForOneTrainer) {
  EXPECT_EQ(AutoMaxDescriptorsPerUid(1024, 96, 256), kMinimumDescriptorsPerUid);
  EXPECT_EQ(AutoMaxDescriptorsPerUid(2048, 96, 256), kMinimumDescriptorsPerUid);
  EXPECT_EQ(kMinimumDescriptorsPerUid, 10u);
}

TEST(DescriptorModel, CountsThisProcesssDescriptors) {
  const uint64_t before = OpenDescriptorCount();
  ASSERT_GT(before, 0u);
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(OpenDescriptorCount(), before + 1);
  ::close(fd);
}

}  // namespace
}  // namespace blockswap::daemon
