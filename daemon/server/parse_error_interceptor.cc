#include "daemon/server/parse_error_interceptor.h"

#include <google/protobuf/descriptor.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "shared/base/message_text.h"

namespace blockswap::daemon {
namespace {

constexpr char kServices[] = "blockswap.v1.BlockSwap, blockswap.v1.Admin and grpc.health.v1.Health";

class ParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ParseErrorInterceptor(std::string method) : method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      grpc::Status status = methods->GetSendStatus();
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
          status.error_message().empty()) {
        methods->ModifySendStatus(ExplainBareUnimplemented(method_));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
};

}  // namespace

grpc::Status ExplainBareUnimplemented(absl::string_view method) {
  // "/package.Service/Method"
  const google::protobuf::MethodDescriptor* found = nullptr;
  if (size_t slash = method.rfind('/'); method.size() > 1 && method[0] == '/' && slash > 0) {
    const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
        std::string(method.substr(1, slash - 1)));
    if (service != nullptr)
      found = service->FindMethodByName(std::string(method.substr(slash + 1)));
  }
  if (found == nullptr) {
    return grpc::Status(
        grpc::StatusCode::UNIMPLEMENTED,
        absl::StrCat("blockswapd has no method ", Quoted(method), " (it serves ", kServices, ")"));
  }
  return grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      absl::StrCat("the request body of ", method, " does not parse as a ",
                   found->input_type()->full_name(),
                   " (a client built from another proto/blockswap/v1/blockswap.proto, or a "
                   "corrupted message)"));
}

grpc::experimental::Interceptor* ParseErrorInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new ParseErrorInterceptor(info->method() == nullptr ? "" : info->method());
}

}  // namespace blockswap::daemon
