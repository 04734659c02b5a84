// DaemonProcess::Admin(), apart from the rest of daemon_process.cc so that a
// test binary can start daemons without linking the generated gRPC code.
#include <grpcpp/grpcpp.h>

#include "tests/support/daemon_process.h"

namespace blockswap::testing {

std::unique_ptr<v1::Admin::Stub> DaemonProcess::Admin() const {
  return v1::Admin::NewStub(
      grpc::CreateChannel("unix:" + socket_path_, grpc::InsecureChannelCredentials()));
}

}  // namespace blockswap::testing
