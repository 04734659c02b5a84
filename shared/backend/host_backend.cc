// The host backend: device memory is a shared-memory mapping, a stream is a
// queue drained by a worker thread, and an event is a pair of counters — with
// CUDA's semantics (backend.h), so that every hazard of
// the load protocol exists here too and CI can catch it without a GPU. This
// file keeps the device and the backend; host_memory.h, host_stream.h and
// host_timing.h hold the rest, one concept each.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "shared/backend/backend.h"
#include "shared/backend/host_lifetime.h"
#include "shared/backend/host_memory.h"
#include "shared/backend/host_stream.h"
#include "shared/backend/host_timing.h"
#include "shared/base/status.h"
#include "shared/os/shared_memory.h"

namespace blockswap {
namespace {

using host_internal::CountedRegistration;
using host_internal::HostEvent;
using host_internal::HostMemory;
using host_internal::HostMemoryHeader;
using host_internal::HostPinnedBuffer;
using host_internal::HostPrivateMemory;
using host_internal::HostStream;
using host_internal::HostStreamWords;
using host_internal::HostWaitTimer;
using host_internal::InlineHostStream;
using host_internal::kMemoryBlob;
using host_internal::kMemoryHeaderBytes;
using host_internal::kMemoryMagic;
using host_lifetime::ImportClaim;
using host_lifetime::ImportLedger;

class HostDevice final : public Device {
 public:
  HostDevice(int index, const HostBackendOptions& options)
      : jitter_us_(options.jitter_us),
        copy_delay_(absl::Microseconds(options.copy_delay_us)),
        without_stream_words_(options.without_stream_words),
        pin_limit_bytes_(options.pin_limit_bytes) {
    info_.uuid = absl::StrCat("HOST-", index);
    info_.name = absl::StrCat("blockswap host device ", index);
    info_.total_memory_bytes =
        static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  }

  const DeviceInfo& info() const override { return info_; }

  // The host's memory is this device's memory.
  absl::StatusOr<uint64_t> FreeMemoryBytes() override {
    std::ifstream meminfo("/proc/meminfo");
    std::string line;
    uint64_t kib = 0;
    while (std::getline(meminfo, line)) {
      if (std::sscanf(line.c_str(), "MemAvailable: %" SCNu64 " kB", &kib) == 1) return kib * 1024;
    }
    return absl::UnavailableError("/proc/meminfo has no MemAvailable line");
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    size_t size = RoundUp(bytes, static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
    BLOCKSWAP_ASSIGN_OR_RETURN(
        SharedMemory shm,
        SharedMemory::Create(absl::StrCat(info_.uuid, "-ring"), kMemoryHeaderBytes + size));
    // Pre-faulted, as device memory is committed when allocated: otherwise
    // the first copy into each page pays a fault and the page's zeroing on
    // the copy path (measured by tests/bench: about a quarter of the copy
    // worker's CPU time while a fresh 128 MiB ring fills).
    BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, shm.Map(Access::kReadWrite, /*populate=*/true));
    auto* header = static_cast<HostMemoryHeader*>(mapping.data());
    header->magic = kMemoryMagic;
    host_lifetime::InitializeLedger(header->ledger);
    return std::make_unique<HostMemory>(std::move(shm), std::move(mapping), size, ImportClaim());
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> AllocatePrivate(size_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes of device memory");
    // Pre-faulted, as Allocate's.
    void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (data == MAP_FAILED) {
      return ErrnoStatus(errno,
                         absl::StrCat("allocating ", bytes, " bytes of device memory on ", info_.uuid));
    }
    return std::make_unique<HostPrivateMemory>(data, bytes);
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> ImportMemory(ExportedHandle handle,
                                                             size_t bytes) override {
    if (handle.blob != kMemoryBlob || !handle.fd.valid()) {
      return absl::InvalidArgumentError("not a host-backend memory handle");
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(
        SharedMemory shm, SharedMemory::Adopt(std::move(handle.fd), kMemoryHeaderBytes + bytes));
    BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, shm.Map(Access::kReadWrite));
    auto* header = static_cast<HostMemoryHeader*>(mapping.data());
    if (header->magic != kMemoryMagic) {
      return absl::InvalidArgumentError("host-backend memory handle has a bad magic number");
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ImportClaim claim,
                               ImportClaim::Claim(header->ledger, "device memory"));
    return std::make_unique<HostMemory>(std::move(shm), std::move(mapping), bytes,
                                        std::move(claim));
  }

  absl::Status memory_export_status() override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return std::make_unique<HostEvent>();
  }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return std::make_unique<HostStream>(jitter_us_, copy_delay_);
  }
  absl::StatusOr<std::unique_ptr<WaitTimer>> CreateWaitTimer() override {
    return std::make_unique<HostWaitTimer>();
  }
  absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void* native,
                                                     absl::Duration wait_timeout) override {
    if (native != nullptr) {
      return absl::InvalidArgumentError(
          "the host backend has no native streams: pass a null stream (the calling thread)");
    }
    return std::make_unique<InlineHostStream>(wait_timeout);
  }
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHostMemory(void*,
                                                                       size_t bytes) override {
    uint64_t held = pinned_->load(std::memory_order_relaxed);
    do {
      if (pin_limit_bytes_ != 0 && (bytes > pin_limit_bytes_ || held > pin_limit_bytes_ - bytes)) {
        return absl::ResourceExhaustedError(absl::StrCat(
            info_.uuid, " refused to pin ", bytes, " bytes: ", held, " of ", pin_limit_bytes_,
            " are pinned (its test pin limit, as a small RLIMIT_MEMLOCK)"));
      }
    } while (!pinned_->compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
    return std::make_unique<CountedRegistration>(pinned_, bytes);
  }
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterReadOnlyHostMemory(
      const void*, size_t bytes) override {
    return RegisterHostMemory(nullptr, bytes);
  }
  absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> AllocatePinnedHostBuffer(
      size_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes of pinned memory");
    BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<HostRegistration> charge,
                               RegisterHostMemory(nullptr, bytes));
    void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (data == MAP_FAILED) {
      return ErrnoStatus(
          errno, absl::StrCat("allocating ", bytes, " bytes of pinned memory on ", info_.uuid));
    }
    return std::make_unique<HostPinnedBuffer>(std::move(charge), data, bytes);
  }
  absl::StatusOr<std::unique_ptr<StreamWords>> MapStreamWords(Mapping mapping) override {
    if (without_stream_words_) {
      return absl::FailedPreconditionError(absl::StrCat(
          info_.uuid, " has no stream memory operations (a test device without stream words)"));
    }
    if (mapping.data() == nullptr || mapping.size() < sizeof(uint32_t)) {
      return absl::InvalidArgumentError("stream words need a mapping of at least one word");
    }
    return std::make_unique<HostStreamWords>(std::move(mapping));
  }

  absl::Status stream_words_status() const override {
    if (!without_stream_words_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(info_.uuid, " has no stream words (a test device without them)"));
  }
  absl::Status health() const override { return absl::OkStatus(); }
  absl::Status UseOnThisThread() override { return absl::OkStatus(); }  // one address space

 private:
  DeviceInfo info_;
  const int64_t jitter_us_;
  const absl::Duration copy_delay_;
  const bool without_stream_words_;
  const uint64_t pin_limit_bytes_;
  // Bytes registered now; shared with the registrations, which may outlive
  // the device in a test.
  const std::shared_ptr<std::atomic<uint64_t>> pinned_ = std::make_shared<std::atomic<uint64_t>>(0);
};

class HostBackend final : public Backend {
 public:
  explicit HostBackend(const HostBackendOptions& options) {
    for (int i = 0; i < options.device_count; ++i) {
      devices_.push_back(std::make_unique<HostDevice>(i, options));
    }
  }
  BackendKind kind() const override { return BackendKind::kHost; }
  const std::vector<std::unique_ptr<Device>>& devices() const override { return devices_; }

 private:
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace

std::unique_ptr<Backend> OpenHostBackend(const HostBackendOptions& options) {
  return std::make_unique<HostBackend>(options);
}

}  // namespace blockswap
