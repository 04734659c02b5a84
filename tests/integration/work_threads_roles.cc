// Roles of work_threads_test.cc: what an allowed user can make the daemon's
// work threads do, and another user's request beside it.
//
// `file-flood`: as --uid=N, registers --file=PATH --registrations=K times at
// once, one thread each on one session; each with --block-pattern, or (the
// default) its own pattern that matches no tensor, so that no registration
// waits for another's read of the same file and each costs the daemon a
// parse of the header. With --deadline-ms=D each call is made on the stub
// with that deadline (the client library sets none). Reports `calling`
// before the calls, `answered CODE MESSAGE` (or `registered ID`) for each,
// `seconds` for all of them, `done`; then keeps its session --hold-ms longer.
//
// `upload`: as --uid=N, registers a model of one block of --bytes (an F32
// and a BF16 tensor, content from --seed) on a new session and reports
// `seconds` (connect and registration) and `model`.
//
// Both exit 0 once reported, whatever the daemon answered: the test decides.
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/core/connection.h"
#include "client/core/file_model.h"
#include "client/core/model.h"
#include "shared/base/regular_file.h"
#include "shared/base/status.h"
#include "tests/integration/client_roles.h"
#include "tests/integration/test_model.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {
namespace {

std::string CodeAndMessage(const absl::Status& status) {
  return absl::StrCat(static_cast<int>(status.code()), " ", status.message());
}

absl::Status RegisterWithDeadline(client::Connection& c, const std::string& file,
                                  const std::string& pattern, absl::Duration timeout) {
  BLOCKSWAP_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(file));
  BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t offer, c.OfferFile(fd));
  return RawRegisterFile(c, offer, pattern, timeout);
}

int RunFileFlood(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  if (!BecomeUid(args)) return kClientSetupFailed;
  auto connection = client::Connection::Connect(args.Str("socket"), args.Str("name", "flood"));
  if (!connection.ok()) {
    std::cerr << "file-flood: " << connection.status() << "\n";
    return kClientFailed;
  }
  const int64_t registrations = args.Int("registrations", 1);
  const absl::Time start = absl::Now();
  report.Add("calling", absl::StrCat(registrations));
  std::vector<std::thread> calls;
  for (int64_t i = 0; i < registrations; ++i) {
    calls.emplace_back([&, i] {
      const std::string pattern = args.Has("block-pattern")
                                      ? args.Str("block-pattern")
                                      : absl::StrCat(R"(^unmatched)", i, R"(\.(\d+)\.)");
      if (args.Has("deadline-ms")) {
        report.Add("answered", CodeAndMessage(RegisterWithDeadline(
                                   **connection, args.Str("file"), pattern,
                                   absl::Milliseconds(args.Int("deadline-ms", 0)))));
        return;
      }
      auto registered =
          client::RegisterFile(**connection, args.Str("file"), {.block_pattern = pattern});
      if (registered.ok()) {
        report.Add("registered", registered->model->id());
      } else {
        report.Add("answered", CodeAndMessage(registered.status()));
      }
    });
  }
  for (std::thread& call : calls) call.join();
  report.Add("seconds", absl::StrCat(absl::ToDoubleSeconds(absl::Now() - start)));
  report.Add("done", "1");
  absl::SleepFor(absl::Milliseconds(args.Int("hold-ms", 0)));
  return kClientOk;
}
BLOCKSWAP_CHILD_ROLE("file-flood", RunFileFlood);

int RunUpload(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  if (!BecomeUid(args)) return kClientSetupFailed;
  // Both tensors of the block take 4 + 2 bytes per element.
  const uint64_t elements = static_cast<uint64_t>(args.Int("bytes", 1 << 20)) / 6;
  const auto data = ModelTensorData(args.Int("seed", 1), 1, elements);
  const absl::Time start = absl::Now();
  auto connection = client::Connection::Connect(args.Str("socket"), args.Str("name", "upload"));
  if (!connection.ok()) {
    report.Add("error", CodeAndMessage(connection.status()));
    return kClientOk;
  }
  auto model = client::Model::Register(**connection, "upload", ModelUploads(data, 1));
  report.Add("seconds", absl::StrCat(absl::ToDoubleSeconds(absl::Now() - start)));
  report.Add(model.ok() ? "model" : "error",
             model.ok() ? (*model)->id() : CodeAndMessage(model.status()));
  return kClientOk;
}
BLOCKSWAP_CHILD_ROLE("upload", RunUpload);

}  // namespace
}  // namespace blockswap::testing
