// An HTTP listener (civetweb) that serves the Prometheus text of
// FormatMetrics at /metrics — off unless --metrics-listen / metrics_listen
// names an address. It answers nothing else (404) and accepts only GET.
#ifndef BLOCKSWAP_DAEMON_SERVER_METRICS_SERVER_H_
#define BLOCKSWAP_DAEMON_SERVER_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct mg_context;
struct mg_connection;

namespace blockswap::daemon {

class MetricsServer {
 public:
  // Listens on `address` (HOST:PORT; port 0 picks a free one) and answers
  // GET /metrics with `render()`, called on civetweb's threads (so it must
  // be thread-safe). `render` must outlive the server.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address,
                                                              std::function<std::string()> render);
  ~MetricsServer();  // stops listening and waits for requests in progress

  int port() const { return port_; }

 private:
  explicit MetricsServer(std::function<std::string()> render) : render_(std::move(render)) {}
  static int Handle(::mg_connection* connection, void* self);

  std::function<std::string()> render_;
  mg_context* context_ = nullptr;
  int port_ = 0;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_METRICS_SERVER_H_
