// What a load request names, resolved — written once for both transports
// (the gRPC Load stream, which names the model by id, and a ring's request
// ring, which names it by the session's model handle):
//   SessionModels  the models a session has open, by id and by handle
//   ResolveLoad    ValidateLoad (request_validation.h) and the block's bytes
//   LoadResolver   what a DeviceWorker is given with each ring whose client
//                  asked for a request ring: the session's models.
#ifndef BLOCKSWAP_DAEMON_DEVICE_LOAD_RESOLVER_H_
#define BLOCKSWAP_DAEMON_DEVICE_LOAD_RESOLVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "blockswap/v1/blockswap.pb.h"
#include "daemon/store/model_store.h"
#include "shared/protocol/request_queue.h"
#include "shared/protocol/ring.h"

namespace blockswap::daemon {

// Thread-safe. Its mutex is a leaf (held for a lookup only, never while
// another lock is taken), so a device worker resolves a request-ring entry
// without the session's lock.
class SessionModels {
 public:
  explicit SessionModels(uint64_t session_id) : session_id_(session_id) {}

  // Opens `model` in the session and returns its handle (the same one again
  // for a model already open). Handles are 1, 2, ... in opening order.
  uint32_t Open(std::shared_ptr<const Model> model);
  // Null when the model is not open in the session.
  std::shared_ptr<const Model> FindById(absl::string_view model_id) const;
  // NOT_FOUND naming the handle and how many the session has.
  absl::StatusOr<std::shared_ptr<const Model>> FindByHandle(uint32_t handle) const;
  // The ids of the open models.
  std::vector<std::string> Ids() const;
  // Closes every model (the session ended): every later lookup fails.
  void Clear();

 private:
  const uint64_t session_id_;
  mutable absl::Mutex mu_;
  std::map<std::string, uint32_t, std::less<>> by_id_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const Model>> by_handle_ ABSL_GUARDED_BY(mu_);  // handle h at h-1
};

// How many loads a session's request rings carried: resolved (a load, as
// SubmitLoad counts one) or refused. Atomics: the device workers count them
// without the session's lock; the gRPC transport counts in Session::loads.
struct FastPathLoadCounts {
  std::atomic<uint64_t> loads{0};
  std::atomic<uint64_t> rejected{0};
};

// A validated load's source.
struct ResolvedLoad {
  const std::byte* source = nullptr;  // the block's master bytes
  size_t bytes = 0;
  std::shared_ptr<const void> keep_alive;  // keeps `source` mapped
  std::string model_id;
  bool staged = false;  // the block's master is not pinned (BlockMaster::staged)
};

// `request` (ring, slot, block, generation; its model is `model`) against a
// ring of `shape`: ValidateLoad, then where the block's bytes are.
absl::StatusOr<ResolvedLoad> ResolveLoad(const v1::LoadRequest& request,
                                         const std::shared_ptr<const Model>& model,
                                         const RingShape& shape);

// Resolves request-ring entries of one session's rings. Thread-safe.
class LoadResolver {
 public:
  LoadResolver(std::shared_ptr<const SessionModels> models,
               std::shared_ptr<FastPathLoadCounts> counts)
      : models_(std::move(models)), counts_(std::move(counts)) {}

  // Also counts the entry in `counts`, as a load or a refusal.
  absl::StatusOr<ResolvedLoad> Resolve(uint64_t ring_id, const RingShape& shape,
                                       const RequestValues& entry) const;

 private:
  absl::StatusOr<ResolvedLoad> Find(uint64_t ring_id, const RingShape& shape,
                                    const RequestValues& entry) const;

  const std::shared_ptr<const SessionModels> models_;
  const std::shared_ptr<FastPathLoadCounts> counts_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_LOAD_RESOLVER_H_
