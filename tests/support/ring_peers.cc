#include "tests/support/ring_peers.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "shared/backend/backend.h"
#include "shared/base/status.h"
#include "shared/base/test_hooks.h"
#include "shared/os/fd_passing.h"
#include "shared/protocol/load_protocol.h"
#include "shared/protocol/ring.h"
#include "shared/protocol/ring_wire.h"
#include "tests/support/block_content.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"

namespace blockswap::testing {

const char* PeerExitName(int code) {
  switch (code) {
    case kPeerOk:
      return "ok";
    case kPeerSetupFailed:
      return "setup failed";
    case kPeerWrongBytes:
      return "wrong bytes";
    case kPeerRingFailed:
      return "ring failed (protocol error)";
    case kPeerTimedOut:
      return "timed out";
    case kPeerBlocked:
      return "producer blocked";
    default:
      return "unexpected exit";
  }
}

namespace {

constexpr uint64_t kRingBatch = 1;

enum class MessageType : uint32_t { kLoad = 1, kDone = 2 };
struct PeerMessage {
  MessageType type;
  uint32_t slot;
  uint32_t generation;
  uint32_t block;
};

// Whole pages (host registration pins pages), like the daemon's masters.
absl::StatusOr<Mapping> PageAlignedBuffer(size_t bytes) {
  absl::StatusOr<SharedMemory> shm = SharedMemory::Create("test-buffer", bytes);
  if (!shm.ok()) return shm.status();
  return shm->Map(Access::kReadWrite);
}

absl::Status ApplySkips(const KeyValueArgs& args) {
  if (!args.Has("skip")) return absl::OkStatus();
  absl::StatusOr<ProtocolStep> step = ParseProtocolStep(args.Str("skip"));
  if (!step.ok()) return step.status();
#if BLOCKSWAP_TEST_HOOKS
  SkipProtocolStepForTesting(*step);
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "--skip=", args.Str("skip"), ": this build has no test hooks (-DBLOCKSWAP_TEST_HOOKS=ON)"));
#endif
}

absl::StatusOr<std::unique_ptr<Backend>> OpenPeerBackend(const KeyValueArgs& args) {
  absl::StatusOr<BackendChoice> choice = ParseBackendChoice(args.Str("backend", "host"));
  if (!choice.ok()) return choice.status();
  return OpenBackend(*choice, HostBackendOptions::FromEnvironment());
}

int Fail(const char* role, const absl::Status& status, int code) {
  std::cerr << role << ": " << status << "\n";
  return code;
}

// ---------------------------------------------------------------------------

int RunProducer(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const uint64_t seed = args.Int("seed", 1);
  const uint32_t blocks = static_cast<uint32_t>(args.Int("blocks", 7));
  const RingShape shape{static_cast<uint32_t>(args.Int("slots", 2)),
                        static_cast<uint64_t>(args.Int("slot-bytes", 64 * 1024))};
  const absl::Duration max_call = absl::Milliseconds(args.Int("max-call-ms", 0));
  if (auto s = ApplySkips(args); !s.ok()) return Fail("producer", s, kPeerSetupFailed);
  UniqueFd socket(kPeerSocketFd);

  auto backend = OpenPeerBackend(args);
  if (!backend.ok()) return Fail("producer", backend.status(), kPeerSetupFailed);
  Device& device = *(*backend)->devices().front();
  auto ring = DaemonRing::Create(device, /*ring_id=*/7, shape, /*boot_id=*/seed ^ 0xb007);
  if (!ring.ok()) return Fail("producer", ring.status(), kPeerSetupFailed);
  auto stream = device.CreateStream();
  if (!stream.ok()) return Fail("producer", stream.status(), kPeerSetupFailed);

  // Masters in one buffer, pinned as the daemon pins its masters.
  std::vector<size_t> offsets;
  size_t total = 0;
  for (uint32_t b = 0; b < blocks; ++b) {
    offsets.push_back(total);
    total += RoundUp(BlockBytes(shape.slot_bytes, b), kSlotAlignment);
  }
  auto masters = PageAlignedBuffer(total);
  if (!masters.ok()) return Fail("producer", masters.status(), kPeerSetupFailed);
  auto* master_bytes = static_cast<std::byte*>(masters->data());
  for (uint32_t b = 0; b < blocks; ++b) {
    auto content = BlockContent(seed, shape.slot_bytes, b);
    std::memcpy(master_bytes + offsets[b], content.data(), content.size());
  }
  auto pinned = device.RegisterHostMemory(masters->data(), masters->size());
  if (!pinned.ok()) return Fail("producer", pinned.status(), kPeerSetupFailed);

  {
    auto exported = (*ring)->Export();
    if (!exported.ok()) return Fail("producer", exported.status(), kPeerSetupFailed);
    RingOnWire wire = RingToWire(std::move(*exported), kRingBatch);
    std::vector<int> raw;
    for (const UniqueFd& fd : wire.fds) raw.push_back(fd.get());
    if (auto s = SendWithFds(socket, wire.descriptor.SerializeAsString(), raw); !s.ok()) {
      return Fail("producer", s, kPeerSetupFailed);
    }
  }

  RingProducer producer(**ring, **stream);
  // The copies issued and not yet seen complete, each batch behind an event
  // of this process, as the daemon's copy tracker keeps them: landed_seq is
  // published once the event says the batch is done.
  struct Batch {
    std::unique_ptr<Event> done;
    std::vector<RingProducer::Issued> copies;
  };
  std::deque<Batch> in_flight;
  auto retire = [&]() -> absl::Status {
    while (!in_flight.empty()) {
      BLOCKSWAP_ASSIGN_OR_RETURN(bool done, in_flight.front().done->Query());
      if (!done) break;
      for (const RingProducer::Issued& copy : in_flight.front().copies) {
        producer.PublishCopied(copy.slot, copy.generation, absl::ZeroDuration());
      }
      in_flight.pop_front();
    }
    return absl::OkStatus();
  };
  bool rejected = false;
  bool blocked = false;
  auto timed = [&](auto&& call) {
    absl::Time start = absl::Now();
    auto result = call();
    if (max_call > absl::ZeroDuration() && absl::Now() - start > max_call) {
      std::cerr << "producer: a call took " << absl::Now() - start << "\n";
      blocked = true;
    }
    return result;
  };
  while (true) {
    PeerMessage message{};
    ssize_t got = ::recv(socket.get(), &message, sizeof(message), MSG_DONTWAIT);
    if (got == 0 || (got > 0 && message.type == MessageType::kDone)) break;
    if (got < 0 && errno != EAGAIN && errno != EINTR) break;  // consumer gone
    if (got == sizeof(message) && message.type == MessageType::kLoad) {
      const void* source = message.block < blocks ? master_bytes + offsets[message.block]
                                                  : nullptr;
      size_t bytes = message.block < blocks ? BlockBytes(shape.slot_bytes, message.block) : 0;
      absl::Status submitted = timed([&] {
        return producer.Submit(message.slot, message.generation, source, bytes);
      });
      if (!submitted.ok() && !rejected) {
        std::cerr << "producer: rejected request: " << submitted << "\n";
        rejected = true;
      }
    }
    if (producer.status().ok()) {
      // A failed Poll fails the ring; the consumer sees it in the status word.
      std::vector<RingProducer::Issued> issued;
      (void)timed([&] { return producer.Poll(&issued); });
      if (!issued.empty()) {
        absl::StatusOr<std::unique_ptr<Event>> done = device.CreateEvent();
        absl::Status recorded = done.ok() ? (*stream)->Record(**done) : done.status();
        if (!recorded.ok()) return Fail("producer", recorded, kPeerSetupFailed);
        in_flight.push_back(Batch{*std::move(done), std::move(issued)});
      }
      if (absl::Status retired = retire(); !retired.ok()) producer.Fail(retired);
    }
    producer.Heartbeat();
    if (got < 0) {
      pollfd pfd{socket.get(), POLLIN, 0};
      ::poll(&pfd, 1, producer.has_pending() || !in_flight.empty() ? 0 : 1);
    }
  }
  (void)(*stream)->Synchronize();
  if (blocked) return kPeerBlocked;
  return rejected ? kPeerRingFailed : kPeerOk;
}

// ---------------------------------------------------------------------------

int RunConsumer(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const uint64_t seed = args.Int("seed", 1);
  const uint32_t blocks = static_cast<uint32_t>(args.Int("blocks", 7));
  const int64_t generations = args.Int("generations", 1000);
  const int64_t stall_every = args.Int("stall-every", 0);
  const absl::Duration stall = absl::Milliseconds(args.Int("stall-ms", 0));
  const int64_t rogue_after = args.Int("rogue-request-after", -1);
  ConsumerOptions options;
  options.wait_timeout = absl::Milliseconds(args.Int("timeout-ms", 5000));
  if (auto s = ApplySkips(args); !s.ok()) return Fail("consumer", s, kPeerSetupFailed);
  UniqueFd socket(kPeerSocketFd);

  auto backend = OpenPeerBackend(args);
  if (!backend.ok()) return Fail("consumer", backend.status(), kPeerSetupFailed);
  auto received = ReceiveWithFds(socket);
  if (!received.ok()) return Fail("consumer", received.status(), kPeerSetupFailed);
  v1::RingDescriptor descriptor;
  if (!descriptor.ParseFromString(received->payload)) {
    return Fail("consumer", absl::DataLossError("bad RingDescriptor"), kPeerSetupFailed);
  }
  auto exported = RingFromWire(descriptor, std::move(received->fds), kRingBatch);
  if (!exported.ok()) return Fail("consumer", exported.status(), kPeerSetupFailed);
  auto device = (*backend)->FindDevice(exported->device_uuid);
  if (!device.ok()) return Fail("consumer", device.status(), kPeerSetupFailed);
  auto ring = RingImport::Import(**device, std::move(*exported));
  if (!ring.ok()) return Fail("consumer", ring.status(), kPeerSetupFailed);
  auto stream = (*device)->CreateStream();
  if (!stream.ok()) return Fail("consumer", stream.status(), kPeerSetupFailed);
  // The release notifier, as the client library has one: drained before the
  // ring goes (its host functions write the ring's control block).
  auto notifier = (*device)->CreateStream();
  if (!notifier.ok()) return Fail("consumer", notifier.status(), kPeerSetupFailed);
  options.notifier = notifier->get();

  const RingShape shape = (*ring)->shape();
  const uint32_t slots = shape.slot_count;
  std::vector<std::vector<std::byte>> expected;
  for (uint32_t b = 0; b < blocks; ++b) expected.push_back(BlockContent(seed, shape.slot_bytes, b));
  // What the stream copies each slot back into; pinned, as a real consumer's
  // device-side reads would be asynchronous too.
  auto readback = PageAlignedBuffer(static_cast<size_t>(slots) * shape.slot_bytes);
  if (!readback.ok()) return Fail("consumer", readback.status(), kPeerSetupFailed);
  auto pinned = (*device)->RegisterHostMemory(readback->data(), readback->size());
  if (!pinned.ok()) return Fail("consumer", pinned.status(), kPeerSetupFailed);

  RingConsumer consumer(**ring, options);
  std::atomic<int64_t> wrong{0};
  std::vector<uint32_t> block_in_slot(slots);
  uint64_t choice = seed;
  auto send = [&](const PeerMessage& message) {
    return ::send(socket.get(), &message, sizeof(message), MSG_NOSIGNAL) == sizeof(message);
  };
  // The client's teardown, before the producer may free the ring: the
  // stream's reads done, the imports closed (host_lifetime.h), then kDone.
  auto done = [&] {
    (void)(*stream)->Synchronize();
    (void)(*notifier)->Synchronize();
    ring->reset();
    send(PeerMessage{MessageType::kDone, 0, 0, 0});
  };
  auto classify = [&](const absl::Status& status) {
    std::cerr << "consumer: " << status << "\n";
    // The step failed: a stream waiting on a ready word for a copy that will
    // not come (a producer that skipped it) must drain before teardown.
    (*ring)->AbandonReadyWords();
    done();
    return absl::IsDeadlineExceeded(status) ? kPeerTimedOut : kPeerRingFailed;
  };
  auto request = [&](int64_t k) -> absl::Status {
    uint32_t slot = static_cast<uint32_t>(k % slots);
    choice = choice * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t block = static_cast<uint32_t>((choice >> 33) % blocks);
    absl::StatusOr<uint32_t> generation = consumer.BeginLoad(slot, **stream);
    if (!generation.ok()) return generation.status();
    block_in_slot[slot] = block;
    if (!send(PeerMessage{MessageType::kLoad, slot, *generation, block})) {
      return absl::UnavailableError("producer gone");
    }
    return absl::OkStatus();
  };

  const int64_t total = generations * slots;
  for (int64_t k = 0; k < slots && k < total; ++k) {
    if (auto s = request(k); !s.ok()) return classify(s);
  }
  for (int64_t k = 0; k < total; ++k) {
    uint32_t slot = static_cast<uint32_t>(k % slots);
    if (auto s = consumer.AwaitLoaded(slot, **stream); !s.ok()) return classify(s);
    if (stall_every > 0 && k % stall_every == 0) {
      (void)(*stream)->LaunchHostFunc([stall] { absl::SleepFor(stall); });
    }
    uint32_t block = block_in_slot[slot];
    std::byte* copy =
        static_cast<std::byte*>(readback->data()) + static_cast<size_t>(slot) * shape.slot_bytes;
    size_t bytes = expected[block].size();
    (void)(*stream)->CopyDeviceToHost(copy, (*ring)->slot(slot), bytes);
    (void)(*stream)->LaunchHostFunc([&wrong, copy, bytes, want = expected[block].data()] {
      if (std::memcmp(copy, want, bytes) != 0) wrong.fetch_add(1);
    });
    if (k == rogue_after) {
      // Misbehave: ask for the slot's next generation without releasing it.
      (void)(*stream)->Synchronize();
      send(PeerMessage{MessageType::kLoad, slot, consumer.requested(slot) + 1, block});
      // The daemon must reject it without touching the slot, and say so in
      // the status word.
      absl::Status health;
      for (absl::Time until = absl::Now() + options.wait_timeout;
           health.ok() && absl::Now() < until; absl::SleepFor(absl::Milliseconds(1))) {
        health = consumer.CheckHealth();
      }
      (void)(*stream)->CopyDeviceToHost(copy, (*ring)->slot(slot), bytes);
      (void)(*stream)->Synchronize();
      bool intact = std::memcmp(copy, expected[block].data(), bytes) == 0;
      std::cerr << "consumer: rogue request answered: " << health
                << (intact ? " (slot intact)" : " (slot OVERWRITTEN)") << "\n";
      done();
      if (!intact) return kPeerWrongBytes;
      return health.ok() ? kPeerTimedOut : kPeerRingFailed;
    }
    if (k + slots < total) {
      if (auto s = request(k + slots); !s.ok()) return classify(s);
    }
  }
  if (auto s = consumer.Drain(); !s.ok()) return classify(s);
  done();
  if (wrong.load() > 0) {
    std::cerr << "consumer: " << wrong.load() << " of " << total << " loads had wrong bytes\n";
    return kPeerWrongBytes;
  }
  return kPeerOk;
}

BLOCKSWAP_CHILD_ROLE("ring-producer", RunProducer);
BLOCKSWAP_CHILD_ROLE("ring-consumer", RunConsumer);

}  // namespace
}  // namespace blockswap::testing
