#include "daemon/server/peer_registry.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace blockswap::daemon {
namespace {

Peer MakePeer(uint64_t connection_id, pid_t pid) {
  Peer peer;
  peer.connection_id = connection_id;
  peer.pid = pid;
  peer.uid = 1000;
  peer.gid = 1000;
  peer.allowed = true;
  return peer;
}

TEST(PeerRegistry, NamesConnectionsAsGrpcDoes) { EXPECT_EQ(PeerRegistry::GrpcPeerName(7), "fd:7"); }

TEST(PeerRegistry, LooksUpARegisteredPeer) {
  PeerRegistry registry;
  registry.Register("fd:7", MakePeer(1, 4242));
  auto peer = registry.Lookup("fd:7");
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->connection_id, 1u);
  EXPECT_EQ(peer->pid, 4242);
}

TEST(PeerRegistry, UnknownConnectionIsUnauthenticatedAndNamed) {
  PeerRegistry registry;
  auto peer = registry.Lookup("fd:9");
  EXPECT_EQ(peer.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(peer.status().message().find("\"fd:9\""), absl::string_view::npos) << peer.status();
}

TEST(PeerRegistry, ANewConnectionOnAReusedNumberReplacesTheOldOne) {
  PeerRegistry registry;
  registry.Register("fd:7", MakePeer(1, 100));
  registry.Register("fd:7", MakePeer(2, 200));
  EXPECT_EQ(registry.size(), 1u);
  EXPECT_EQ(registry.Lookup("fd:7")->pid, 200);
}

TEST(PeerRegistry, TheOldConnectionsHangUpDoesNotRemoveTheNewOne) {
  PeerRegistry registry;
  registry.Register("fd:7", MakePeer(1, 100));
  registry.Register("fd:7", MakePeer(2, 200));
  EXPECT_FALSE(registry.Remove("fd:7", 1));
  EXPECT_EQ(registry.Lookup("fd:7")->pid, 200);
  EXPECT_TRUE(registry.Remove("fd:7", 2));
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_FALSE(registry.Remove("fd:7", 2));
}

TEST(PeerRegistry, CopiesShareThePidfd) {
  PeerRegistry registry;
  Peer peer = MakePeer(1, 100);
  peer.pidfd = std::make_shared<UniqueFd>();
  registry.Register("fd:3", peer);
  EXPECT_EQ(registry.Lookup("fd:3")->pidfd.get(), peer.pidfd.get());
}

TEST(PeerRegistry, IsSafeToUseFromManyThreads) {
  PeerRegistry registry;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&registry, t] {
      for (int i = 0; i < 1000; ++i) {
        std::string name = PeerRegistry::GrpcPeerName(t * 1000 + i % 10);
        uint64_t id = static_cast<uint64_t>(t) * 1000000 + static_cast<uint64_t>(i) + 1;
        registry.Register(name, MakePeer(id, t));
        auto peer = registry.Lookup(name);
        if (peer.ok()) {
          EXPECT_EQ(peer->pid, t);
        }
        registry.Remove(name, id);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(registry.size(), 0u);
}

}  // namespace
}  // namespace blockswap::daemon
