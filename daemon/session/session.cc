#include "daemon/session/session.h"

#include "daemon/device/device_worker.h"
#include "daemon/session/side_channel.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

void Session::End(SessionEnd how) {
  absl::MutexLock lock(&mu);
  ended = true;
  // A client that detaches has closed its rings (client::Ring closes each
  // before its connection detaches); one the daemon leaves while it runs may
  // still map them.
  for (auto& [ring_id, ring] : rings) {
    switch (how) {
      case SessionEnd::kDetached:
        ring.worker->RetireRing(ring_id, DeviceWorker::RetireReason::kClosedByClient);
        break;
      case SessionEnd::kProcessExited:
        ring.worker->RetireRing(ring_id, DeviceWorker::RetireReason::kOwnerExited);
        break;
      case SessionEnd::kDaemonStopping:
      case SessionEnd::kReplaced:
        ring.worker->RetireRing(ring_id, DeviceWorker::RetireReason::kOwnerDetached, peer_.pidfd);
        break;
    }
  }
  rings.clear();
  // The commit reads its staging area without the lock.
  std::erase_if(uploads, [](const auto& entry) { return !entry.second.committing; });
  models->Clear();
  side_channel.Reset();
  file_offers.clear();
  charged.Release();
}

absl::StatusOr<uint64_t> Session::SendFds(const std::vector<int>& fds) {
  uint64_t batch = ++next_batch;
  BLOCKSWAP_RETURN_IF_ERROR(SendBatch(batch, fds));
  return batch;
}

absl::Status Session::SendBatch(uint64_t batch, const std::vector<int>& fds) {
  if (!side_channel.valid()) {
    return absl::FailedPreconditionError(
        "this session has no descriptor side channel (connect it after Attach)");
  }
  absl::Status sent = SendFdBatch(side_channel, batch, fds);
  if (!sent.ok() && !absl::IsInvalidArgument(sent)) side_channel.Reset();
  return sent;
}

}  // namespace blockswap::daemon
