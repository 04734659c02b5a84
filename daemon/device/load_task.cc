#include "daemon/device/load_task.h"

#include <string>

namespace blockswap::daemon {

v1::LoadEvent LoadErrorEvent(uint64_t ring_id, uint32_t slot, uint32_t generation,
                             const absl::Status& error) {
  v1::LoadEvent event;
  event.set_ring_id(ring_id);
  event.set_slot(slot);
  event.set_generation(generation);
  event.set_error_code(static_cast<int>(error.code()));
  event.set_error_message(std::string(error.message()));
  return event;
}

}  // namespace blockswap::daemon
