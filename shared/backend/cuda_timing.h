// The cuda backend's events and timing (cuda_backend.cc): an event of this
// process, the anchor that places a device's timing events on
// CLOCK_MONOTONIC, and the timer of a stream's wait. Private to the cuda
// backend.
#ifndef BLOCKSWAP_SHARED_BACKEND_CUDA_TIMING_H_
#define BLOCKSWAP_SHARED_BACKEND_CUDA_TIMING_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shared/backend/backend.h"
#include "shared/backend/cuda_check.h"
#include "shared/backend/cuda_driver.h"
#include "shared/base/monotonic_clock.h"
#include "shared/base/status.h"

namespace blockswap::cuda_internal {

// An event of this process (events never cross processes: docs/protocol.md,
// "Users").
class CudaEvent final : public Event {
 public:
  CudaEvent(DeviceHealth& health, CUevent event) : health_(health), event_(event) {}
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  ~CudaEvent() override {
    ScopedContext guard = ScopedContext::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuEventDestroy(event_));
  }

  absl::StatusOr<bool> Query() override {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    CUresult error = health_.cu().cuEventQuery(event_);
    if (error == CUDA_ERROR_NOT_READY) return false;  // "not yet" is an answer, not an error
    BLOCKSWAP_RETURN_IF_ERROR(health_.Check(error, "cuEventQuery(event_)", __FILE__, __LINE__));
    return true;
  }

  CUevent get() const { return event_; }
  const DeviceHealth& health() const { return health_; }

 private:
  DeviceHealth& health_;
  const CUevent event_;
};

inline absl::StatusOr<CudaEvent*> AsCudaEvent(Event& event) {
  auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
  if (cuda_event == nullptr) {
    return absl::InvalidArgumentError(
        "the event does not belong to the cuda backend (events of another backend cannot "
        "be used on a cuda stream)");
  }
  return cuda_event;
}

// Places a completed timing event of one device on CLOCK_MONOTONIC: an
// anchor event, recorded on a private idle stream and synchronised, is read
// against the host clock right after; an event's host time is the anchor's
// plus cuEventElapsedTime between them. Re-anchored every few seconds, as
// the elapsed time is a float of milliseconds (its resolution coarsens with
// distance) and the two clocks drift. Thread-safe; owned by its CudaDevice.
class CudaClockAnchor {
 public:
  static absl::StatusOr<std::unique_ptr<CudaClockAnchor>> Create(DeviceHealth& health) {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health));
    const CudaDriverTable& cu = health.cu();
    CUstream stream = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health, cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUevent event = nullptr;
    absl::Status created =
        BLOCKSWAP_CUDA_STATUS(&health, cu.cuEventCreate(&event, CU_EVENT_DEFAULT));
    if (!created.ok()) {
      (void)BLOCKSWAP_CUDA_STATUS(&health, cu.cuStreamDestroy(stream));
      return created;
    }
    return std::unique_ptr<CudaClockAnchor>(new CudaClockAnchor(health, stream, event));
  }
  CudaClockAnchor(const CudaClockAnchor&) = delete;
  CudaClockAnchor& operator=(const CudaClockAnchor&) = delete;

  ~CudaClockAnchor() {
    ScopedContext guard = ScopedContext::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuEventDestroy(event_));
    (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuStreamDestroy(stream_));
  }

  // CLOCK_MONOTONIC when `completed` (a completed timing event of this
  // device) completed. The caller is inside a ScopedContext of the device.
  absl::StatusOr<uint64_t> HostNanosOf(CUevent completed) ABSL_LOCKS_EXCLUDED(mu_) {
    const CudaDriverTable& cu = health_.cu();
    absl::MutexLock lock(&mu_);
    if (anchored_ns_ == 0 || MonotonicNanos() - anchored_ns_ > kReanchorNanos) {
      BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cu.cuEventRecord(event_, stream_));
      BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cu.cuEventSynchronize(event_));
      anchored_ns_ = MonotonicNanos();
    }
    float ms = 0;  // negative for an event that completed before the anchor
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cu.cuEventElapsedTime(&ms, event_, completed));
    return static_cast<uint64_t>(static_cast<int64_t>(anchored_ns_) +
                                 static_cast<int64_t>(static_cast<double>(ms) * 1e6));
  }

 private:
  static constexpr uint64_t kReanchorNanos = uint64_t{5} * 1000000000u;

  CudaClockAnchor(DeviceHealth& health, CUstream stream, CUevent event)
      : health_(health), stream_(stream), event_(event) {}

  DeviceHealth& health_;
  const CUstream stream_;
  const CUevent event_;
  absl::Mutex mu_;
  uint64_t anchored_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

// Two timing events (CU_EVENT_DEFAULT: timing on) recorded
// just before and just after the stream's wait: the time between their
// completions is how long the stream sat at the wait, exactly as the
// reference offloader measures its compute stream's stall.
class CudaWaitTimer final : public WaitTimer {
 public:
  static absl::StatusOr<std::unique_ptr<CudaWaitTimer>> Create(DeviceHealth& health,
                                                               CudaClockAnchor& anchor) {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health));
    const CudaDriverTable& cu = health.cu();
    CUevent start = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health, cu.cuEventCreate(&start, CU_EVENT_DEFAULT));
    CUevent end = nullptr;
    absl::Status created = BLOCKSWAP_CUDA_STATUS(&health, cu.cuEventCreate(&end, CU_EVENT_DEFAULT));
    if (!created.ok()) {
      (void)BLOCKSWAP_CUDA_STATUS(&health, cu.cuEventDestroy(start));
      return created;
    }
    return std::unique_ptr<CudaWaitTimer>(new CudaWaitTimer(health, anchor, start, end));
  }
  CudaWaitTimer(const CudaWaitTimer&) = delete;
  CudaWaitTimer& operator=(const CudaWaitTimer&) = delete;

  // CUDA releases an event whose record is pending once the record is done.
  ~CudaWaitTimer() override {
    ScopedContext guard = ScopedContext::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuEventDestroy(start_));
    (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuEventDestroy(end_));
  }

  absl::StatusOr<std::optional<WaitIdle>> Poll() override {
    if (!issued_) return std::nullopt;
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    CUresult error = health_.cu().cuEventQuery(end_);
    if (error == CUDA_ERROR_NOT_READY) return std::nullopt;  // "not yet" is an answer
    BLOCKSWAP_RETURN_IF_ERROR(health_.Check(error, "cuEventQuery(end_)", __FILE__, __LINE__));
    return Measured();
  }

  absl::StatusOr<std::optional<WaitIdle>> Await() override {
    if (!issued_) return std::nullopt;
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, health_.cu().cuEventSynchronize(end_));
    return Measured();
  }

  // The wait itself, between the two records (on the stream's device, as
  // the caller's ScopedContext has it).
  absl::Status RecordAround(CUstream stream, CUevent awaited) {
    return RecordAround(stream, [&] {
      return BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuStreamWaitEvent(stream, awaited, 0));
    });
  }
  // The same around any wait that `issue_wait` puts on `stream`.
  absl::Status RecordAround(CUstream stream, const std::function<absl::Status()>& issue_wait) {
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, health_.cu().cuEventRecord(start_, stream));
    BLOCKSWAP_RETURN_IF_ERROR(issue_wait());
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, health_.cu().cuEventRecord(end_, stream));
    issued_ = true;
    return absl::OkStatus();
  }

  const DeviceHealth& health() const { return health_; }

 private:
  CudaWaitTimer(DeviceHealth& health, CudaClockAnchor& anchor, CUevent start, CUevent end)
      : health_(health), anchor_(anchor), start_(start), end_(end) {}

  // Both events have completed (the stream runs in order).
  absl::StatusOr<std::optional<WaitIdle>> Measured() {
    float ms = 0;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, health_.cu().cuEventElapsedTime(&ms, start_, end_));
    BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t began_ns, anchor_.HostNanosOf(start_));
    return WaitIdle{began_ns, absl::Nanoseconds(static_cast<int64_t>(ms * 1e6))};
  }

  DeviceHealth& health_;
  CudaClockAnchor& anchor_;
  const CUevent start_;
  const CUevent end_;
  bool issued_ = false;  // a wait was timed: the events have records
};

}  // namespace blockswap::cuda_internal

#endif  // BLOCKSWAP_SHARED_BACKEND_CUDA_TIMING_H_
