// One attached client process and everything it owns.
#ifndef BLOCKSWAP_DAEMON_SESSION_SESSION_H_
#define BLOCKSWAP_DAEMON_SESSION_SESSION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.pb.h"
#include "daemon/budget/ledger.h"
#include "daemon/device/load_resolver.h"
#include "daemon/session/file_offers.h"
#include "daemon/session/peer.h"
#include "daemon/store/model_store.h"
#include "shared/base/unique_fd.h"
#include "shared/os/shared_memory.h"
#include "shared/protocol/copy_path.h"
#include "shared/protocol/model_layout.h"
#include "shared/protocol/ring.h"

namespace blockswap::daemon {

class DeviceWorker;

// A ring as its session knows it; the ring itself lives in its DeviceWorker.
struct SessionRing {
  DeviceWorker* worker = nullptr;
  std::string device_uuid;
  RingShape shape;
};

// An upload between BeginUpload and CommitUpload: a staging memory object the
// session fills and the daemon then copies into the master.
struct Upload {
  std::string name;
  ModelLayout layout;
  SharedMemory staging;
  std::vector<uint64_t> block_offsets;
  bool committing = false;  // CommitUpload is running: a second one is refused
  // Its staging bytes in the client's quotas and the node's memory budget.
  Reservation charged;
  // The blocks the client did not upload because the daemon held them (in a
  // model it may see) at BeginUpload; the references keep them mapped.
  KnownBlocks known;
};

// How a session ended, which decides when its remaining rings are freed
// (DeviceWorker::RetireReason).
enum class SessionEnd {
  kDetached,        // the client said it is done (Detach): it closed its rings
  kProcessExited,   // its process exited: its imports ended with it
  kDaemonStopping,  // shutdown, the client alive: it may still map its rings
  kReplaced,        // its process attached anew in its place: it may still map them
};

// Thread-safe: fields below `mu` are guarded by it; the rest never change
// after Attach.
class Session {
 public:
  // `charged`: the session's count in its process's and uid's quotas.
  Session(uint64_t id, std::string token, Peer peer, std::string client_name,
          Reservation charged = {}, CopyPath copy = CopyPath::kDaemon)
      : models(std::make_shared<SessionModels>(id)),
        fast_path_loads(std::make_shared<FastPathLoadCounts>()),
        charged(std::move(charged)),
        id_(id),
        token_(std::move(token)),
        peer_(std::move(peer)),
        client_name_(std::move(client_name)),
        copy_(copy),
        attached_at_(absl::Now()) {}

  uint64_t id() const { return id_; }
  const std::string& token() const { return token_; }
  const Peer& peer() const { return peer_; }
  const std::string& client_name() const { return client_name_; }
  // Who copies into its rings (AttachReply.copy).
  CopyPath copy() const { return copy_; }
  absl::Time attached_at() const { return attached_at_; }

  // The models open in the session, by id and by handle; its own lock, so
  // that the device workers resolve request-ring entries with it
  // (LoadResolver). Cleared when the session ends.
  const std::shared_ptr<SessionModels> models;
  // Loads that came through the session's request rings (counted by the
  // device workers); `loads` and `rejected_loads` below count the gRPC ones.
  const std::shared_ptr<FastPathLoadCounts> fast_path_loads;
  // Both transports' loads, for the admin views and metrics.
  uint64_t all_loads() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return loads + fast_path_loads->loads.load(std::memory_order_relaxed);
  }
  uint64_t all_rejected_loads() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return rejected_loads + fast_path_loads->rejected.load(std::memory_order_relaxed);
  }

  // Marks the session ended and lets go of what it holds: its rings (to be
  // freed when nothing on a device can still touch them, which `how`
  // decides), uploads, models, side channel, file offers and its quota
  // charge. An upload being committed stays until CommitUpload drops it.
  void End(SessionEnd how) ABSL_LOCKS_EXCLUDED(mu);
  // Sends `fds` over the side channel as a new batch; the batch's number.
  absl::StatusOr<uint64_t> SendFds(const std::vector<int>& fds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Sends `fds` as batch `batch` (from next_batch). FAILED_PRECONDITION
  // without a side channel; one that fails to send (other than a batch too
  // large) is dropped, as it cannot be trusted to stay in step.
  absl::Status SendBatch(uint64_t batch, const std::vector<int>& fds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  mutable absl::Mutex mu;
  bool ended ABSL_GUARDED_BY(mu) = false;
  // The session's own count in its process's and uid's max_sessions quotas;
  // returned when it ends.
  Reservation charged ABSL_GUARDED_BY(mu);
  UniqueFd side_channel ABSL_GUARDED_BY(mu);
  uint64_t next_batch ABSL_GUARDED_BY(mu) = 0;
  uint64_t next_upload ABSL_GUARDED_BY(mu) = 0;
  std::map<uint64_t, SessionRing> rings ABSL_GUARDED_BY(mu);
  std::map<uint64_t, Upload> uploads ABSL_GUARDED_BY(mu);
  // Descriptors of files offered on the side channel, by offer id, until a
  // RegisterFile names them (daemon/session/file_offers.h).
  std::map<uint64_t, ParkedFileOffer> file_offers ABSL_GUARDED_BY(mu);
  std::vector<v1::PassStats> pass_stats ABSL_GUARDED_BY(mu);
  uint64_t loads ABSL_GUARDED_BY(mu) = 0;
  uint64_t rejected_loads ABSL_GUARDED_BY(mu) = 0;
  // Sums over every pass the client reported (pass_stats keeps the last ones).
  double reported_stall_seconds ABSL_GUARDED_BY(mu) = 0;      // compute-stream idle
  double reported_host_wait_seconds ABSL_GUARDED_BY(mu) = 0;  // trainer thread blocked
  double reported_copy_seconds ABSL_GUARDED_BY(mu) = 0;

 private:
  const uint64_t id_;
  const std::string token_;
  const Peer peer_;
  const std::string client_name_;
  const CopyPath copy_;
  const absl::Time attached_at_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_SESSION_H_
