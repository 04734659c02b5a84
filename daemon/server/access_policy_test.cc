#include "daemon/server/access_policy.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace blockswap::daemon {
namespace {

TEST(AccessPolicy, DefaultAllowsTheDaemonsUserAndRootAndWaitsForTheSocketGroup) {
  AccessPolicy policy;
  EXPECT_TRUE(policy.uids().contains(::geteuid()));
  EXPECT_TRUE(policy.uids().contains(0));
  EXPECT_TRUE(policy.wants_socket_group());
  EXPECT_TRUE(policy.gids().empty());
  policy.ResolveSocketGroup(996);
  EXPECT_FALSE(policy.wants_socket_group());
  EXPECT_EQ(policy.gids(), std::set<gid_t>{996});
}

TEST(AccessPolicy, OnlyIgnoresTheSocketGroup) {
  AccessPolicy policy = AccessPolicy::Only({1000}, {});
  policy.ResolveSocketGroup(996);
  EXPECT_EQ(policy.uids(), std::set<uid_t>{1000});
  EXPECT_TRUE(policy.gids().empty());
}

TEST(AccessPolicy, AllowsByUidPrimaryGroupOrSupplementaryGroup) {
  AccessPolicy policy = AccessPolicy::Only({1000}, {996});
  EXPECT_TRUE(policy.Check(1000, 1000, {}).ok());
  EXPECT_TRUE(policy.Check(1234, 996, {}).ok());
  std::vector<gid_t> groups = {27, 996};
  EXPECT_TRUE(policy.Check(1234, 1234, groups).ok());
}

TEST(AccessPolicy, DenialSaysWhoWasRefusedAndWhatIsAllowed) {
  AccessPolicy policy = AccessPolicy::Only({0, 1000}, {996});
  absl::Status status = policy.Check(1234, 1234, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(status.message(),
            "uid 1234 (gid 1234) is not allowed by this blockswapd; allowed uids: 0, 1000; "
            "gids: 996");
}

TEST(AccessPolicy, DenialNamesSupplementaryGroupsOnlyWhenThereAreOthers) {
  AccessPolicy policy = AccessPolicy::Only({0}, {});
  std::vector<gid_t> just_primary = {1234};
  EXPECT_EQ(policy.Check(1234, 1234, just_primary).message(),
            "uid 1234 (gid 1234) is not allowed by this blockswapd; allowed uids: 0; gids: none");
  std::vector<gid_t> more = {44, 1234, 27};
  EXPECT_EQ(policy.Check(1234, 1234, more).message(),
            "uid 1234 (gid 1234; supplementary groups 27, 44) is not allowed by this "
            "blockswapd; allowed uids: 0; gids: none");
}

TEST(AccessPolicy, ChecksAPeer) {
  AccessPolicy policy = AccessPolicy::Only({0}, {50});
  Peer peer;
  peer.uid = 7;
  peer.gid = 7;
  peer.groups = {50};
  EXPECT_TRUE(policy.Check(peer).ok());
  peer.groups.clear();
  EXPECT_EQ(policy.Check(peer).code(), absl::StatusCode::kPermissionDenied);
}

TEST(ProcStatusGroups, ParsesTheGroupsLine) {
  auto groups = ParseProcStatusGroups("Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 \nNgid:\t0\n");
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(*groups, (std::vector<gid_t>{4, 24, 27}));
}

TEST(ProcStatusGroups, EmptyGroupsLineIsNoGroups) {
  auto groups = ParseProcStatusGroups("Groups:\t\nNgid:\t0\n");
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_TRUE(groups->empty());
}

TEST(ProcStatusGroups, MissingOrMalformedLineIsAnError) {
  EXPECT_EQ(ParseProcStatusGroups("Name:\tx\n").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseProcStatusGroups("Groups:\t4 x\n").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProcStatusGroups, ReadsThisProcessesGroups) {
  std::vector<gid_t> expected(::getgroups(0, nullptr));
  ASSERT_EQ(::getgroups(static_cast<int>(expected.size()), expected.data()),
            static_cast<int>(expected.size()));
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));
  ASSERT_TRUE(pidfd.valid());
  auto groups = ReadSupplementaryGroupsOf(::getpid(), pidfd);
  ASSERT_TRUE(groups.ok()) << groups.status();
  std::sort(expected.begin(), expected.end());
  std::sort(groups->begin(), groups->end());
  EXPECT_EQ(*groups, expected);
}

}  // namespace
}  // namespace blockswap::daemon
