// The one place where absl::Status becomes grpc::Status (the service edge).
#ifndef BLOCKSWAP_SHARED_PROTOCOL_GRPC_STATUS_H_
#define BLOCKSWAP_SHARED_PROTOCOL_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace blockswap {

// The codes are the same numbers (both follow google.rpc.Code).
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_PROTOCOL_GRPC_STATUS_H_
