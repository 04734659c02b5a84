// Client roles of the integration tests (client_roles.cc, rogue_roles.cc,
// budget_roles.cc, visibility_roles.cc)
// and the model they share.
#ifndef BLOCKSWAP_TESTS_INTEGRATION_CLIENT_ROLES_H_
#define BLOCKSWAP_TESTS_INTEGRATION_CLIENT_ROLES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "shared/protocol/model_layout.h"
#include "tests/integration/test_model.h"
#include "tests/support/key_value_args.h"

namespace blockswap::testing {

enum ClientExit : int {
  kClientOk = 0,
  kClientFailed = 1,      // an error other than a timeout (reported)
  kClientSetupFailed = 2,
  kClientWrongBytes = 10,
  kClientTimedOut = 12,
};

std::vector<std::vector<client::TensorUpload>> ModelUploads(
    const std::vector<std::vector<uint8_t>>& data, uint32_t blocks);
// DestroyRing straight on the stub (no drain, unlike client::Ring's
// destructor), for the roles that test the daemon's side of it.
absl::Status RawDestroyRing(client::Connection& c, uint64_t ring_id);
// RegisterFile straight on the stub naming `offer` (a descriptor already
// offered on the side channel), for the roles that offer what the client
// library would not or set a deadline it does not.
absl::Status RawRegisterFile(client::Connection& c, uint64_t offer,
                             const std::string& block_pattern = R"(blocks\.(\d+)\.)",
                             absl::Duration timeout = absl::InfiniteDuration());

// A well-formed model id that no test registers.
inline constexpr char kUnregisteredModelId[] =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// --uid=N: the role runs as uid N (testing::BecomeUser); false (said on stderr) when
// it cannot. Without --uid: true, unchanged.
bool BecomeUid(const KeyValueArgs& args);

std::vector<std::byte> ExpectedBlock(const ModelLayout& layout,
                                     const std::vector<std::vector<uint8_t>>& data, uint32_t b);

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_INTEGRATION_CLIENT_ROLES_H_
