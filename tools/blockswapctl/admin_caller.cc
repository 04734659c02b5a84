#include "tools/blockswapctl/admin_caller.h"

#include <grpcpp/generic/generic_stub.h>

#include <string>
#include <vector>

namespace blockswap::ctl {

absl::StatusOr<bool> AdminCaller::Serving() {
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(options_.timeout_seconds)));
  grpc::CompletionQueue queue;
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  auto call = stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &queue);
  call->StartCall();
  grpc::ByteBuffer reply;
  grpc::Status status;
  call->Finish(&reply, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  queue.Next(&tag, &ok);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  if (!status.ok()) return FromGrpcStatus(status);
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (reply.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  constexpr char kServing[] = {0x08, 0x01};  // status = SERVING
  return bytes == std::string(kServing, 2);
}

}  // namespace blockswap::ctl
