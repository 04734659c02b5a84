// The cuda backend: the Backend interface (backend.h) over the CUDA driver
// API, reached through the table of cuda_driver.h, with the plumbing of
// cuda_check.h.
//
// No CUDA runtime is linked: a binary built with CUDA starts on a machine
// without a driver (OpenCudaBackend says so and the host backend serves) and
// runs on any driver from kLowestCudaDriverVersion on, whatever runtime the
// trainer's torch brings.
//
// Contexts: every device is driven in its primary context, retained once per
// process (PrimaryContext) and made current only inside a ScopedContext,
// which restores what the thread had before, including no context at all.
//
// Ownership: each class (here and in cuda_memory.h, cuda_stream.h and
// cuda_timing.h) owns one CUDA handle (or, for a host registration, one set
// of pinned ranges) and releases it in its destructor. They are handed out
// only through the unique_ptrs of backend.h, so they are neither copyable nor
// movable themselves. Each holds a reference to its device's DeviceHealth,
// which the CudaDevice owns: that is why every object must be destroyed
// before its Device (backend.h). Every operation fails first with the
// device's sticky error, if any, and reports its own errors through it;
// every driver call that acts on a device runs inside a ScopedContext.

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "shared/backend/backend.h"
#include "shared/backend/cuda_check.h"
#include "shared/backend/cuda_driver.h"
#include "shared/backend/cuda_memory.h"
#include "shared/backend/cuda_stream.h"
#include "shared/backend/cuda_timing.h"
#include "shared/base/env_settings.h"
#include "shared/base/monotonic_clock.h"
#include "shared/base/status.h"
#include "shared/os/shared_memory.h"

namespace blockswap {
namespace {

using cuda_internal::CudaClockAnchor;
using cuda_internal::CudaDeviceMemory;
using cuda_internal::CudaDriverTable;
using cuda_internal::CudaEvent;
using cuda_internal::CudaHostRegistration;
using cuda_internal::CudaPinnedHostBuffer;
using cuda_internal::CudaPrivateMemory;
using cuda_internal::CudaStream;
using cuda_internal::CudaStreamWords;
using cuda_internal::CudaWaitTimer;
using cuda_internal::DeviceHealth;
using cuda_internal::ScopedContext;

// Pointers in messages, as printf's %p would print them.
std::string AddressString(const void* address) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(address)));
}

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, CUdevice device, DeviceInfo info,
             std::shared_ptr<const cuda_internal::PrimaryContext> context)
      : info_(std::move(info)),
        device_(device),
        context_(std::move(context)),
        health_(ordinal, absl::StrCat("cuda:", ordinal, " (", info_.uuid, ")"),
                **cuda_internal::LoadCudaDriver(), context_->get()) {}
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  const DeviceInfo& info() const override { return info_; }
  absl::Status health() const override { return health_.status(); }

  // Not a ScopedContext: the thread keeps the context, so that every guard on
  // it finds the context current and switches nothing.
  absl::Status UseOnThisThread() override {
    BLOCKSWAP_RETURN_IF_ERROR(health_.status());
    return BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuCtxSetCurrent(health_.context()));
  }

  // One physical allocation per ring, exportable as a file descriptor, in
  // multiples of the device's allocation granularity.
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    BLOCKSWAP_RETURN_IF_ERROR(memory_export_status());
    if (bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot allocate 0 bytes of device memory on ", health_.label()));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    const CUmemAllocationProp prop = AllocationProperties();
    size_t granularity = 0;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(
        &health_, health_.cu().cuMemGetAllocationGranularity(&granularity, &prop,
                                                             CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (granularity == 0 || bytes > SIZE_MAX - granularity) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot allocate ", bytes, " bytes of device memory on ", health_.label(),
          ": the size overflows when rounded up to the granularity of ", granularity));
    }
    const size_t rounded = RoundUp(bytes, granularity);
    CUmemGenericAllocationHandle allocation = 0;
    absl::Status created =
        BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuMemCreate(&allocation, rounded, &prop, 0));
    if (!created.ok()) {
      return Annotate(created, absl::StrCat("allocating ", rounded, " bytes (", bytes,
                                            " rounded up to ", granularity, ")"));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(auto memory, CudaDeviceMemory::Map(health_, device_, allocation,
                                                                  rounded, /*exportable=*/true));
    return std::unique_ptr<DeviceMemory>(std::move(memory));
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> AllocatePrivate(size_t bytes) override {
    if (bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot allocate 0 bytes of device memory on ", health_.label()));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    CUdeviceptr data = 0;
    absl::Status allocated =
        BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuMemAlloc(&data, bytes));
    if (!allocated.ok()) {
      return Annotate(allocated, absl::StrCat("allocating ", bytes, " bytes of device memory"));
    }
    return std::make_unique<CudaPrivateMemory>(health_, data, bytes);
  }

  absl::StatusOr<uint64_t> FreeMemoryBytes() override {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    size_t free_bytes = 0, total_bytes = 0;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, health_.cu().cuMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<uint64_t>(free_bytes);
  }

  // Maps the allocation behind the descriptor for this device. `bytes` must
  // be its whole size (what the exporter announced); the driver refuses a
  // mapping the allocation cannot back. The descriptor may come from a
  // process of any uid.
  absl::StatusOr<std::unique_ptr<DeviceMemory>> ImportMemory(ExportedHandle handle,
                                                             size_t bytes) override {
    BLOCKSWAP_RETURN_IF_ERROR(memory_export_status());
    if (!handle.fd.valid() || !handle.blob.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device memory for ", health_.label(),
          " must arrive as one file descriptor and nothing else (got ",
          handle.fd.valid() ? "a descriptor" : "no descriptor", " and ", handle.blob.size(),
          " bytes)"));
    }
    if (bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot import 0 bytes of device memory on ", health_.label()));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    CUmemGenericAllocationHandle allocation = 0;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(
        &health_, health_.cu().cuMemImportFromShareableHandle(
                      &allocation, reinterpret_cast<void*>(static_cast<uintptr_t>(handle.fd.get())),
                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> memory =
        CudaDeviceMemory::Map(health_, device_, allocation, bytes, /*exportable=*/false);
    if (!memory.ok()) {
      return Annotate(memory.status(), absl::StrCat("mapping the ", bytes,
                                                    "-byte device memory announced for import"));
    }
    return std::unique_ptr<DeviceMemory>(*std::move(memory));
  }

  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    CUevent event = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_,
                                   health_.cu().cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
    return std::make_unique<CudaEvent>(health_, event);
  }

  // Non-blocking: the legacy default stream, which PyTorch and others use,
  // must not serialise with the backend's copies.
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    CUstream stream = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_,
                                   health_.cu().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    return std::make_unique<CudaStream>(health_, stream);
  }

  absl::StatusOr<std::unique_ptr<WaitTimer>> CreateWaitTimer() override {
    CudaClockAnchor* anchor = nullptr;
    {
      absl::MutexLock lock(&anchor_mu_);
      if (clock_anchor_ == nullptr) {
        BLOCKSWAP_ASSIGN_OR_RETURN(clock_anchor_, CudaClockAnchor::Create(health_));
      }
      anchor = clock_anchor_.get();
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(auto timer, CudaWaitTimer::Create(health_, *anchor));
    return std::unique_ptr<WaitTimer>(std::move(timer));
  }

  // `native` is a CUstream (a cudaStream_t of the trainer's runtime is the
  // same handle) of this device's primary context.
  absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void* native, absl::Duration) override {
    BLOCKSWAP_RETURN_IF_ERROR(health_.status());
    return std::make_unique<CudaStream>(health_, static_cast<CUstream>(native),
                                        /*owned=*/false);
  }

  // Where the device can register host memory and its stream memory
  // operations pass the probe (ProbeStreamWords, once per device and
  // process); otherwise FAILED_PRECONDITION saying why (the ring keeps to its
  // events, gated on the host).
  absl::StatusOr<std::unique_ptr<StreamWords>> MapStreamWords(Mapping mapping) override {
    if (mapping.data() == nullptr || mapping.size() < sizeof(uint32_t)) {
      return absl::InvalidArgumentError("stream words need a mapping of at least one word");
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    BLOCKSWAP_RETURN_IF_ERROR(StreamWordsUsable());
    return MapWords(std::move(mapping));
  }

  absl::Status stream_words_status() const override ABSL_LOCKS_EXCLUDED(probe_mu_) {
    absl::MutexLock lock(&probe_mu_);
    return probed_.value_or(absl::OkStatus());
  }

  // CU_MEMHOSTREGISTER_PORTABLE pins the range for every context of the
  // process, so one registration through any device serves them all;
  // registering the same range again (through another device) fails with
  // ALREADY_EXISTS. The range is pinned in pieces of kHostRegisterChunkBytes,
  // and one copy must not span two pieces (backend.h). A range of more than
  // one piece must start on a page boundary, so that no page belongs to two
  // pieces.
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHostMemory(void* data,
                                                                       size_t bytes) override {
    constexpr size_t kChunk = cuda_internal::kHostRegisterChunkBytes;
    if (data == nullptr || bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot pin ", bytes, " bytes at ",
                                                     AddressString(data), " (an empty range)"));
    }
    if (bytes > kChunk) {
      auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
      if (reinterpret_cast<uintptr_t>(data) % page != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot pin ", bytes, " bytes at ", AddressString(data), ": a range of more than ",
            kChunk, " bytes is pinned in pieces and must start on a ", page,
            "-byte page boundary"));
      }
    }
    size_t chunk_count = (bytes - 1) / kChunk + 1;
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    auto registration = std::make_unique<CudaHostRegistration>(health_, chunk_count);
    auto* base = static_cast<std::byte*>(data);
    for (size_t offset = 0; offset < bytes; offset += kChunk) {
      size_t length = std::min(kChunk, bytes - offset);
      absl::Status status = registration->Pin(base + offset, length);
      if (!status.ok()) {
        return Annotate(status, absl::StrCat("pinning bytes [", offset, ", ", offset + length,
                                             ") of ", bytes, " at ", AddressString(data)));
      }
    }
    return registration;
  }

  // CU_MEMHOSTREGISTER_READ_ONLY: the device only reads the range, and the
  // driver needs the flag to pin a mapping the process cannot write ("On
  // platforms without CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
  // this flag is required in order to register memory mapped to the CPU as
  // read-only"). The attribute is asked first: the flag on a device without
  // it fails CUDA_ERROR_NOT_SUPPORTED, said here in words.
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterReadOnlyHostMemory(
      const void* data, size_t bytes) override {
    if (data == nullptr || bytes == 0 || bytes > cuda_internal::kHostRegisterChunkBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot pin ", bytes, " read-only bytes at ", AddressString(data), " (empty or over ",
          cuda_internal::kHostRegisterChunkBytes, " bytes)"));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    int supported = 0;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(
        &health_, health_.cu().cuDeviceGetAttribute(
                      &supported, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, device_));
    if (supported == 0) {
      return absl::UnimplementedError(absl::StrCat(
          health_.label(), " cannot register read-only host memory "
                           "(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED is 0)"));
    }
    auto registration = std::make_unique<CudaHostRegistration>(health_, 1);
    BLOCKSWAP_RETURN_IF_ERROR(registration->Pin(const_cast<void*>(data), bytes,
                                                CU_MEMHOSTREGISTER_READ_ONLY));
    return registration;
  }

  // cuMemAllocHost in this device's context: it needs no host registration,
  // so it works where cuMemHostRegister is refused.
  absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> AllocatePinnedHostBuffer(
      size_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes of pinned memory");
    BLOCKSWAP_ASSIGN_OR_RETURN(ScopedContext guard, ScopedContext::Enter(health_));
    void* data = nullptr;
    absl::Status allocated =
        BLOCKSWAP_CUDA_STATUS(&health_, health_.cu().cuMemAllocHost(&data, bytes));
    if (!allocated.ok()) {
      return Annotate(allocated,
                      absl::StrCat("allocating ", bytes, " bytes of pinned host memory"));
    }
    auto buffer = std::make_unique<CudaPinnedHostBuffer>(health_, data, bytes);
    // Touched now: the first copy from it must not pay the page faults.
    std::memset(buffer->data(), 0, bytes);
    return buffer;
  }

  // OK where this device's memory can cross processes as a file descriptor:
  // the driver's virtual memory management with POSIX descriptors (both
  // CUDA 10.2, but a device or platform may lack them). Else
  // FAILED_PRECONDITION naming the attribute, for every ring on the device:
  // the one way this backend shares device memory.
  absl::Status memory_export_status() override {
    absl::MutexLock lock(&memory_export_mu_);
    if (memory_export_status_) return *memory_export_status_;
    const struct {
      CUdevice_attribute attribute;
      const char* name;
    } kNeeded[] = {
        {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
         "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"},
        {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
         "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED"},
    };
    absl::Status status;
    for (const auto& needed : kNeeded) {
      int value = 0;
      status = BLOCKSWAP_CUDA_STATUS(
          &health_, health_.cu().cuDeviceGetAttribute(&value, needed.attribute, device_));
      if (!status.ok()) break;
      if (value == 0) {
        status = absl::FailedPreconditionError(absl::StrCat(
            health_.label(), " cannot share device memory as a file descriptor (", needed.name,
            " is 0): blockswap's rings need the driver's virtual memory management with POSIX "
            "descriptors"));
        break;
      }
    }
    memory_export_status_ = status;
    return status;
  }

 private:
  // Ring memory on this device, exportable as a POSIX file descriptor.
  CUmemAllocationProp AllocationProperties() const {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    return prop;
  }


  // Registers `mapping` (mapped, portable) and finds its device address.
  // Inside a ScopedContext of the device.
  absl::StatusOr<std::unique_ptr<CudaStreamWords>> MapWords(Mapping mapping) {
    const CudaDriverTable& cu = health_.cu();
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(
        &health_, cu.cuMemHostRegister(mapping.data(), mapping.size(),
                                       CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
    CUdeviceptr device_address = 0;
    absl::Status mapped = BLOCKSWAP_CUDA_STATUS(
        &health_, cu.cuMemHostGetDevicePointer(&device_address, mapping.data(), 0));
    if (!mapped.ok()) {
      (void)BLOCKSWAP_CUDA_STATUS(&health_, cu.cuMemHostUnregister(mapping.data()));
      return mapped;
    }
    return std::make_unique<CudaStreamWords>(health_, std::move(mapping), device_address);
  }

  // OK where this device's streams can use stream words, else
  // FAILED_PRECONDITION saying why; probed at the first call, then
  // remembered. Inside a ScopedContext of the device.
  absl::Status StreamWordsUsable() ABSL_LOCKS_EXCLUDED(probe_mu_) {
    absl::MutexLock lock(&probe_mu_);
    if (!probed_.has_value()) {
      absl::Status probe = ProbeStreamWords();
      BLOCKSWAP_RETURN_IF_ERROR(
          health_.status());  // a sticky error is the device's, not the probe's
      probed_ = probe.ok() ? probe
                           : absl::FailedPreconditionError(absl::StrCat(
                                 health_.label(), " cannot use stream words: ", probe.message()));
    }
    return *probed_;
  }

  // One real round trip, since the device attribute may deny what works or
  // claim what fails: a stream waits (cuStreamWaitValue32) on a word of
  // registered host memory that the CPU then writes, and writes a second
  // word (cuStreamWriteValue32) that the CPU then sees, within
  // kStreamWordsProbeTimeout.
  absl::Status ProbeStreamWords() ABSL_EXCLUSIVE_LOCKS_REQUIRED(probe_mu_) {
    constexpr absl::Duration kStreamWordsProbeTimeout = absl::Seconds(5);
    const CudaDriverTable& cu = health_.cu();
    int host_register = 0;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(
        &health_, cu.cuDeviceGetAttribute(&host_register,
                                          CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, device_));
    if (host_register == 0) return absl::FailedPreconditionError("it cannot register host memory");
    BLOCKSWAP_ASSIGN_OR_RETURN(SharedMemory memory,
                               SharedMemory::Create("stream-words-probe", 2 * sizeof(uint32_t)));
    BLOCKSWAP_ASSIGN_OR_RETURN(Mapping mapping, memory.Map(Access::kReadWrite));
    BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<CudaStreamWords> words,
                               MapWords(std::move(mapping)));
    words->word(0).store(0);
    words->word(1).store(0);
    CUstream stream = nullptr;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(&health_, cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    absl::Status issued = BLOCKSWAP_CUDA_STATUS(
        &health_,
        cu.cuStreamWaitValue32(stream, *words->DeviceAddress(0), 1, CU_STREAM_WAIT_VALUE_GEQ));
    if (issued.ok()) {
      issued = BLOCKSWAP_CUDA_STATUS(&health_,
                                     cu.cuStreamWriteValue32(stream, *words->DeviceAddress(1), 1,
                                                             CU_STREAM_WRITE_VALUE_DEFAULT));
    }
    words->word(0).store(1, std::memory_order_release);
    const absl::Time deadline = absl::Now() + kStreamWordsProbeTimeout;
    bool seen = false;
    while (issued.ok() && !(seen = words->word(1).load(std::memory_order_acquire) == 1) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Microseconds(100));
    }
    if (issued.ok() && !seen) {
      // The stream may still be waiting on the page: it is neither
      // synchronized nor unregistered (both could hang or fault); the
      // stream is released once its work ends and the page is leaked.
      (void)cu.cuStreamDestroy(stream);
      (void)words.release();
      return absl::FailedPreconditionError(
          absl::StrCat("a stream memory operation round trip (cuStreamWaitValue32, then "
                       "cuStreamWriteValue32 on registered host memory) did not complete within ",
                       absl::FormatDuration(kStreamWordsProbeTimeout)));
    }
    (void)BLOCKSWAP_CUDA_STATUS(&health_, cu.cuStreamSynchronize(stream));
    (void)BLOCKSWAP_CUDA_STATUS(&health_, cu.cuStreamDestroy(stream));
    return issued;
  }

  const DeviceInfo info_;
  const CUdevice device_;
  // Retained for as long as this device lives; everything the device makes
  // lives in it.
  const std::shared_ptr<const cuda_internal::PrimaryContext> context_;
  DeviceHealth health_;
  // Shared by the device's wait timers, created with the first of them.
  absl::Mutex anchor_mu_;
  std::unique_ptr<CudaClockAnchor> clock_anchor_ ABSL_GUARDED_BY(anchor_mu_);
  mutable absl::Mutex probe_mu_;
  std::optional<absl::Status> probed_ ABSL_GUARDED_BY(probe_mu_);
  absl::Mutex memory_export_mu_;
  std::optional<absl::Status> memory_export_status_ ABSL_GUARDED_BY(memory_export_mu_);
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::vector<std::unique_ptr<Device>> devices)
      : devices_(std::move(devices)) {}

  BackendKind kind() const override { return BackendKind::kCuda; }
  const std::vector<std::unique_ptr<Device>>& devices() const override { return devices_; }
  std::string driver() const override {
    return absl::StrCat(
        "CUDA driver ", cuda_internal::CudaVersionString(cuda_internal::LoadedCudaDriverVersion()),
        "; blockswap needs ",
        cuda_internal::CudaVersionString(cuda_internal::kLowestCudaDriverVersion), " or later");
  }

 private:
  const std::vector<std::unique_ptr<Device>> devices_;
};

// What this process sees of one device: its UUID, name and memory.
absl::StatusOr<DeviceInfo> ReadDeviceInfo(const CudaDriverTable& cu, CUdevice device) {
  DeviceInfo info;
  CUuuid uuid{};
  BLOCKSWAP_CUDA_RETURN_IF_ERROR(nullptr, cu.cuDeviceGetUuid(&uuid, device));
  info.uuid = cuda_internal::FormatGpuUuid(uuid);
  char name[256] = {};
  BLOCKSWAP_CUDA_RETURN_IF_ERROR(nullptr, cu.cuDeviceGetName(name, sizeof(name) - 1, device));
  info.name = name;
  size_t total = 0;
  BLOCKSWAP_CUDA_RETURN_IF_ERROR(nullptr, cu.cuDeviceTotalMem(&total, device));
  info.total_memory_bytes = total;
  return info;
}

// cuInit's error as FAILED_PRECONDITION when this machine simply has no
// usable GPU (the host backend may serve), else the error itself.
absl::Status InitFailed(CUresult error) {
  absl::Status status = cuda_internal::CheckCuda(nullptr, error, "cuInit(0)", __FILE__, __LINE__);
  if (error == CUDA_ERROR_NO_DEVICE) {
    const std::optional<std::string> visible = EnvValue(EnvSetting::kCudaVisibleDevices);
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device visible",
        visible.has_value() ? absl::StrCat(" (CUDA_VISIBLE_DEVICES=\"", *visible, "\")") : "", ": ",
        status.message()));
  }
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> OpenCudaBackend() {
  BLOCKSWAP_ASSIGN_OR_RETURN(const CudaDriverTable* cu, cuda_internal::LoadCudaDriver());
  if (CUresult error = cu->cuInit(0); error != CUDA_SUCCESS) return InitFailed(error);
  // Left untouched when the call fails, hence initialised.
  int count = 0;
  BLOCKSWAP_CUDA_RETURN_IF_ERROR(nullptr, cu->cuDeviceGetCount(&count));
  if (count == 0) return absl::FailedPreconditionError("the CUDA driver reports 0 devices");

  std::vector<std::unique_ptr<Device>> devices;
  devices.reserve(static_cast<size_t>(count));
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = 0;
    BLOCKSWAP_CUDA_RETURN_IF_ERROR(nullptr, cu->cuDeviceGet(&device, ordinal));
    absl::StatusOr<DeviceInfo> info = ReadDeviceInfo(*cu, device);
    if (!info.ok()) {
      return Annotate(info.status(), absl::StrCat("reading the properties of cuda:", ordinal));
    }
    // Devices are found by UUID on the wire; two with one UUID would make
    // that ambiguous.
    for (const auto& other : devices) {
      if (other->info().uuid == info->uuid) {
        return absl::FailedPreconditionError(
            absl::StrCat("cuda:", ordinal, " reports the UUID ", info->uuid,
                         " of an earlier device; devices could not be told apart"));
      }
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(std::shared_ptr<const cuda_internal::PrimaryContext> context,
                               cuda_internal::PrimaryContext::Acquire(device, ordinal));
    devices.push_back(
        std::make_unique<CudaDevice>(ordinal, device, *std::move(info), std::move(context)));
  }
  return std::make_unique<CudaBackend>(std::move(devices));
}

}  // namespace blockswap
