#include "shared/protocol/ring_wire.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {

v1::FdRef AddFd(UniqueFd fd, uint64_t batch, std::vector<UniqueFd>& fds) {
  v1::FdRef ref;
  ref.set_batch(batch);
  ref.set_index(static_cast<uint32_t>(fds.size()));
  fds.push_back(std::move(fd));
  return ref;
}

v1::ExportedHandle HandleToWire(ExportedHandle handle, uint64_t batch, std::vector<UniqueFd>& fds) {
  v1::ExportedHandle out;
  out.set_blob(std::move(handle.blob));
  if (handle.fd.valid()) {
    *out.mutable_fd() = AddFd(std::move(handle.fd), batch, fds);
  }
  return out;
}

// Hands out each received descriptor at most once.
class FdTaker {
 public:
  FdTaker(std::vector<UniqueFd> fds, uint64_t batch) : fds_(std::move(fds)), batch_(batch) {}

  absl::StatusOr<UniqueFd> Take(const v1::FdRef& ref, absl::string_view field) {
    if (ref.batch() != batch_) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " names descriptor batch ", ref.batch(), ", expected ", batch_));
    }
    if (ref.index() >= fds_.size() || !fds_[ref.index()].valid()) {
      return absl::InvalidArgumentError(absl::StrCat(field, " names descriptor ", ref.index(),
                                                     " of ", fds_.size(),
                                                     " received (missing or used twice)"));
    }
    return std::move(fds_[ref.index()]);
  }

  absl::StatusOr<ExportedHandle> TakeHandle(const v1::ExportedHandle& handle,
                                            absl::string_view field) {
    ExportedHandle out;
    out.blob = handle.blob();
    if (handle.has_fd()) {
      BLOCKSWAP_ASSIGN_OR_RETURN(out.fd, Take(handle.fd(), field));
    }
    return out;
  }

 private:
  std::vector<UniqueFd> fds_;
  uint64_t batch_;
};

}  // namespace

RingOnWire RingToWire(RingExport exported, uint64_t batch) {
  RingOnWire wire;
  v1::RingDescriptor& d = wire.descriptor;
  d.set_ring_id(exported.ring_id);
  d.set_device_uuid(exported.device_uuid);
  d.set_slot_count(exported.shape.slot_count);
  d.set_slot_bytes(exported.shape.slot_bytes);
  for (uint64_t offset : exported.slot_offsets) d.add_slot_offsets(offset);
  d.set_memory_bytes(exported.memory_bytes);
  *d.mutable_memory() = HandleToWire(std::move(exported.memory), batch, wire.fds);
  *d.mutable_daemon_control() = AddFd(std::move(exported.daemon_control), batch, wire.fds);
  *d.mutable_client_control() = AddFd(std::move(exported.client_control), batch, wire.fds);
  d.set_daemon_boot_id(exported.boot_id);
  d.set_request_ring_capacity(exported.request_ring_capacity);
  if (exported.doorbell.bell.valid()) {
    *d.mutable_doorbell() = AddFd(std::move(exported.doorbell.bell), batch, wire.fds);
    *d.mutable_doorbell_sleeping() = AddFd(std::move(exported.doorbell.sleeping), batch, wire.fds);
  }
  if (exported.ready_words.valid()) {
    *d.mutable_ready_words() = AddFd(std::move(exported.ready_words), batch, wire.fds);
  }
  return wire;
}

absl::StatusOr<RingExport> RingFromWire(const v1::RingDescriptor& d, std::vector<UniqueFd> fds,
                                        uint64_t batch) {
  FdTaker taker(std::move(fds), batch);
  RingExport out;
  out.ring_id = d.ring_id();
  out.device_uuid = d.device_uuid();
  out.shape = RingShape{d.slot_count(), d.slot_bytes()};
  BLOCKSWAP_RETURN_IF_ERROR(ValidateRingShape(out.shape));
  out.slot_offsets.assign(d.slot_offsets().begin(), d.slot_offsets().end());
  out.memory_bytes = d.memory_bytes();
  BLOCKSWAP_ASSIGN_OR_RETURN(out.memory, taker.TakeHandle(d.memory(), "memory"));
  BLOCKSWAP_ASSIGN_OR_RETURN(out.daemon_control, taker.Take(d.daemon_control(), "daemon_control"));
  BLOCKSWAP_ASSIGN_OR_RETURN(out.client_control, taker.Take(d.client_control(), "client_control"));
  out.boot_id = d.daemon_boot_id();
  out.request_ring_capacity = d.request_ring_capacity();
  if (d.has_doorbell()) {
    BLOCKSWAP_ASSIGN_OR_RETURN(out.doorbell.bell, taker.Take(d.doorbell(), "doorbell"));
    BLOCKSWAP_ASSIGN_OR_RETURN(out.doorbell.sleeping,
                               taker.Take(d.doorbell_sleeping(), "doorbell_sleeping"));
  }
  if (d.has_ready_words()) {
    BLOCKSWAP_ASSIGN_OR_RETURN(out.ready_words, taker.Take(d.ready_words(), "ready_words"));
  }
  return out;
}

}  // namespace blockswap
