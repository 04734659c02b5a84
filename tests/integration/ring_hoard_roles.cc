// `ring-hoard`: one allowed user holding every ring it may. As --uid=N,
// attaches up to --sessions sessions (a client process's worth), then creates
// rings of one slot of --slot-bytes round-robin over them; after each
// refusal it goes on with rings of half the size, down to 4 KiB, to take
// whatever is left. Reports `sessions` and `rings` (what it was granted),
// `ring_bytes` (their sum) and `refused MESSAGE` for each refusal (of a
// session or a ring), then `holding`, and keeps everything until --stop-file
// exists (at most --seconds). Exit 0 when every refusal was
// RESOURCE_EXHAUSTED: the test decides what the counts and messages must be.
#include <unistd.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/core/connection.h"
#include "client/core/ring.h"
#include "tests/integration/client_roles.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {
namespace {

int RunRingHoard(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  if (!BecomeUid(args)) return kClientSetupFailed;
  bool all_exhausted = true;
  auto refusal = [&](const absl::Status& refused) {
    all_exhausted = all_exhausted && absl::IsResourceExhausted(refused);
    report.Add("refused",
               absl::StrCat(absl::StatusCodeToString(refused.code()), " ", refused.message()));
  };
  std::vector<std::unique_ptr<client::Connection>> sessions;
  for (int64_t i = 0; i < args.Int("sessions", 16); ++i) {
    auto connection = client::Connection::Connect(args.Str("socket"), absl::StrCat("hoard-", i));
    if (!connection.ok()) {
      refusal(connection.status());
      break;
    }
    sessions.push_back(*std::move(connection));
  }
  std::vector<std::unique_ptr<client::Ring>> rings;
  uint64_t ring_bytes = 0;
  for (uint64_t slot_bytes = static_cast<uint64_t>(args.Int("slot-bytes", 4096));
       slot_bytes >= 4096 && !sessions.empty();) {
    client::Connection& c = *sessions[rings.size() % sessions.size()];
    auto ring = client::Ring::Create(c, c.device_uuids().front(), 1, slot_bytes);
    if (!ring.ok()) {
      refusal(ring.status());
      slot_bytes /= 2;
      continue;
    }
    rings.push_back(*std::move(ring));
    ring_bytes += slot_bytes;
  }
  report.Add("sessions", absl::StrCat(sessions.size()));
  report.Add("rings", absl::StrCat(rings.size()));
  report.Add("ring_bytes", absl::StrCat(ring_bytes));
  report.Add("holding", "1");
  const std::string stop_file = args.Str("stop-file");
  for (absl::Time until = absl::Now() + absl::Seconds(args.Int("seconds", 120));
       absl::Now() < until && ::access(stop_file.c_str(), F_OK) != 0;) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  return all_exhausted ? kClientOk : kClientFailed;
}
BLOCKSWAP_CHILD_ROLE("ring-hoard", RunRingHoard);

}  // namespace
}  // namespace blockswap::testing
