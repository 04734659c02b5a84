// DaemonView: the running daemon's parts, as the Admin service and the
// metrics read them. One pointer per part; everything must outlive the
// services that hold the view.
#ifndef BLOCKSWAP_DAEMON_SERVER_DAEMON_VIEW_H_
#define BLOCKSWAP_DAEMON_SERVER_DAEMON_VIEW_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "absl/time/time.h"
#include "daemon/device/device_worker.h"
#include "daemon/server/verify_queue.h"
#include "daemon/session/session_manager.h"
#include "daemon/store/model_store.h"
#include "shared/backend/backend.h"

namespace blockswap::daemon {

struct DaemonView {
  const Backend* backend = nullptr;
  // Read by every report; changed only by EvictModel and VerifyModel.
  ModelStore* store = nullptr;
  const SessionManager* sessions = nullptr;
  std::map<std::string, const DeviceWorker*> workers;  // by device UUID
  uint64_t boot_id = 0;
  absl::Time started_at;
  // Where VerifyModel re-hashes, off the reactor and off the work queue of
  // the clients' calls; null: it answers UNIMPLEMENTED.
  VerifyQueue* verify = nullptr;
  // Connections the listener refused or closed unserved; null: not counted.
  const std::atomic<uint64_t>* refused_connections = nullptr;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_DAEMON_VIEW_H_
