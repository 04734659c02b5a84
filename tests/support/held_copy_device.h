// HeldCopyDevice: a device whose streams run no copy until the test lets
// them, so that a test can look at the daemon while a copy it issued is
// queued and not yet run. Everything else is the wrapped device's (host
// backend): its memory, events and streams, so the protocol's objects are
// real and shared with clients that use the wrapped device itself.
#ifndef BLOCKSWAP_TESTS_SUPPORT_HELD_COPY_DEVICE_H_
#define BLOCKSWAP_TESTS_SUPPORT_HELD_COPY_DEVICE_H_

#include <memory>
#include <utility>

#include "absl/synchronization/notification.h"
#include "shared/backend/backend.h"

namespace blockswap::testing {

class HeldCopyDevice final : public Device {
 public:
  explicit HeldCopyDevice(Device& device) : device_(device) {}

  // From now on the streams' copies run (once; it cannot be undone).
  void ReleaseCopies() {
    if (!copies_released_->HasBeenNotified()) copies_released_->Notify();
  }

  const DeviceInfo& info() const override { return device_.info(); }
  absl::StatusOr<uint64_t> FreeMemoryBytes() override { return device_.FreeMemoryBytes(); }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    return device_.Allocate(bytes);
  }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> AllocatePrivate(size_t bytes) override {
    return device_.AllocatePrivate(bytes);
  }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> ImportMemory(ExportedHandle handle,
                                                             size_t bytes) override {
    return device_.ImportMemory(std::move(handle), bytes);
  }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override { return device_.CreateEvent(); }
  absl::Status memory_export_status() override { return device_.memory_export_status(); }
  absl::StatusOr<std::unique_ptr<WaitTimer>> CreateWaitTimer() override {
    return device_.CreateWaitTimer();
  }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    absl::StatusOr<std::unique_ptr<Stream>> stream = device_.CreateStream();
    if (!stream.ok()) return stream.status();
    return std::unique_ptr<Stream>(new HeldCopyStream(*std::move(stream), copies_released_));
  }
  absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void* native,
                                                     absl::Duration wait_timeout) override {
    return device_.WrapStream(native, wait_timeout);
  }
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHostMemory(void* data,
                                                                       size_t bytes) override {
    return device_.RegisterHostMemory(data, bytes);
  }
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterReadOnlyHostMemory(
      const void* data, size_t bytes) override {
    return device_.RegisterReadOnlyHostMemory(data, bytes);
  }
  absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> AllocatePinnedHostBuffer(
      size_t bytes) override {
    return device_.AllocatePinnedHostBuffer(bytes);
  }
  absl::StatusOr<std::unique_ptr<StreamWords>> MapStreamWords(Mapping mapping) override {
    return device_.MapStreamWords(std::move(mapping));
  }
  absl::Status stream_words_status() const override { return device_.stream_words_status(); }
  absl::Status health() const override { return device_.health(); }
  absl::Status UseOnThisThread() override { return device_.UseOnThisThread(); }

 private:
  // Each copy waits on the stream, in order, until the copies are released.
  class HeldCopyStream final : public Stream {
   public:
    HeldCopyStream(std::unique_ptr<Stream> stream,
                   std::shared_ptr<absl::Notification> copies_released)
        : stream_(std::move(stream)), copies_released_(std::move(copies_released)) {}

    absl::Status CopyHostToDevice(void* device_dst, const void* host_src, size_t bytes) override {
      if (absl::Status held = Hold(); !held.ok()) return held;
      return stream_->CopyHostToDevice(device_dst, host_src, bytes);
    }
    absl::Status CopyDeviceToHost(void* host_dst, const void* device_src, size_t bytes) override {
      if (absl::Status held = Hold(); !held.ok()) return held;
      return stream_->CopyDeviceToHost(host_dst, device_src, bytes);
    }
    absl::Status Record(Event& event) override { return stream_->Record(event); }
    absl::Status Wait(Event& event) override { return stream_->Wait(event); }
    absl::Status WaitTimed(Event& event, WaitTimer& timer) override {
      return stream_->WaitTimed(event, timer);
    }
    absl::Status WriteWord(StreamWords& words, size_t index, uint32_t value) override {
      return stream_->WriteWord(words, index, value);
    }
    absl::Status WaitWord(StreamWords& words, size_t index, uint32_t target,
                          WaitTimer* timer) override {
      return stream_->WaitWord(words, index, target, timer);
    }
    absl::Status LaunchHostFunc(std::function<void()> fn) override {
      return stream_->LaunchHostFunc(std::move(fn));
    }
    absl::Status Synchronize() override { return stream_->Synchronize(); }

   private:
    absl::Status Hold() {
      return stream_->LaunchHostFunc(
          [released = copies_released_] { released->WaitForNotification(); });
    }
    std::unique_ptr<Stream> stream_;
    std::shared_ptr<absl::Notification> copies_released_;
  };

  Device& device_;
  std::shared_ptr<absl::Notification> copies_released_ = std::make_shared<absl::Notification>();
};

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_HELD_COPY_DEVICE_H_
