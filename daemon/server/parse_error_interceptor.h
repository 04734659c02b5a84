// Precise answers for requests gRPC could not hand to a method. gRPC's
// callback server answers a body that does not parse as the method's request
// message with UNIMPLEMENTED and an empty message — indistinguishable from a
// method that does not exist. This interceptor rewrites exactly that answer
// (UNIMPLEMENTED with no message; no handler of blockswapd gives one) into
//   INVALID_ARGUMENT: the request body of /blockswap.v1.BlockSwap/CreateRing
//   does not parse as a blockswap.v1.CreateRingRequest ...
// for a method the daemon has, or into UNIMPLEMENTED naming the method and
// the services it does have.
#ifndef BLOCKSWAP_DAEMON_SERVER_PARSE_ERROR_INTERCEPTOR_H_
#define BLOCKSWAP_DAEMON_SERVER_PARSE_ERROR_INTERCEPTOR_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "absl/strings/string_view.h"

namespace blockswap::daemon {

// What the interceptor answers instead of a bare UNIMPLEMENTED for `method`
// ("/package.Service/Method").
grpc::Status ExplainBareUnimplemented(absl::string_view method);

class ParseErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_PARSE_ERROR_INTERCEPTOR_H_
