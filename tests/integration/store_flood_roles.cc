// `block-flood`: one allowed user registering models of many tiny distinct
// blocks, to hold as many masters as the daemon lets it. As
// --uid=N, registers up to --models models of --blocks blocks of 8 bytes
// each (one U8 tensor; every block's content distinct across the run,
// --seed apart between runs); after a refusal it goes on with models of
// half as many blocks, down to one, to take whatever is left. Reports
// `registered` (the models that went in), `blocks` (their blocks), `refused
// CODE MESSAGE` for the first refusal and `last_refused` for the last, then
// ends its session. Exit 0 once reported, whatever the daemon answered: the
// test decides.
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "tests/integration/client_roles.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {
namespace {

constexpr uint64_t kFloodBlockBytes = 8;

int RunBlockFlood(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  if (!BecomeUid(args)) return kClientSetupFailed;
  auto connection = client::Connection::Connect(args.Str("socket"), args.Str("name", "flood"));
  if (!connection.ok()) {
    std::cerr << "block-flood: " << connection.status() << "\n";
    return kClientFailed;
  }
  uint32_t blocks = static_cast<uint32_t>(args.Int("blocks", 1000));
  const int64_t models = args.Int("models", 16);
  const uint64_t seed = static_cast<uint64_t>(args.Int("seed", 1));
  std::vector<uint64_t> content(blocks);
  int64_t registered = 0;
  uint64_t registered_blocks = 0;
  std::string first_refusal;
  for (int64_t m = 0; m < models && blocks > 0; ++m) {
    std::vector<std::vector<client::TensorUpload>> uploads(blocks);
    for (uint32_t b = 0; b < blocks; ++b) {
      content[b] = (seed << 48) ^ (static_cast<uint64_t>(m) << 24) ^ b;
      client::TensorUpload upload;
      upload.spec.name = "w";
      upload.spec.dtype = "U8";
      upload.spec.shape = {kFloodBlockBytes};
      upload.data = &content[b];
      uploads[b].push_back(std::move(upload));
    }
    auto model = client::Model::Register(**connection, absl::StrCat("flood ", m), uploads);
    if (!model.ok()) {
      const std::string refusal =
          absl::StrCat(static_cast<int>(model.status().code()), " ", model.status().message());
      if (first_refusal.empty()) first_refusal = refusal;
      report.Add("last_refused", refusal);
      blocks /= 2;
      continue;
    }
    ++registered;
    registered_blocks += blocks;
  }
  if (!first_refusal.empty()) report.Add("refused", first_refusal);
  report.Add("registered", absl::StrCat(registered));
  report.Add("blocks", absl::StrCat(registered_blocks));
  report.Add("done", "1");
  return kClientOk;
}
BLOCKSWAP_CHILD_ROLE("block-flood", RunBlockFlood);

}  // namespace
}  // namespace blockswap::testing
