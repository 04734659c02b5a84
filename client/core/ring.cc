#include "client/core/ring.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/core/daemon_copy_ring.h"
#include "client/core/say_once.h"
#include "client/core/trainer_copy_ring.h"
#include "shared/base/status.h"
#include "shared/protocol/ring.h"

namespace blockswap::client {

absl::StatusOr<std::unique_ptr<Ring>> Ring::Create(Connection& connection,
                                                   absl::string_view device_uuid,
                                                   uint32_t slot_count, uint64_t slot_bytes) {
  BLOCKSWAP_ASSIGN_OR_RETURN(Device * device, connection.LocalDevice(device_uuid));
  if (connection.copy_path() == CopyPath::kDaemon) {
    absl::Status available = connection.RingsAvailable(device_uuid);
    if (available.ok()) {
      absl::StatusOr<std::unique_ptr<DaemonCopyRing>> ring =
          DaemonCopyRing::Create(connection, *device, slot_count, slot_bytes);
      if (ring.ok() || !UnusableInThisProcess(ring.status())) return ring;
      // No way from the daemon's uid to this process on this device (its
      // driver refuses the daemon's memory or words): no ring of it will do.
      connection.MarkRingsUnavailable(device_uuid, ring.status().message());
      available = connection.RingsAvailable(device_uuid);
    }
    // The daemon's copies cannot reach this device; this process's own can.
    static std::atomic<bool> said{false};
    SayOnce(said, absl::StrCat(available.message(),
                               "; this process copies its blocks itself (copy = trainer)"));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<TrainerCopyRing> ring,
                             TrainerCopyRing::Create(*device, slot_count, slot_bytes));
  return ring;
}

absl::Status Ring::Close(void* native_stream, absl::Duration timeout) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                             device_.WrapStream(native_stream, timeout));
  return Close(*stream, timeout);
}

absl::Status Ring::Load(uint32_t slot, const Model& model, uint32_t block, void* native_stream) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, device_.WrapStream(native_stream));
  return Load(slot, model, block, *stream);
}

absl::Status Ring::Wait(uint32_t slot, void* native_stream, absl::Duration timeout) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                             device_.WrapStream(native_stream, timeout));
  return Wait(slot, *stream, timeout);
}

absl::Status Ring::Release(uint32_t slot, void* native_stream) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, device_.WrapStream(native_stream));
  return Release(slot, *stream);
}

}  // namespace blockswap::client
