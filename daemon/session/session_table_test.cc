#include "daemon/session/session_table.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/support/test_peer.h"

namespace blockswap::daemon {
namespace {

using ::blockswap::testing::TestPeer;

const Peer kAlice = TestPeer(42, 1000);

// Adds a session of `peer` under `token`; its id.
uint64_t AddSession(SessionTable& table, const std::string& token, const Peer& peer = kAlice) {
  absl::StatusOr<uint64_t> id = table.NewSessionId();
  EXPECT_TRUE(id.ok()) << id.status();
  table.Add(std::make_shared<Session>(*id, token, peer, "client"));
  return *id;
}

TEST(SessionTable, FindsASessionByTokenForItsOwnProcess) {
  SessionTable table;
  const uint64_t id = AddSession(table, "token-a");
  absl::StatusOr<std::shared_ptr<Session>> found = table.Find("token-a", kAlice);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ((*found)->id(), id);
  EXPECT_EQ(table.size(), 1u);
}

TEST(SessionTable, RefusesAnotherProcessOrUidNamingTheOwnerAndTheCaller) {
  SessionTable table;
  AddSession(table, "token-a");
  for (const Peer& caller : {TestPeer(43, 1000), TestPeer(42, 1001)}) {
    absl::StatusOr<std::shared_ptr<Session>> found = table.Find("token-a", caller);
    ASSERT_EQ(found.status().code(), absl::StatusCode::kPermissionDenied) << found.status();
    EXPECT_NE(found.status().message().find("belongs to pid 42 uid 1000"), absl::string_view::npos)
        << found.status();
  }
}

TEST(SessionTable, AnUnknownTokenIsUnauthenticatedAndUnavailableOnceClosed) {
  SessionTable table;
  EXPECT_EQ(table.Find("nobody", kAlice).status().code(), absl::StatusCode::kUnauthenticated);
  table.Close();
  EXPECT_TRUE(table.closed());
  EXPECT_EQ(table.Find("nobody", kAlice).status().code(), absl::StatusCode::kUnavailable);
}

TEST(SessionTable, TakesNoNewSessionOnceClosedButKeepsTheOnesItHas) {
  SessionTable table;
  AddSession(table, "token-a");
  table.Close();
  EXPECT_EQ(table.NewSessionId().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(table.Find("token-a", kAlice).ok());
}

TEST(SessionTable, SessionIdsStartAtOneAndAreNeverReused) {
  SessionTable table;
  const uint64_t first = AddSession(table, "token-a");
  EXPECT_EQ(first, 1u);
  ASSERT_NE(table.Remove(first), nullptr);
  EXPECT_EQ(AddSession(table, "token-b"), 2u);
}

TEST(SessionTable, RemoveTakesTheSessionOutByIdAndTokenOnce) {
  SessionTable table;
  const uint64_t a = AddSession(table, "token-a");
  const uint64_t b = AddSession(table, "token-b");
  std::shared_ptr<Session> removed = table.Remove(a);
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(removed->token(), "token-a");
  EXPECT_EQ(table.Remove(a), nullptr);
  EXPECT_EQ(table.Find("token-a", kAlice).status().code(), absl::StatusCode::kUnauthenticated);
  ASSERT_EQ(table.List().size(), 1u);
  EXPECT_EQ(table.List()[0]->id(), b);
}

TEST(SessionTable, ListsSessionsByIdFromEveryProcess) {
  SessionTable table;
  AddSession(table, "token-a");
  AddSession(table, "token-b", TestPeer(7, 0));
  AddSession(table, "token-c");
  std::vector<uint64_t> ids;
  for (const auto& session : table.List()) ids.push_back(session->id());
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(SessionTable, ASessionLeavesWithTheRingsItOwnedAndOnlyThose) {
  SessionTable table;
  const uint64_t a = AddSession(table, "token-a");
  const uint64_t b = AddSession(table, "token-b");
  const uint64_t ring_a = table.NewRingId();
  const uint64_t ring_b = table.NewRingId();
  EXPECT_NE(ring_a, ring_b);
  table.SetRingOwner(ring_a, a);
  table.SetRingOwner(ring_b, b);
  EXPECT_EQ(table.RingOwner(ring_a), a);
  table.Remove(a);
  EXPECT_EQ(table.RingOwner(ring_a), std::nullopt);
  EXPECT_EQ(table.RingOwner(ring_b), b);
  table.ForgetRing(ring_b);
  EXPECT_EQ(table.RingOwner(ring_b), std::nullopt);
}

}  // namespace
}  // namespace blockswap::daemon
