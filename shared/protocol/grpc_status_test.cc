#include "shared/protocol/grpc_status.h"

#include <gtest/gtest.h>

namespace blockswap {
namespace {

TEST(GrpcStatus, RoundTripsCodeAndMessage) {
  grpc::Status wire = ToGrpcStatus(absl::ResourceExhaustedError("slot 5 out of range"));
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(wire.error_message(), "slot 5 out of range");
  absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(back.message(), "slot 5 out of range");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace blockswap
