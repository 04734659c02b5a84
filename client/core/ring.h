// A ring as its client uses it: slots of device memory that blocks of a model
// are loaded into, ordered against the caller's compute stream. Two
// implementations, one per copy path (shared/protocol/copy_path.h):
//   DaemonCopyRing   the daemon's copy stream fills a ring the daemon
//                    exports (daemon_copy_ring.h: the load protocol);
//   TrainerCopyRing  this process's own copy stream fills a ring of its own
//                    memory from its read-only view of the masters
//                    (trainer_copy_ring.h).
// The scheduler, the C ABI and the offloaders drive either through this
// interface.
#ifndef BLOCKSWAP_CLIENT_CORE_RING_H_
#define BLOCKSWAP_CLIENT_CORE_RING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/core/connection.h"
#include "client/core/model.h"
#include "client/core/stall_meter.h"
#include "shared/protocol/copy_path.h"
#include "shared/protocol/ring.h"

namespace blockswap::client {

// Thread-safe. `native_stream` arguments are the caller's stream
// (Device::WrapStream: a cudaStream_t on cuda, nullptr on host).
class Ring {
 public:
  // A ring of `slot_count` slots of `slot_bytes` on the device, on the
  // connection's copy path (Connection::copy_path); a daemon-copy session
  // on a device the daemon cannot serve rings on copies itself, and says
  // why once.
  static absl::StatusOr<std::unique_ptr<Ring>> Create(Connection& connection,
                                                      absl::string_view device_uuid,
                                                      uint32_t slot_count, uint64_t slot_bytes);
  // Close(default stream) unless the ring was closed.
  virtual ~Ring() = default;

  // Ends the ring: waits for the loads still outstanding, orders every use
  // of the slots on `stream` (which must follow the caller's last use of
  // every slot) before the ring's memory goes, and frees it. Everything is
  // closed even when a step fails; the first failure is returned. Later
  // calls on the ring fail FAILED_PRECONDITION; closing again is a no-op.
  virtual absl::Status Close(Stream& stream, absl::Duration timeout) = 0;
  absl::Status Close(void* native_stream, absl::Duration timeout);

  // Brings the ring back after Connection::Reconnect: every slot starts
  // empty and slot() addresses may change. Not thread-safe: no other call on
  // this ring may run meanwhile.
  virtual absl::Status Recreate() = 0;

  virtual CopyPath copy_path() const = 0;
  // The daemon's id of the ring; 0 for a ring the daemon does not serve.
  virtual uint64_t id() const = 0;
  const std::string& device_uuid() const { return device_.info().uuid; }
  const RingShape& shape() const { return shape_; }
  Device& device() const { return device_; }
  // Null once the ring is closed.
  virtual void* slot(uint32_t s) const = 0;

  // The slot life cycle of client/scheduler/slot_driver.h: Load (releasing
  // the slot first if it was not), Wait before the stream reads the slot,
  // Release once the stream is done with it.
  virtual absl::Status Load(uint32_t slot, const Model& model, uint32_t block, Stream& stream) = 0;
  virtual absl::Status Wait(uint32_t slot, Stream& stream, absl::Duration timeout) = 0;
  virtual absl::Status Release(uint32_t slot, Stream& stream) = 0;
  absl::Status Load(uint32_t slot, const Model& model, uint32_t block, void* native_stream);
  absl::Status Wait(uint32_t slot, void* native_stream, absl::Duration timeout);
  absl::Status Release(uint32_t slot, void* native_stream);
  // Wait, also measuring how long `stream` sits idle at it (the compute
  // stream's stall; StallMeter) without blocking for the measurement;
  // returns the wait's ticket. nullopt where the stream itself does not wait
  // (the caller's thread waited on the host instead).
  virtual absl::StatusOr<std::optional<uint64_t>> WaitTimed(uint32_t slot, Stream& stream,
                                                            absl::Duration timeout) = 0;
  // The timed waits measured since the last call, in ticket order. With
  // `wait_for_all`, blocks until the streams have passed every wait timed so
  // far: a ticket issued before such a call and not returned is never
  // measured. One caller (the ring's scheduler) takes them.
  virtual absl::StatusOr<std::vector<MeasuredStall>> TakeMeasuredStalls(bool wait_for_all) = 0;
  // Every load issued is complete.
  virtual absl::Status Drain(absl::Duration timeout) = 0;
  // Whether `slot`'s most recent load has completed (a Wait now would not
  // block). A racy snapshot, meant for statistics.
  virtual bool Filled(uint32_t slot) = 0;
  // The copy-stream time of this ring's completed copies so far (over the
  // rings Recreate() replaced too), so it only grows; nullopt once closed.
  virtual std::optional<absl::Duration> CopyTime() = 0;
  // OK, or why the ring failed.
  virtual absl::Status Health() = 0;
  // DATA_LOSS, said once per loss, when a wait had to be let go before its
  // copy was done (a lost daemon); else OK.
  virtual absl::Status TakeUnfinishedWaits() = 0;

 protected:
  Ring(Device& device, RingShape shape) : device_(device), shape_(shape) {}

 private:
  Device& device_;
  const RingShape shape_;
};

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_RING_H_
