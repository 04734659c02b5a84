#include "daemon/session/model_visibility.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {
namespace {

constexpr uid_t kDaemonUid = 990;

Peer Viewer(uid_t uid, gid_t gid, std::vector<gid_t> groups = {}) {
  Peer peer;
  peer.uid = uid;
  peer.gid = gid;
  peer.groups = std::move(groups);
  peer.allowed = true;
  return peer;
}

const std::vector<Registrant> kAlicesFile = {{1000, 1000, "file /home/alice/m.safetensors"}};

TEST(ModelAccess, ParsesBothPoliciesAndRefusesAnythingElseNamingThem) {
  EXPECT_EQ(ParseModelAccess("allowed-users").value(), ModelAccess::kAllowedUsers);
  EXPECT_EQ(ParseModelAccess("registrant-group").value(), ModelAccess::kRegistrantGroup);
  for (const char* bad : {"", "registrant_group", "Allowed-Users", "everyone"}) {
    absl::StatusOr<ModelAccess> parsed = ParseModelAccess(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("\"allowed-users\""), absl::string_view::npos);
    EXPECT_NE(parsed.status().message().find("\"registrant-group\""), absl::string_view::npos);
    EXPECT_NE(parsed.status().message().find(absl::StrCat("got '", bad, "'")),
              absl::string_view::npos)
        << parsed.status();
  }
  EXPECT_STREQ(ModelAccessName(ModelAccess::kRegistrantGroup), "registrant-group");
  EXPECT_STREQ(ModelAccessName(ModelAccess::kAllowedUsers), "allowed-users");
}

TEST(ModelVisibility, AllowedUsersSeeEveryModelEvenOneWithoutRegistrants) {
  ModelVisibility visibility(ModelAccess::kAllowedUsers, kDaemonUid);
  EXPECT_TRUE(visibility.MaySee(Viewer(65534, 65534), kAlicesFile));
  EXPECT_TRUE(visibility.MaySee(Viewer(65534, 65534), {}));
}

TEST(ModelVisibility, RegistrantGroupHidesAModelFromAnotherUidOfAnotherGroup) {
  ModelVisibility visibility(ModelAccess::kRegistrantGroup, kDaemonUid);
  EXPECT_FALSE(visibility.MaySee(Viewer(65534, 65534), kAlicesFile));
  EXPECT_FALSE(visibility.MaySee(Viewer(1001, 1001, {27, 100}), kAlicesFile));
}

TEST(ModelVisibility, RegistrantGroupShowsItToTheRegistrantItsGroupRootAndTheDaemon) {
  ModelVisibility visibility(ModelAccess::kRegistrantGroup, kDaemonUid);
  EXPECT_TRUE(visibility.MaySee(Viewer(1000, 5000), kAlicesFile)) << "the registrant's uid";
  EXPECT_TRUE(visibility.MaySee(Viewer(1001, 1000), kAlicesFile)) << "the group as primary";
  EXPECT_TRUE(visibility.MaySee(Viewer(1001, 1001, {27, 1000}), kAlicesFile))
      << "the group as supplementary";
  EXPECT_TRUE(visibility.MaySee(Viewer(0, 0), kAlicesFile));
  EXPECT_TRUE(visibility.MaySee(Viewer(kDaemonUid, kDaemonUid), kAlicesFile));
}

TEST(ModelVisibility, EveryRegistrantOfTheSameContentGetsAccess) {
  ModelVisibility visibility(ModelAccess::kRegistrantGroup, kDaemonUid);
  std::vector<Registrant> shared = kAlicesFile;
  shared.push_back({65534, 65534, "upload"});
  EXPECT_TRUE(visibility.MaySee(Viewer(65534, 65534), shared));
  EXPECT_FALSE(visibility.MaySee(Viewer(1002, 1002), shared));
}

TEST(ModelVisibility, AModelWithoutRegistrantsIsOnlyThePrivilegedsUnderRegistrantGroup) {
  ModelVisibility visibility(ModelAccess::kRegistrantGroup, kDaemonUid);
  EXPECT_FALSE(visibility.MaySee(Viewer(1000, 1000), {}));
  EXPECT_TRUE(visibility.MaySee(Viewer(0, 0), {}));
}

TEST(ModelVisibility, AnotherUsersSourcePathIsShownOnlyToThePrivileged) {
  ModelVisibility visibility(ModelAccess::kAllowedUsers, kDaemonUid);
  std::vector<Registrant> shared = kAlicesFile;
  shared.push_back({65534, 65534, "upload"});
  shared.push_back({1001, 1001, "file /home/bob/m.safetensors"});
  EXPECT_EQ(visibility.Sources(Viewer(65534, 65534), shared), "file (another user's); upload");
  EXPECT_EQ(visibility.Sources(Viewer(1000, 1000), shared),
            "file /home/alice/m.safetensors; upload; file (another user's)");
  EXPECT_EQ(visibility.Sources(Viewer(0, 0), shared),
            "file /home/alice/m.safetensors (uid 1000); upload (uid 65534); "
            "file /home/bob/m.safetensors (uid 1001)");
}

TEST(ModelVisibility, UnderRegistrantGroupAViewerReadsOnlyTheRegistrationsThatLetItSee) {
  ModelVisibility visibility(ModelAccess::kRegistrantGroup, kDaemonUid);
  std::vector<Registrant> shared = kAlicesFile;
  shared.push_back({65534, 65534, "upload"});
  EXPECT_EQ(visibility.Sources(Viewer(65534, 65534), shared), "upload")
      << "65534 is told that another user registered the content too";
  EXPECT_EQ(visibility.Sources(Viewer(1001, 1001, {1000}), shared), "file (another user's)")
      << "alice's group sees alice's registration, not 65534's";
  EXPECT_EQ(visibility.Sources(Viewer(0, 0), shared),
            "file /home/alice/m.safetensors (uid 1000); upload (uid 65534)");
}

TEST(ModelVisibility, UnderRegistrantGroupAViewerIsShownItsOwnNameForTheModel) {
  ModelVisibility visibility(ModelAccess::kRegistrantGroup, kDaemonUid);
  const std::vector<Registrant> shared = {{1000, 1000, "upload", "alices-secret-project"},
                                          {65534, 65534, "upload", "mine"},
                                          {65534, 65534, "file /tmp/m", "mine again"},
                                          {1002, 1002, "upload", ""}};
  const std::string first = "alices-secret-project";
  EXPECT_EQ(visibility.Name(Viewer(65534, 65534), shared, first), "mine again");
  EXPECT_EQ(visibility.Name(Viewer(1001, 1001, {1000}), shared, first), first)
      << "a member of alice's group sees it through alice's registration";
  EXPECT_EQ(visibility.Name(Viewer(1002, 1002), shared, first), "")
      << "a registration recorded without a name shows the model's, which another user gave";
  EXPECT_EQ(visibility.Name(Viewer(0, 0), shared, first), first);
  ModelVisibility everyone(ModelAccess::kAllowedUsers, kDaemonUid);
  EXPECT_EQ(everyone.Name(Viewer(65534, 65534), shared, first), first);
}

TEST(ModelVisibility, OnlyUnprivilegedViewersUnderRegistrantGroupAreRestricted) {
  ModelVisibility visibility(ModelAccess::kRegistrantGroup, kDaemonUid);
  EXPECT_TRUE(visibility.Restricted(Viewer(65534, 65534)));
  EXPECT_FALSE(visibility.Restricted(Viewer(0, 0)));
  EXPECT_FALSE(visibility.Restricted(Viewer(kDaemonUid, kDaemonUid)));
  EXPECT_FALSE(ModelVisibility(ModelAccess::kAllowedUsers, kDaemonUid).Restricted(Viewer(65534, 65534)));
}

}  // namespace
}  // namespace blockswap::daemon
