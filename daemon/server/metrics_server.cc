#include "daemon/server/metrics_server.h"

#include <civetweb.h>

#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::function<std::string()> render) {
  static std::once_flag initialized;
  std::call_once(initialized, [] { mg_init_library(0); });
  std::unique_ptr<MetricsServer> server(new MetricsServer(std::move(render)));
  const char* options[] = {"listening_ports", address.c_str(), "num_threads", "2", nullptr};
  mg_callbacks callbacks{};
  // civetweb logs to stderr by default; our log has its own format.
  callbacks.log_message = [](const ::mg_connection*, const char*) { return 1; };
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = options;
  char error_text[256] = "";
  mg_error_data error{};
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  server->context_ = mg_start2(&init, &error);
  if (server->context_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot serve metrics on ", address, ": ", error_text[0] ? error_text : "civetweb failed"));
  }
  mg_set_request_handler(server->context_, "/metrics$", &MetricsServer::Handle, server.get());
  mg_server_port ports[2];
  if (mg_get_server_ports(server->context_, 2, ports) > 0) server->port_ = ports[0].port;
  return server;
}

MetricsServer::~MetricsServer() {
  if (context_ != nullptr) mg_stop(context_);
}

int MetricsServer::Handle(mg_connection* connection, void* self) {
  const mg_request_info* request = mg_get_request_info(connection);
  if (std::strcmp(request->request_method, "GET") != 0 &&
      std::strcmp(request->request_method, "HEAD") != 0) {
    mg_send_http_error(connection, 405, "only GET /metrics");
    return 405;
  }
  std::string text = static_cast<MetricsServer*>(self)->render_();
  mg_send_http_ok(connection, "text/plain; version=0.0.4; charset=utf-8",
                  static_cast<long long>(text.size()));
  if (std::strcmp(request->request_method, "GET") == 0) {
    mg_write(connection, text.data(), text.size());
  }
  return 200;
}

}  // namespace blockswap::daemon
