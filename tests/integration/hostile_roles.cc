// A hostile but allowed local client: `hostile --case=NAME` tries one way of
// taking the service from the others and checks that it fails
// alone, with the precise error. Exit 0 when it did, 1 (with what came
// instead on stderr) when not.
#include <fcntl.h>
#include <grp.h>
#include <grpcpp/generic/generic_stub.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/core/connection.h"
#include "client/core/file_model.h"
#include "client/core/model.h"
#include "client/core/ring.h"
#include "shared/protocol/grpc_status.h"
#include "shared/protocol/model_layout.h"
#include "shared/protocol/ring_wire.h"
#include "tests/integration/client_roles.h"
#include "tests/integration/test_model.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {
namespace {

constexpr size_t kPage = 4096;

int Fail(const std::string& what) {
  std::cerr << "hostile: " << what << "\n";
  return kClientFailed;
}

// The attack itself: a new read-write open file description of what `fd`
// refers to. Sets `error` to the errno when it fails.
UniqueFd ReopenReadWrite(const UniqueFd& fd, int* error) {
  std::string path = absl::StrCat("/proc/self/fd/", fd.get());
  UniqueFd reopened(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  *error = reopened.valid() ? 0 : errno;
  return reopened;
}

// Every way to a writable mapping of `fd` that a process of the daemon's uid
// (root here, for whom the 0400 mode is no obstacle) has: the received
// descriptor itself, a reopened read-write one, mprotect of a read-only
// mapping, write(). Empty when each failed; else what succeeded.
std::string WritableRouteAsOwner(const std::string& name, const UniqueFd& fd) {
  if (void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
      p != MAP_FAILED) {
    ::munmap(p, kPage);
    return absl::StrCat(name, ": the received descriptor maps writable");
  }
  int error = 0;
  UniqueFd reopened = ReopenReadWrite(fd, &error);
  if (!reopened.valid()) return "";  // not even root could reopen it: stricter still
  if (void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, reopened.get(), 0);
      p != MAP_FAILED) {
    ::munmap(p, kPage);
    return absl::StrCat(name, ": a reopened descriptor maps writable (no F_SEAL_FUTURE_WRITE)");
  }
  if (::pwrite(reopened.get(), "\0\0\0\0", 4, 0) >= 0) {
    return absl::StrCat(name, ": write() through a reopened descriptor succeeded");
  }
  void* p = ::mmap(nullptr, kPage, PROT_READ, MAP_SHARED, reopened.get(), 0);
  if (p == MAP_FAILED) return absl::StrCat(name, ": cannot even map it read-only");
  bool upgraded = ::mprotect(p, kPage, PROT_READ | PROT_WRITE) == 0;
  ::munmap(p, kPage);
  return upgraded ? absl::StrCat(name, ": mprotect made a read-only mapping writable") : "";
}

// The reopening attack on the doorbell's `sleeping` word and the daemon's
// control block of a ring: clearing `sleeping` would make every other
// client's ring skip its FUTEX_WAKE. Both must stay unwritable for this
// process as the daemon's uid, and not even reopenable writable as another.
int ReopenReadOnlyDescriptors(client::Connection& c) {
  v1::CreateRingRequest request;
  request.set_session_token(c.token());
  request.set_device_uuid(c.device_uuids().front());
  request.set_slot_count(2);
  request.set_slot_bytes(4096);
  request.set_request_ring(true);
  v1::RingDescriptor descriptor;
  grpc::ClientContext context;
  if (grpc::Status s = c.stub().CreateRing(&context, request, &descriptor); !s.ok()) {
    return Fail("CreateRing: " + s.error_message());
  }
  const uint64_t batch = descriptor.daemon_control().batch();
  auto fds = c.ReceiveFds(batch);
  if (!fds.ok()) return Fail(fds.status().ToString());
  auto exported = RingFromWire(descriptor, *std::move(fds), batch);
  if (!exported.ok()) return Fail(exported.status().ToString());
  if (!exported->doorbell.sleeping.valid()) return Fail("the ring came without a doorbell");

  const std::vector<std::pair<std::string, const UniqueFd*>> read_only = {
      {"the doorbell's sleeping word", &exported->doorbell.sleeping},
      {"the daemon's control block", &exported->daemon_control}};
  for (const auto& [name, fd] : read_only) {
    if (std::string route = WritableRouteAsOwner(name, *fd); !route.empty()) return Fail(route);
  }

  // Another uid. Dumpable again after setuid, so that /proc/self/fd stays
  // open to this process and only the objects' modes can refuse.
  if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0 ||
      ::prctl(PR_SET_DUMPABLE, 1) != 0) {
    std::cerr << "hostile: cannot become uid 65534 (not root?)\n";
    return kClientSetupFailed;
  }
  // The control: the bell is writable by design (every client rings it), so
  // reopening it works — the refusals below are the modes', nothing else's.
  int error = 0;
  if (!ReopenReadWrite(exported->doorbell.bell, &error).valid()) {
    std::cerr << "hostile: the control reopen of the bell failed: " << std::strerror(error) << "\n";
    return kClientSetupFailed;
  }
  for (const auto& [name, fd] : read_only) {
    if (ReopenReadWrite(*fd, &error).valid()) return Fail(name + ": uid 65534 reopened it O_RDWR");
    if (error != EACCES) return Fail(name + ": expected EACCES, got " + std::strerror(error));
    std::cerr << "hostile: reopening " << name << " O_RDWR as uid 65534: EACCES, as expected\n";
  }
  return kClientOk;
}

// Every route to a master's bytes that a client of another uid has, each
// tried against a descriptor the daemon sent for a model (the client's own
// upload) and the read-only mapping the client library makes of it: a
// writable shared mapping, a read-only mapping made writable, write() and
// ftruncate() on the descriptor, a read-write reopen through /proc, fchmod,
// and a plain store through the mapping (in a child, which must die of
// SIGSEGV); a private writable mapping is allowed but copies on write. The
// master must read as uploaded after all of it. (The device's route, a
// copy into a master pinned read-only, is the stand-in's rule:
// StandinDriverTest.AReadOnlyMappingIsPinnedOnlyReadOnlyAndTheDeviceNeverWritesIt.)
// A client of the daemon's own uid owns the files and can write them: the
// guarantee is between users (docs/security.md).
int WriteMasters(client::Connection& c) {
  const std::vector<std::vector<uint8_t>> data = ModelTensorData(45, 1, 2 * kPage);
  auto model = client::Model::Register(c, "masters", ModelUploads(data, 1));
  if (!model.ok()) return Fail("registering: " + model.status().ToString());
  v1::OpenModelRequest request;
  request.set_session_token(c.token());
  request.set_model_id((*model)->id());
  v1::ModelReply reply;
  grpc::ClientContext context;
  if (grpc::Status s = c.stub().OpenModel(&context, request, &reply); !s.ok()) {
    return Fail("OpenModel: " + s.error_message());
  }
  auto fds = c.ReceiveFds(reply.block_masters(0).batch());
  if (!fds.ok()) return Fail(fds.status().ToString());
  const UniqueFd& fd = (*fds)[reply.block_masters(0).index()];
  const std::byte* view = (*model)->master(0);
  const std::vector<std::byte> before(view, view + 2 * kPage);

  if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0 ||
      ::prctl(PR_SET_DUMPABLE, 1) != 0) {
    std::cerr << "hostile: cannot become uid 65534 (not root?)\n";
    return kClientSetupFailed;
  }
  if (void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
      p != MAP_FAILED) {
    return Fail("the master's descriptor maps writable");
  }
  void* shared = ::mmap(nullptr, kPage, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (shared == MAP_FAILED) return Fail("cannot even map the master read-only");
  if (::mprotect(shared, kPage, PROT_READ | PROT_WRITE) == 0) {
    return Fail("mprotect made a read-only mapping of the master writable");
  }
  if (::mprotect(const_cast<std::byte*>(view), kPage, PROT_READ | PROT_WRITE) == 0) {
    return Fail("mprotect made the client library's mapping of the master writable");
  }
  if (::pwrite(fd.get(), "\0", 1, 0) >= 0) return Fail("write() to the master succeeded");
  if (::ftruncate(fd.get(), 0) == 0) return Fail("ftruncate() of the master succeeded");
  if (::fchmod(fd.get(), 0666) == 0) return Fail("fchmod() of the master succeeded");
  int error = 0;
  if (ReopenReadWrite(fd, &error).valid()) return Fail("uid 65534 reopened the master O_RDWR");
  void* own = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), 0);
  if (own != MAP_FAILED) {
    std::memset(own, 0, kPage);  // a private copy: must not reach the master
    ::munmap(own, kPage);
  }
  const pid_t child = ::fork();
  if (child == 0) {
    // The kernel's verdict, not a sanitizer's handler that would exit 1.
    ::signal(SIGSEGV, SIG_DFL);
    *const_cast<volatile std::byte*>(view) = std::byte{0};
    ::_exit(0);
  }
  int status = 0;
  if (child < 0 || ::waitpid(child, &status, 0) != child) return Fail("fork/waitpid failed");
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV) {
    return Fail(absl::StrCat("a store through the client's mapping of the master did not fault "
                             "(wait status ", status, ")"));
  }
  if (std::memcmp(shared, before.data(), kPage) != 0 ||
      std::memcmp(view, before.data(), before.size()) != 0) {
    return Fail("the master's bytes changed");
  }
  ::munmap(shared, kPage);
  std::cerr << "hostile: no route of uid 65534 wrote the master\n";
  return kClientOk;
}

absl::Status Report(client::Connection& c, const v1::ReportStatsRequest& request) {
  v1::ReportStatsReply reply;
  grpc::ClientContext context;
  return FromGrpcStatus(c.stub().ReportStats(&context, request, &reply));
}

v1::PassStats GoodPass() {
  v1::PassStats pass;
  pass.set_direction("forward");
  pass.set_stall_seconds(0.25);
  pass.set_copy_seconds(0.5);
  pass.set_waits(40);
  pass.set_loads(40);
  return pass;
}

// Admin.Stats as any allowed user calls it, on a channel of its own.
absl::StatusOr<v1::StatsReply> AdminStats(const std::string& socket) {
  auto stub =
      v1::Admin::NewStub(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  v1::StatsReply reply;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::Status status = stub->Stats(&context, v1::StatsRequest(), &reply);
  if (!status.ok()) return FromGrpcStatus(status);
  return reply;
}

// Reports the daemon must refuse, each with the field it names; then a 50 MB
// one; then a flood of good ones. Admin.Stats must answer all along, keep
// none of the refused passes and at most the newest 256 of the good ones.
int BadAndHugeReports(client::Connection& c, const std::string& socket) {
  struct Case {
    std::string what;
    v1::ReportStatsRequest request;
    std::string fragment;
  };
  std::vector<Case> cases;
  auto one = [&](const std::string& what, auto mutate, const std::string& fragment) {
    v1::ReportStatsRequest request;
    request.set_session_token(c.token());
    v1::PassStats* pass = request.add_passes();
    *pass = GoodPass();
    mutate(*pass);
    cases.push_back({what, std::move(request), fragment});
  };
  one(
      "direction", [](v1::PassStats& p) { p.set_direction("sideways"); },
      "passes[0].direction 'sideways' is not 'forward' or 'backward'");
  one(
      "NaN", [](v1::PassStats& p) { p.set_stall_seconds(std::nan("")); },
      "passes[0].stall_seconds nan is not in 0..86400");
  one(
      "negative", [](v1::PassStats& p) { p.set_copy_seconds(-1); },
      "passes[0].copy_seconds -1 is not in 0..86400");
  one(
      "count", [](v1::PassStats& p) { p.set_loads(uint64_t{1} << 40); },
      "passes[0].loads 1099511627776 is over the limit of 4294967296");
  one(
      "50 MB direction", [](v1::PassStats& p) { p.set_direction(std::string(50 << 20, 'x')); },
      "passes[0].direction 'xxxxxxxx");
  v1::ReportStatsRequest many;
  many.set_session_token(c.token());
  for (int i = 0; i < 17; ++i) *many.add_passes() = GoodPass();
  cases.push_back({"17 passes", many, "carries 17 passes (limit 16)"});

  for (const Case& bad : cases) {
    absl::Status got = Report(c, bad.request);
    if (got.code() != absl::StatusCode::kInvalidArgument ||
        !absl::StrContains(got.message(), bad.fragment)) {
      return Fail(absl::StrCat(bad.what, ": expected INVALID_ARGUMENT containing '", bad.fragment,
                               "', got ", got.ToString().substr(0, 300)));
    }
    std::cerr << "hostile: " << bad.what << " refused: " << got.ToString().substr(0, 200) << "\n";
  }
  v1::ReportStatsRequest good;
  good.set_session_token(c.token());
  for (int i = 0; i < 16; ++i) *good.add_passes() = GoodPass();
  for (int round = 0; round < 40; ++round) {  // 640 good passes
    if (absl::Status s = Report(c, good); !s.ok()) return Fail("a good report: " + s.ToString());
  }
  absl::StatusOr<v1::StatsReply> stats = AdminStats(socket);
  if (!stats.ok()) return Fail("Admin.Stats: " + stats.status().ToString());
  for (const v1::ClientStats& client : stats->clients()) {
    if (client.client_name() != "hostile") continue;
    if (client.passes_size() != 256 || client.passes_omitted() != 0) {
      return Fail(absl::StrCat("the session kept ", client.passes_size(), " passes (",
                               client.passes_omitted(), " omitted); expected the newest 256"));
    }
    for (const v1::PassStats& pass : client.passes()) {
      if (pass.direction() != "forward") return Fail("a refused pass was kept");
    }
    return kClientOk;
  }
  return Fail("Admin.Stats does not list this session");
}

// Raw bytes to a method, as a client built from another proto would send.
grpc::Status RawCall(const std::string& socket, const std::string& method,
                     const std::string& body) {
  grpc::GenericStub stub(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  grpc::Slice slice(body);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

// Bodies that do not parse, and a method that does not exist: each answered
// with what was wrong, not a bare UNIMPLEMENTED.
int UnparsableBodies(const std::string& socket) {
  // Field number 0 and a truncated varint: no protobuf parser accepts them.
  const std::string garbage("\x00\xff\xff", 3);
  struct Case {
    std::string method;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/blockswap.v1.BlockSwap/CreateRing", grpc::StatusCode::INVALID_ARGUMENT,
       "the request body of /blockswap.v1.BlockSwap/CreateRing does not parse as a "
       "blockswap.v1.CreateRingRequest"},
      {"/blockswap.v1.Admin/Stats", grpc::StatusCode::INVALID_ARGUMENT,
       "the request body of /blockswap.v1.Admin/Stats does not parse as a "
       "blockswap.v1.StatsRequest"},
      {"/blockswap.v1.BlockSwap/Nonexistent", grpc::StatusCode::UNIMPLEMENTED,
       "blockswapd has no method '/blockswap.v1.BlockSwap/Nonexistent' (it serves "}};
  for (const Case& want : cases) {
    grpc::Status got = RawCall(socket, want.method, garbage);
    if (got.error_code() != want.code || !absl::StartsWith(got.error_message(), want.message)) {
      return Fail(absl::StrCat(want.method, ": expected code ", want.code, " starting '",
                               want.message, "', got code ", got.error_code(), " '",
                               got.error_message(), "'"));
    }
    std::cerr << "hostile: " << want.method << ": " << got.error_message() << "\n";
  }
  return kClientOk;
}

// Named files that hold no model: a FIFO (whose plain open() waits for a
// writer), a socket, a character device and a directory. The client library
// refuses each at once, naming what it is, well within the time a client
// gives a call (a watchdog ends the role if a call hangs); and the daemon
// refuses a FIFO's descriptor offered to it directly (opened without
// blocking, as the library would not), naming it too.
int RegisterSpecialFiles(client::Connection& c) {
  constexpr absl::Duration kClientTimeout = absl::Seconds(5);
  char dir_template[] = "/tmp/blockswap-hostile.XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) return Fail("mkdtemp failed");
  const std::string dir = dir_template;
  const std::string fifo = dir + "/fifo.safetensors";
  const std::string socket_path = dir + "/socket.safetensors";
  if (::mkfifo(fifo.c_str(), 0600) != 0) return Fail("mkfifo failed");
  UniqueFd listening(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_path.c_str(), sizeof(address.sun_path) - 1);
  if (!listening.valid() ||
      ::bind(listening.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return Fail("cannot make a socket file");
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fifo, "is a FIFO"},
      {socket_path, "is a socket"},
      {"/dev/zero", "is a character device"},
      {dir, "is a directory"}};
  for (const auto& [path, what] : cases) {
    absl::Notification returned;
    std::thread watchdog([&, path = path] {
      if (!returned.WaitForNotificationWithTimeout(kClientTimeout)) {
        std::cerr << "hostile: registering " << path << " did not return within " << kClientTimeout
                  << "\n";
        ::_exit(kClientTimedOut);
      }
    });
    const absl::Time start = absl::Now();
    auto registered = client::RegisterFile(c, path, {.block_pattern = R"(^x\.(\d+)\.)"});
    const absl::Duration took = absl::Now() - start;
    returned.Notify();
    watchdog.join();
    if (registered.ok() || !absl::IsInvalidArgument(registered.status()) ||
        !absl::StrContains(registered.status().message(), what)) {
      return Fail(absl::StrCat(path, ": expected INVALID_ARGUMENT saying it ", what, ", got ",
                               registered.status().ToString()));
    }
    std::cerr << "hostile: " << path << " refused in " << took << ": "
              << registered.status().message() << "\n";
  }
  UniqueFd fifo_fd(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fifo_fd.valid()) return Fail("cannot open the FIFO without blocking");
  absl::StatusOr<uint64_t> offer = c.OfferFile(fifo_fd);
  if (!offer.ok()) return Fail("offering the FIFO: " + offer.status().ToString());
  absl::Status offered = RawRegisterFile(c, *offer);
  if (!absl::IsInvalidArgument(offered) || !absl::StrContains(offered.message(), "is a FIFO")) {
    return Fail(
        "the daemon, given a FIFO's descriptor: expected INVALID_ARGUMENT saying it is a "
        "FIFO, got " +
        offered.ToString());
  }
  std::cerr << "hostile: the daemon refused the FIFO's descriptor: " << offered.message() << "\n";
  ::unlink(fifo.c_str());
  ::unlink(socket_path.c_str());
  ::rmdir(dir.c_str());
  return kClientOk;
}

// A client that dies in the middle of everything it can hold at once, as a
// trainer killed by the OOM killer would: a model open, a ring with a load
// done in a session it then replaced with a new one, an upload begun and
// half written, a file offered and registered (garbage: refused) with a
// second offer of it never named, the file itself deleted. It reports
// "vanishing", then SIGKILLs itself: the daemon must release all of it
// (NothingIsKeptForAClientThatIsGone).
int VanishMidSession(client::Connection& c, const RoleReport& report) {
  const std::vector<std::vector<uint8_t>> data = ModelTensorData(47, 2, 2 * kPage);
  auto model = client::Model::Register(c, "vanishing", ModelUploads(data, 2));
  if (!model.ok()) return Fail("registering: " + model.status().ToString());
  uint64_t slot_bytes = 0;
  for (const BlockSpec& block : (*model)->layout().blocks) {
    slot_bytes = std::max(slot_bytes, block.bytes);
  }
  auto ring = client::Ring::Create(c, c.device_uuids().front(), 2, slot_bytes);
  if (!ring.ok()) return Fail("CreateRing: " + ring.status().ToString());
  auto stream = (*ring)->device().CreateStream();
  if (!stream.ok()) return Fail(stream.status().ToString());
  if (absl::Status s = (*ring)->Load(0, **model, 0, **stream); !s.ok()) return Fail(s.ToString());
  if (absl::Status s = (*ring)->Wait(0, **stream, absl::Seconds(10)); !s.ok()) {
    return Fail(s.ToString());
  }
  // A new session in place of the first, as after a lost connection: the
  // daemon ends the first as replaced and holds its ring while this process
  // may still map it.
  if (absl::Status s = c.Reconnect(absl::Seconds(10)); !s.ok()) return Fail(s.ToString());
  if (auto reopened = client::Model::Open(c, (*model)->id()); !reopened.ok()) {
    return Fail("reopening the model: " + reopened.status().ToString());
  }

  v1::BeginUploadRequest begin;
  begin.set_session_token(c.token());
  begin.set_name("abandoned");
  *begin.mutable_layout() = LayoutToProto((*model)->layout());
  v1::BeginUploadReply upload;
  grpc::ClientContext context;
  if (grpc::Status s = c.stub().BeginUpload(&context, begin, &upload); !s.ok()) {
    return Fail("BeginUpload: " + s.error_message());
  }
  auto staging = c.ReceiveFds(upload.staging().batch());
  if (!staging.ok()) return Fail(staging.status().ToString());
  const UniqueFd& area = (*staging)[upload.staging().index()];
  const std::string half(upload.staging_bytes() / 2, 'x');
  if (::pwrite(area.get(), half.data(), half.size(), 0) != static_cast<ssize_t>(half.size())) {
    return Fail("writing half of the staging area failed");
  }

  char path[] = "/tmp/blockswap-vanishing.XXXXXX";
  UniqueFd file(::mkstemp(path));
  if (!file.valid() || ::write(file.get(), "not safetensors", 15) != 15) {
    return Fail("cannot make the file to offer");
  }
  ::unlink(path);
  absl::StatusOr<uint64_t> named = c.OfferFile(file);
  absl::StatusOr<uint64_t> parked = c.OfferFile(file);
  if (!named.ok() || !parked.ok()) return Fail("offering the file failed");
  if (RawRegisterFile(c, *named).ok()) return Fail("a file of garbage registered");

  report.Add("vanishing", "1");
  ::raise(SIGKILL);
  return kClientFailed;  // not reached
}

int RunHostile(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const std::string name = args.Str("case");
  if (!BecomeUid(args)) return kClientSetupFailed;
  auto connection = client::Connection::Connect(args.Str("socket"), "hostile");
  if (!connection.ok()) return Fail(connection.status().ToString());
  client::Connection& c = **connection;
  if (name == "reopen-read-only") return ReopenReadOnlyDescriptors(c);
  if (name == "write-masters") return WriteMasters(c);
  if (name == "bad-and-huge-reports") return BadAndHugeReports(c, args.Str("socket"));
  if (name == "unparsable-bodies") return UnparsableBodies(args.Str("socket"));
  if (name == "register-special-files") return RegisterSpecialFiles(c);
  if (name == "vanish-mid-session") return VanishMidSession(c, RoleReport(args.Str("report")));
  std::cerr << "hostile: unknown case '" << name << "'\n";
  return kClientSetupFailed;
}
BLOCKSWAP_CHILD_ROLE("hostile", RunHostile);

}  // namespace
}  // namespace blockswap::testing
