// The cuda backend's streams (cuda_backend.cc): a stream of the driver, the
// shared words its memory operations write and wait for, and the host
// functions it runs. Private to the cuda backend.
#ifndef BLOCKSWAP_SHARED_BACKEND_CUDA_STREAM_H_
#define BLOCKSWAP_SHARED_BACKEND_CUDA_STREAM_H_

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "shared/backend/backend.h"
#include "shared/backend/cuda_check.h"
#include "shared/backend/cuda_driver.h"
#include "shared/backend/cuda_timing.h"
#include "shared/base/status.h"
#include "shared/os/shared_memory.h"

namespace blockswap::cuda_internal {

// Runs on a driver thread. noexcept: an exception must not unwind into the
// driver's C frames; it terminates here instead.
inline void CUDA_CB RunHostFunction(void* user_data) noexcept {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(user_data));
  (*fn)();
}

// A shared mapping registered (mapped, portable) for the device, so that the
// GPU reads and writes its words over the bus: cuStreamWaitValue32 polls
// host memory, and a CPU store releases a stream's wait without any CUDA
// call (what a client's watchdog needs when the daemon is gone).
class CudaStreamWords final : public StreamWords {
 public:
  CudaStreamWords(DeviceHealth& health, Mapping mapping, CUdeviceptr device_address)
      : health_(health), mapping_(std::move(mapping)), device_address_(device_address) {}
  CudaStreamWords(const CudaStreamWords&) = delete;
  CudaStreamWords& operator=(const CudaStreamWords&) = delete;
  ~CudaStreamWords() override {
    ScopedContext guard = ScopedContext::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuMemHostUnregister(mapping_.data()));
  }

  size_t count() const override { return mapping_.size() / sizeof(uint32_t); }
  std::atomic<uint32_t>& word(size_t index) const override {
    return static_cast<std::atomic<uint32_t>*>(mapping_.data())[index];
  }
  absl::StatusOr<CUdeviceptr> DeviceAddress(size_t index) const {
    if (index >= count()) {
      return absl::OutOfRangeError(
          absl::StrCat("stream word ", index, " out of range (", count(), " words)"));
    }
    return device_address_ + index * sizeof(uint32_t);
  }

 private:
  DeviceHealth& health_;
  Mapping mapping_;
  const CUdeviceptr device_address_;
};

inline absl::StatusOr<CudaStreamWords*> AsCudaWords(StreamWords& words) {
  auto* cuda_words = dynamic_cast<CudaStreamWords*>(&words);
  if (cuda_words == nullptr) return absl::InvalidArgumentError("not cuda-backend stream words");
  return cuda_words;
}

class CudaStream final : public Stream {
 public:
  // `owned`: this object created the stream and destroys it; a wrapped
  // caller's stream (Device::WrapStream) is neither synchronized nor
  // destroyed here.
  CudaStream(DeviceHealth& health, CUstream stream, bool owned = true)
      : health_(health), stream_(stream), owned_(owned) {}
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  // Destroying a stream with work in flight would let that work outlive the
  // memory and events it uses (the caller frees them next), so wait first.
  // On a poisoned device both calls return at once with the sticky error.
  ~CudaStream() override {
    if (!owned_) return;
    ScopedContext guard = ScopedContext::EnterForCleanup(health_);
    (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuStreamSynchronize(stream_));
    (void)BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuStreamDestroy(stream_));
  }

  absl::Status CopyHostToDevice(void* device_dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(
        &health_, health_.cu().cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(device_dst),
                                                 host_src, bytes, stream_));
  }

  absl::Status CopyDeviceToHost(void* host_dst, const void* device_src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(
        &health_, health_.cu().cuMemcpyDtoHAsync(
                      host_dst, reinterpret_cast<CUdeviceptr>(device_src), bytes, stream_));
  }

  absl::Status Record(Event& event) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(CudaEvent * cuda_event, AsCudaEvent(event));
    // cuEventRecord needs the event and the stream in one context; say so
    // instead of passing on CUDA_ERROR_INVALID_HANDLE.
    if (&cuda_event->health() != &health_) {
      return absl::InvalidArgumentError(absl::StrCat("cannot record an event of ",
                                                     cuda_event->health().label(),
                                                     " on a stream of ", health_.label()));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuEventRecord(cuda_event->get(), stream_));
  }

  // The event may belong to another device: cuStreamWaitEvent allows it.
  absl::Status Wait(Event& event) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(CudaEvent * cuda_event, AsCudaEvent(event));
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(&health_,
                                 health_.cu().cuStreamWaitEvent(stream_, cuda_event->get(), 0));
  }

  absl::Status WaitTimed(Event& event, WaitTimer& timer) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(CudaEvent * cuda_event, AsCudaEvent(event));
    auto* cuda_timer = dynamic_cast<CudaWaitTimer*>(&timer);
    if (cuda_timer == nullptr || &cuda_timer->health() != &health_) {
      return absl::InvalidArgumentError(absl::StrCat("a wait on a stream of ", health_.label(),
                                                     " can only be timed by a timer of ",
                                                     health_.label()));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    return cuda_timer->RecordAround(stream_, cuda_event->get());
  }

  // The default flag orders the copy's writes before the word's (a memory
  // barrier), which is what the word promises to its waiter.
  absl::Status WriteWord(StreamWords& words, size_t index, uint32_t value) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(CudaStreamWords * cuda_words, AsCudaWords(words));
    BLOCKSWAP_ASSIGN_OR_RETURN(CUdeviceptr address, cuda_words->DeviceAddress(index));
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(
        &health_,
        health_.cu().cuStreamWriteValue32(stream_, address, value, CU_STREAM_WRITE_VALUE_DEFAULT));
  }

  // CU_STREAM_WAIT_VALUE_GEQ compares as WordReached does (serial numbers).
  absl::Status WaitWord(StreamWords& words, size_t index, uint32_t target,
                        WaitTimer* timer) override {
    BLOCKSWAP_ASSIGN_OR_RETURN(CudaStreamWords * cuda_words, AsCudaWords(words));
    BLOCKSWAP_ASSIGN_OR_RETURN(CUdeviceptr address, cuda_words->DeviceAddress(index));
    CudaWaitTimer* cuda_timer = nullptr;
    if (timer != nullptr) {
      cuda_timer = dynamic_cast<CudaWaitTimer*>(timer);
      if (cuda_timer == nullptr || &cuda_timer->health() != &health_) {
        return absl::InvalidArgumentError(absl::StrCat("a wait on a stream of ", health_.label(),
                                                       " can only be timed by a timer of ",
                                                       health_.label()));
      }
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    auto wait = [&]() -> absl::Status {
      return BLOCKSWAP_CUDA_STATUS(
          &health_,
          health_.cu().cuStreamWaitValue32(stream_, address, target, CU_STREAM_WAIT_VALUE_GEQ));
    };
    return cuda_timer != nullptr ? cuda_timer->RecordAround(stream_, wait) : wait();
  }

  // The function is owned by the driver from a successful launch on and
  // freed after it ran. The driver does not call host functions once the
  // device's context has failed, so on a poisoned device a pending function
  // (and what it captured) is leaked rather than run.
  absl::Status LaunchHostFunc(std::function<void()> fn) override {
    if (!fn) return absl::InvalidArgumentError("LaunchHostFunc needs a function to run");
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    auto owned = std::make_unique<std::function<void()>>(std::move(fn));
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(
        &health_, health_.cu().cuLaunchHostFunc(stream_, &RunHostFunction, owned.get()));
    (void)owned.release();  // RunHostFunction owns it now
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    return BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuStreamSynchronize(stream_));
  }

 private:
  DeviceHealth& health_;
  const CUstream stream_;
  const bool owned_;
};

}  // namespace blockswap::cuda_internal

#endif  // BLOCKSWAP_SHARED_BACKEND_CUDA_STREAM_H_
