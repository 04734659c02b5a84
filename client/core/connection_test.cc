#include "client/core/connection.h"

#include <grpcpp/support/status.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blockswap::client {
namespace {

using ::testing::HasSubstr;

TEST(ConnectionCallError, ACallTheDaemonCancelledIsUnavailable) {
  absl::Status error = Connection::CallError(
      grpc::Status(grpc::StatusCode::CANCELLED, "Cancelled"), "reporting pass statistics");
  EXPECT_EQ(error.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(error.message(), HasSubstr("reporting pass statistics"));
  EXPECT_THAT(error.message(), HasSubstr("blockswapd ended the call"));
  EXPECT_THAT(error.message(), HasSubstr("Cancelled"));
}

TEST(ConnectionCallError, OtherCodesKeepTheirCodeAndTheDaemonsMessage) {
  absl::Status error = Connection::CallError(
      grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "max_rings_per_client 2 reached"),
      "creating a ring");
  EXPECT_EQ(error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(error.message(), HasSubstr("creating a ring"));
  EXPECT_THAT(error.message(), HasSubstr("max_rings_per_client 2 reached"));
}

}  // namespace
}  // namespace blockswap::client
