// What every blockswapctl command shares: its options, the exit codes, and
// the Admin RPC caller with the per-call deadline.
#ifndef BLOCKSWAP_TOOLS_BLOCKSWAPCTL_ADMIN_CALLER_H_
#define BLOCKSWAP_TOOLS_BLOCKSWAPCTL_ADMIN_CALLER_H_

#include <grpcpp/grpcpp.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.grpc.pb.h"
#include "client/core/connection.h"
#include "client/core/socket_path.h"
#include "shared/protocol/grpc_status.h"
#include "tools/blockswapctl/admin_format.h"

namespace blockswap::ctl {

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
// The daemon sends replies of up to 64 MiB (residency and statistics of a
// busy node can pass gRPC's 4 MiB default).
inline constexpr int kMaxMessageBytes = 64 << 20;

struct Options {
  // --socket; after parsing, ResolveSocket's choice ($BLOCKSWAP_SOCKET, then
  // the system socket, then a running private daemon), so every command and
  // message uses the same path.
  std::string socket_path;
  bool json = false;
  double timeout_seconds = 10;
};

class AdminCaller {
 public:
  explicit AdminCaller(const Options& options) : options_(options) {
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("unix:", options.socket_path),
                                         grpc::InsecureChannelCredentials(), arguments);
    stub_ = v1::Admin::NewStub(channel_);
  }

  // grpc.health.v1.Health/Check for the whole server (service ""): whether
  // the daemon is SERVING. Called through the generic stub with the two
  // messages written out (request: empty; reply: field 1, the enum), so that
  // the health proto need not be compiled into the client.
  absl::StatusOr<bool> Serving();

  // Calls one unary Admin method with the per-call deadline. Not waiting for
  // the channel to become ready is deliberate: with no daemon the call fails
  // at once (UNAVAILABLE) instead of after the deadline.
  template <typename Request, typename Reply>
  absl::StatusOr<Reply> Call(grpc::Status (v1::Admin::Stub::*method)(grpc::ClientContext*,
                                                                     const Request&, Reply*),
                             const Request& request = Request()) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(options_.timeout_seconds)));
    Reply reply;
    grpc::Status status = ((*stub_).*method)(&context, request, &reply);
    if (!status.ok()) return FromGrpcStatus(status);
    return reply;
  }

 private:
  const Options& options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

inline void PrintJson(const nlohmann::json& document) { std::cout << DumpJson(document) << "\n"; }

// Runs one reporting command: call, then print the table or the document.
template <typename Request, typename Reply>
int Report(const Options& options, const std::string& command,
           grpc::Status (v1::Admin::Stub::*method)(grpc::ClientContext*, const Request&, Reply*),
           std::string (*text)(const Reply&), nlohmann::json (*to_json)(const Reply&)) {
  AdminCaller caller(options);
  absl::StatusOr<Reply> reply = caller.Call(method);
  if (!reply.ok()) {
    std::cerr << "blockswapctl: " << command << ": "
              << DescribeCallFailure(options.socket_path, reply.status()) << "\n";
    return kExitFailure;
  }
  if (options.json) {
    PrintJson(to_json(*reply));
  } else {
    std::cout << text(*reply);
  }
  return 0;
}

}  // namespace blockswap::ctl

#endif  // BLOCKSWAP_TOOLS_BLOCKSWAPCTL_ADMIN_CALLER_H_
