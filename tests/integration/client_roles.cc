// Client processes for the daemon/client integration tests, spawned from the
// test binary (tests/support/child_process.h). Each talks to a real
// blockswapd through the client library and writes what it observed as
// "key value" lines to --report=FILE; its exit code says how it ended
// (ClientExit in client_roles.h).
#include "tests/integration/client_roles.h"

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/core/connection.h"
#include "client/core/daemon_copy_ring.h"
#include "client/core/model.h"
#include "client/core/ring.h"
#include "client/core/session_recovery.h"
#include "shared/base/status.h"
#include "shared/protocol/grpc_status.h"
#include "tests/support/become_user.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {
namespace {

int Exit(const absl::Status& status, const RoleReport& report) {
  std::cerr << "client " << ::getpid() << ": " << status << "\n";
  report.Add("error", absl::StrCat(static_cast<int>(status.code()), " ", status.message()));
  if (absl::IsDeadlineExceeded(status)) return kClientTimedOut;
  return kClientFailed;
}

}  // namespace

bool BecomeUid(const KeyValueArgs& args) {
  const int64_t uid = args.Int("uid", -1);
  if (uid < 0) return true;
  if (absl::Status became = BecomeUser(uid); !became.ok()) {
    std::cerr << became.message() << "\n";
    return false;
  }
  return true;
}

std::vector<std::vector<client::TensorUpload>> ModelUploads(
    const std::vector<std::vector<uint8_t>>& data, uint32_t blocks) {
  std::vector<std::vector<client::TensorUpload>> uploads(blocks);
  for (uint32_t b = 0; b < blocks; ++b) {
    for (int t = 0; t < kTensorsPerBlock; ++t) {
      const auto& bytes = data[b * kTensorsPerBlock + t];
      client::TensorUpload upload;
      upload.spec.name = kTensorNames[t];
      upload.spec.dtype = kTensorDtypes[t];
      upload.spec.shape = {bytes.size() / kTensorElementBytes[t]};
      upload.data = bytes.data();
      uploads[b].push_back(std::move(upload));
    }
  }
  return uploads;
}

absl::Status RawDestroyRing(client::Connection& c, uint64_t ring_id) {
  v1::DestroyRingRequest request;
  request.set_session_token(c.token());
  request.set_ring_id(ring_id);
  v1::DestroyRingReply reply;
  grpc::ClientContext context;
  return FromGrpcStatus(c.stub().DestroyRing(&context, request, &reply));
}

absl::Status RawRegisterFile(client::Connection& c, uint64_t offer,
                             const std::string& block_pattern, absl::Duration timeout) {
  v1::RegisterFileRequest request;
  request.set_session_token(c.token());
  request.add_file_offers(offer);
  request.set_block_pattern(block_pattern);
  v1::RegisterFileReply reply;
  grpc::ClientContext context;
  if (timeout != absl::InfiniteDuration()) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  return FromGrpcStatus(c.stub().RegisterFile(&context, request, &reply));
}

// The flat bytes block `b` must have: each tensor at its layout offset,
// zeros between.
std::vector<std::byte> ExpectedBlock(const ModelLayout& layout,
                                     const std::vector<std::vector<uint8_t>>& data, uint32_t b) {
  const BlockSpec& block = layout.blocks[b];
  std::vector<std::byte> bytes(block.bytes);
  for (size_t t = 0; t < block.tensors.size(); ++t) {
    std::memcpy(bytes.data() + block.tensors[t].offset, data[b * kTensorsPerBlock + t].data(),
                block.tensors[t].length);
  }
  return bytes;
}

namespace {

struct Setup {
  std::unique_ptr<client::Connection> connection;
  std::unique_ptr<client::Model> model;
  std::unique_ptr<client::Ring> ring;
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::vector<std::byte>> expected;
  // With --reopen: a model registered before the streamed one, so that the
  // streamed one's handle differs from the one it gets when it is opened
  // again alone in a new session.
  std::unique_ptr<client::Model> other;
};

// --reopen: waits for the daemon's loss (the test kills and restarts it),
// then brings the session back as a trainer's recovery does: the ring is
// re-created in the new session and the role's model reopened there, while
// the role keeps loading the model it opened in the first session.
absl::Status RideOutARestart(Setup& setup, const RoleReport& report) {
  // The Load stream's end is how the loss is heard, whichever transport
  // loads will take.
  BLOCKSWAP_RETURN_IF_ERROR(setup.connection->OpenLoadStreamIfClosed());
  report.Add("ready", "1");
  for (absl::Time until = absl::Now() + absl::Seconds(60); setup.connection->Liveness().ok();) {
    if (absl::Now() > until) return absl::DeadlineExceededError("the daemon was not lost in 60 s");
    absl::SleepFor(absl::Milliseconds(5));
  }
  client::SessionRecovery recovery(*setup.connection, *setup.model, *setup.ring);
  return recovery.Recover(setup.connection->Liveness());
}

absl::StatusOr<Setup> Prepare(const KeyValueArgs& args, const RoleReport& report) {
  // --as-uid=N: a trainer of another user than the daemon's, as under the
  // system service.
  if (const int64_t uid = args.Int("as-uid", -1); uid >= 0) {
    BLOCKSWAP_RETURN_IF_ERROR(BecomeUser(uid));
  }
  Setup setup;
  const uint64_t seed = args.Int("seed", 1);
  const uint32_t blocks = static_cast<uint32_t>(args.Int("blocks", 6));
  const uint64_t elements = args.Int("elements", 4096);
  auto connection = client::Connection::Connect(args.Str("socket"), args.Str("name", "test"));
  if (!connection.ok()) return connection.status();
  setup.connection = *std::move(connection);
  setup.data = ModelTensorData(seed, blocks, elements);
  if (args.Int("reopen", 0) != 0) {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        setup.other,
        client::Model::Register(*setup.connection, "other",
                                ModelUploads(ModelTensorData(seed + 1, blocks, elements), blocks)));
  }
  absl::StatusOr<std::unique_ptr<client::Model>> model =
      args.Str("model-id").empty() ? client::Model::Register(*setup.connection, "integration",
                                                             ModelUploads(setup.data, blocks))
                                   : client::Model::Open(*setup.connection, args.Str("model-id"));
  if (!model.ok()) return model.status();
  setup.model = *std::move(model);
  report.Add("model", setup.model->id());
  uint64_t slot_bytes = 0;
  for (uint32_t b = 0; b < setup.model->block_count(); ++b) {
    setup.expected.push_back(ExpectedBlock(setup.model->layout(), setup.data, b));
    slot_bytes = std::max<uint64_t>(slot_bytes, setup.model->layout().blocks[b].bytes);
  }
  const auto& devices = setup.connection->device_uuids();
  std::string device = devices[args.Int("device", 0) % devices.size()];
  auto ring = client::Ring::Create(*setup.connection, device,
                                   static_cast<uint32_t>(args.Int("slots", 2)), slot_bytes);
  if (!ring.ok()) return ring.status();
  setup.ring = *std::move(ring);
  report.Add("ring", absl::StrCat(setup.ring->id()));
  return setup;
}

// Streams every block of the model `passes` times through the ring, as a
// trainer on a GPU would: loads run ahead by the ring size, and each slot is
// read on an asynchronous stream (a copy back, then a byte comparison in a
// host function queued after it). A wrong block is reported at once
// ("mismatch K"), so that a test sees it even if it kills the role later.
// With --stop-file=PATH the role ends, cleanly, at the first pass boundary
// after that file exists (--passes is then the most it streams).
int RunStream(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  absl::StatusOr<Setup> setup = Prepare(args, report);
  if (!setup.ok()) return Exit(setup.status(), report);
  if (args.Int("reopen", 0) != 0) {
    if (absl::Status back = RideOutARestart(*setup, report); !back.ok()) return Exit(back, report);
  }
  client::Ring& ring = *setup->ring;
  const int64_t passes = args.Int("passes", 3);
  const absl::Duration timeout = absl::Milliseconds(args.Int("wait-timeout-ms", 10000));
  // Emulated kernel time per block, on the stream after the slot's read.
  const absl::Duration compute = absl::Microseconds(args.Int("compute-us", 0));
  const uint32_t slots = ring.shape().slot_count;
  const uint32_t blocks = setup->model->block_count();
  std::vector<std::vector<std::byte>> readback(slots,
                                               std::vector<std::byte>(ring.shape().slot_bytes));
  std::atomic<int64_t> wrong{0};
  // After what its queued work touches, so destroyed (drained) first on
  // every return, an early error's included (ThreadSanitizer found the
  // readback buffers freed under a queued copy).
  auto stream = ring.device().CreateStream();
  if (!stream.ok()) return Exit(stream.status(), report);
  int64_t total = passes * blocks;
  const std::string stop_file = args.Str("stop-file");
  auto load = [&](int64_t k) {
    return ring.Load(static_cast<uint32_t>(k % slots), *setup->model,
                     static_cast<uint32_t>(k % blocks), **stream);
  };
  absl::Time start = absl::Now();
  for (int64_t k = 0; k < slots && k < total; ++k) {
    if (absl::Status s = load(k); !s.ok()) return Exit(s, report);
  }
  for (int64_t k = 0; k < total; ++k) {
    uint32_t slot = static_cast<uint32_t>(k % slots);
    const std::vector<std::byte>& want = setup->expected[k % blocks];
    // Timed, as the scheduler's waits are: the compute stream's idle time at
    // the wait is traced (kStall) and counted below.
    if (absl::Status s = ring.WaitTimed(slot, **stream, timeout).status(); !s.ok()) {
      return Exit(s, report);
    }
    std::byte* copy = readback[slot].data();
    (void)(*stream)->CopyDeviceToHost(copy, ring.slot(slot), want.size());
    (void)(*stream)->LaunchHostFunc([&wrong, &report, copy, &want, compute, k] {
      if (std::memcmp(copy, want.data(), want.size()) != 0) {
        wrong.fetch_add(1);
        report.Add("mismatch", absl::StrCat(k));
      }
      if (compute > absl::ZeroDuration()) absl::SleepFor(compute);
    });
    if (k == blocks - 1) report.Add("streaming", "1");  // a whole pass is through
    if (!stop_file.empty() && k % blocks == 0 && ::access(stop_file.c_str(), F_OK) == 0) {
      // Stop at the end of a pass, after every load already requested.
      const int64_t end = (k + slots + blocks - 1) / blocks * blocks;
      total = std::min(total, end);
    }
    if (k + slots < total) {
      if (absl::Status s = load(k + slots); !s.ok()) return Exit(s, report);
    }
  }
  if (absl::Status s = ring.Drain(timeout); !s.ok()) return Exit(s, report);
  (void)(*stream)->Synchronize();
  absl::StatusOr<std::vector<client::MeasuredStall>> stalls =
      ring.TakeMeasuredStalls(/*wait_for_all=*/true);
  if (!stalls.ok()) return Exit(stalls.status(), report);
  report.Add("timed_waits", absl::StrCat(stalls->size()));
  report.Add("loads", absl::StrCat(total));
  // Of them, those sent through the ring's shared-memory request ring.
  // (None on a ring the trainer fills itself.)
  auto* daemon_ring = dynamic_cast<client::DaemonCopyRing*>(&ring);
  report.Add("ring_requests",
             daemon_ring == nullptr
                 ? "trainer"
                 : absl::StrCat(
                       daemon_ring->shared_ring_for_testing().client_control().request_tail.load()));
  report.Add("seconds", absl::StrCat(absl::ToDoubleSeconds(absl::Now() - start)));
  report.Add("wrong", absl::StrCat(wrong.load()));
  if (wrong.load() > 0) {
    std::cerr << "client " << ::getpid() << ": " << wrong.load() << " of " << total
              << " loads had wrong bytes\n";
    return kClientWrongBytes;
  }
  return kClientOk;
}
BLOCKSWAP_CHILD_ROLE("stream", RunStream);

// One step of a trainer on an asynchronous stream: load block `block` into
// slot 0, wait for it on `stream`, read the slot there and compare, then
// wait (at most `timeout`) until the stream has passed that read. OK with
// the block byte-exact; the ring's error (UNAVAILABLE once the daemon is
// lost) when the stream was released without the daemon's copy.
absl::Status OrphanStep(Setup& setup, Stream& stream, uint32_t block, absl::Duration timeout,
                        const RoleReport& report, bool say_waiting) {
  client::Ring& ring = *setup.ring;
  BLOCKSWAP_RETURN_IF_ERROR(ring.Load(0, *setup.model, block, stream));
  BLOCKSWAP_RETURN_IF_ERROR(ring.Wait(0, stream, timeout));
  const std::vector<std::byte>& want = setup.expected[block];
  auto exact = std::make_shared<std::atomic<bool>>(false);
  auto passed = std::make_shared<absl::Notification>();
  const void* slot = ring.slot(0);
  BLOCKSWAP_RETURN_IF_ERROR(stream.LaunchHostFunc([slot, &want, exact, passed] {
    exact->store(std::memcmp(slot, want.data(), want.size()) == 0);
    passed->Notify();
  }));
  if (say_waiting) report.Add("waiting", "1");  // the stream waits for the copy in flight
  const absl::Time since = absl::Now();
  if (!passed->WaitForNotificationWithTimeout(timeout)) {
    report.Add("stream", "stuck");
    return absl::DeadlineExceededError(absl::StrCat(
        "the stream did not pass its wait for slot 0 within ", absl::FormatDuration(timeout)));
  }
  report.Add("released_ms", absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - since)));
  report.Add(absl::StrCat("exact_", block), exact->load() ? "1" : "0");
  BLOCKSWAP_RETURN_IF_ERROR(ring.Health());
  if (!exact->load()) return absl::DataLossError(absl::StrCat("block ", block, " arrived wrong"));
  return absl::OkStatus();
}

// The daemon dies while this client's stream waits on a copy in flight
// (the test slows copies down, BLOCKSWAP_HOST_COPY_DELAY_US): the stream
// must be released within the client's timeout (--timeout-ms), the step
// must fail UNAVAILABLE ("step_error"), the stream must still run work
// ("stream_after" ok), and once a daemon is back (the test starts one on the
// same socket after "step_error") the next step must succeed, byte-exact
// ("recovered" ok).
int RunOrphanStream(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  const absl::Duration timeout = absl::Milliseconds(args.Int("timeout-ms", 5000));
  absl::StatusOr<Setup> setup = Prepare(args, report);
  if (!setup.ok()) return Exit(setup.status(), report);
  auto stream = setup->ring->device().CreateStream();
  if (!stream.ok()) return Exit(stream.status(), report);
  auto* daemon_ring = dynamic_cast<client::DaemonCopyRing*>(setup->ring.get());
  report.Add("ready_path", daemon_ring == nullptr ? "trainer"
                           : daemon_ring->shared_ring_for_testing().ready_words() != nullptr
                               ? "words"
                               : "events");
  if (absl::Status s = OrphanStep(*setup, **stream, 0, timeout, report, false); !s.ok()) {
    return Exit(s, report);
  }
  absl::Status lost = OrphanStep(*setup, **stream, 1, timeout, report, true);
  report.Add("step_error", absl::StrCat(static_cast<int>(lost.code()), " ", lost.message()));
  if (lost.ok()) {
    return Exit(absl::InternalError("the step succeeded although its daemon died under its copy"),
                report);
  }
  // The stream itself is sound: it runs what comes next.
  absl::Status after = (*stream)->LaunchHostFunc([] {});
  if (after.ok()) after = (*stream)->Synchronize();
  report.Add("stream_after", after.ok() ? std::string("ok") : std::string(after.message()));
  if (!after.ok()) return Exit(after, report);
  // The check above ran behind a wait whose copy the daemon never finished:
  // the client copied the block itself before it let the wait go
  // ("exact_1"), so nothing is unfinished; where it could not, the ring says
  // so ("unfinished": DATA_LOSS), once.
  const absl::Status unfinished = setup->ring->TakeUnfinishedWaits();
  report.Add("unfinished",
             absl::StrCat(static_cast<int>(unfinished.code()), " ", unfinished.message()));
  report.Add("unfinished_again", setup->ring->TakeUnfinishedWaits().ok() ? "ok" : "repeated");
  // The daemon comes back: a new session, the model by id, a new ring.
  absl::Status back = absl::UnavailableError("no daemon came back within 20 s");
  for (absl::Time until = absl::Now() + absl::Seconds(20); absl::Now() < until;) {
    back = setup->connection->Reconnect(absl::Seconds(1));
    if (back.ok() || !absl::IsUnavailable(back)) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (!back.ok()) return Exit(back, report);
  auto model = client::Model::Open(*setup->connection, setup->model->id());
  if (!model.ok()) return Exit(model.status(), report);
  setup->model = *std::move(model);
  if (absl::Status s = setup->ring->Recreate(); !s.ok()) return Exit(s, report);
  if (absl::Status s = OrphanStep(*setup, **stream, 2, timeout, report, false); !s.ok()) {
    return Exit(s, report);
  }
  report.Add("recovered", "ok");
  return kClientOk;
}
BLOCKSWAP_CHILD_ROLE("orphan-stream", RunOrphanStream);

// Loads one block into slot 0, then leaves a second load pending behind a
// stream that never completes: the daemon holds that copy back forever (its
// `free` never completes) while the role sleeps until it is killed.
int RunHog(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  absl::StatusOr<Setup> setup = Prepare(args, report);
  if (!setup.ok()) return Exit(setup.status(), report);
  client::Ring& ring = *setup->ring;
  auto stream = ring.device().CreateStream();
  if (!stream.ok()) return Exit(stream.status(), report);
  if (absl::Status s = ring.Load(0, *setup->model, 0, **stream); !s.ok()) return Exit(s, report);
  if (absl::Status s = ring.Wait(0, **stream, absl::Seconds(10)); !s.ok()) return Exit(s, report);
  auto never = std::make_shared<absl::Notification>();
  (void)(*stream)->LaunchHostFunc([never] { never->WaitForNotification(); });
  if (absl::Status s = ring.Load(0, *setup->model, 1, **stream); !s.ok()) return Exit(s, report);
  report.Add("holding", "1");
  while (true) absl::SleepFor(absl::Seconds(1));
}
BLOCKSWAP_CHILD_ROLE("hog", RunHog);

// Loads a block, closes its ring ("closed"), then waits until the
// connection has lost the daemon (the test kills it): the connection's
// reader thread then runs its loss watches, none of which may touch the
// closed ring's freed import (AddressSanitizer in configuration B saw one
// do so, in a demo whose ring closed as its daemon died).
int RunCloseThenLose(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  absl::StatusOr<Setup> setup = Prepare(args, report);
  if (!setup.ok()) return Exit(setup.status(), report);
  auto stream = setup->ring->device().CreateStream();
  if (!stream.ok()) return Exit(stream.status(), report);
  client::Ring& ring = *setup->ring;
  if (absl::Status s = ring.Load(0, *setup->model, 0, **stream); !s.ok()) return Exit(s, report);
  if (absl::Status s = ring.Wait(0, **stream, absl::Seconds(10)); !s.ok()) return Exit(s, report);
  if (absl::Status s = ring.Close(**stream, absl::Seconds(10)); !s.ok()) return Exit(s, report);
  report.Add("closed", "1");
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (setup->connection->Liveness().ok()) {
    if (absl::Now() > until) {
      return Exit(absl::DeadlineExceededError("the daemon was not lost within 20 s"), report);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::SleepFor(absl::Milliseconds(200));  // the reader thread's watches ran meanwhile
  report.Add("lost", "1");
  return kClientOk;
}
BLOCKSWAP_CHILD_ROLE("close-then-lose", RunCloseThenLose);

// Attaches, registers, creates a ring, says so, and idles until killed.
int RunIdle(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  absl::StatusOr<Setup> setup = Prepare(args, report);
  if (!setup.ok()) return Exit(setup.status(), report);
  report.Add("attached", "1");
  while (true) absl::SleepFor(absl::Seconds(1));
}
BLOCKSWAP_CHILD_ROLE("idle", RunIdle);

}  // namespace
}  // namespace blockswap::testing
