#include "tools/demo/demo_stream.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <string>

#include "blockswap/blockswap.h"
#include "blockswap/blockswap.hpp"

#if BLOCKSWAP_DEMO_CUDA
#include "shared/backend/cuda_driver.h"
#endif

namespace blockswap::demo {
namespace {

void Spin(uint32_t us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

// The calling thread: the C ABI's null stream on the host backend.
class HostStream final : public DemoStream {
 public:
  void* native() const override { return nullptr; }
  void PrepareChecks(uint32_t, uint64_t) override {}
  void Check(const void* slot_memory, uint32_t slot, const std::vector<std::byte>& want,
             uint32_t block) override {
    Count(std::memcmp(slot_memory, want.data(), want.size()) == 0, block, slot);
  }
  void Compute(uint32_t us) override { Spin(us); }
  void Synchronize() override {}
};

#if BLOCKSWAP_DEMO_CUDA
using cuda_internal::CudaDriverTable;

void CheckCuda(const CudaDriverTable& cu, CUresult error, const char* what) {
  if (error == CUDA_SUCCESS) return;
  const char* text = nullptr;
  if (cu.cuGetErrorString(error, &text) != CUDA_SUCCESS || text == nullptr) text = "?";
  throw Error(BS_INTERNAL, std::string(what) + ": " + text);
}

const CudaDriverTable& Driver() {
  absl::StatusOr<const CudaDriverTable*> cu = cuda_internal::LoadCudaDriver();
  if (!cu.ok()) throw Error(BS_FAILED_PRECONDITION, std::string(cu.status().message()));
  return **cu;
}

// The primary context of the device named `uuid` (the one the client library
// maps the ring in), retained for the stream's lifetime and made current on
// this thread, the demo's only CUDA thread, as a trainer's torch does.
class PrimaryContext {
 public:
  explicit PrimaryContext(const CudaDriverTable& cu, const std::string& uuid) : cu_(cu) {
    CheckCuda(cu_, cu_.cuInit(0), "cuInit");
    int count = 0;
    CheckCuda(cu_, cu_.cuDeviceGetCount(&count), "cuDeviceGetCount");
    for (int ordinal = 0; ordinal < count; ++ordinal) {
      CUdevice device = 0;
      CUuuid id{};
      CheckCuda(cu_, cu_.cuDeviceGet(&device, ordinal), "cuDeviceGet");
      CheckCuda(cu_, cu_.cuDeviceGetUuid(&id, device), "cuDeviceGetUuid");
      if (cuda_internal::FormatGpuUuid(id) != uuid) continue;
      CheckCuda(cu_, cu_.cuDevicePrimaryCtxRetain(&context_, device), "cuDevicePrimaryCtxRetain");
      device_ = device;
      CheckCuda(cu_, cu_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
      return;
    }
    throw Error(BS_FAILED_PRECONDITION, "no visible GPU has the ring's UUID " + uuid);
  }
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  ~PrimaryContext() {
    (void)cu_.cuCtxSetCurrent(nullptr);
    (void)cu_.cuDevicePrimaryCtxRelease(device_);
  }

 private:
  const CudaDriverTable& cu_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

// No kernel: the compute stand-in is a host function that holds the stream,
// and the check a copy back to pinned memory compared on the host.
class CudaStream final : public DemoStream {
 public:
  explicit CudaStream(const std::string& uuid) : cu_(Driver()), context_(cu_, uuid) {
    CheckCuda(cu_, cu_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }
  ~CudaStream() override {
    (void)cu_.cuStreamSynchronize(stream_);
    for (void* buffer : readback_) (void)cu_.cuMemFreeHost(buffer);
    (void)cu_.cuStreamDestroy(stream_);
  }
  void* native() const override { return stream_; }
  void PrepareChecks(uint32_t slots, uint64_t slot_bytes) override {
    // One pinned readback buffer per slot is enough: the stream runs the
    // previous comparison before the next copy into it.
    for (uint32_t s = 0; s < slots; ++s) {
      void* buffer = nullptr;
      CheckCuda(cu_, cu_.cuMemAllocHost(&buffer, slot_bytes), "cuMemAllocHost");
      readback_.push_back(buffer);
    }
  }
  void Check(const void* slot_memory, uint32_t slot, const std::vector<std::byte>& want,
             uint32_t block) override {
    CheckCuda(cu_,
              cu_.cuMemcpyDtoHAsync(readback_[slot], reinterpret_cast<CUdeviceptr>(slot_memory),
                                    want.size(), stream_),
              "cuMemcpyDtoHAsync");
    pending_.push_back(PendingCheck{this, readback_[slot], &want, block, slot});
    CheckCuda(cu_,
              cu_.cuLaunchHostFunc(
                  stream_,
                  [](void* user) {
                    auto* c = static_cast<PendingCheck*>(user);
                    c->self->Count(std::memcmp(c->copy, c->want->data(), c->want->size()) == 0,
                                   c->block, c->slot);
                  },
                  &pending_.back()),
              "cuLaunchHostFunc");
  }
  void Compute(uint32_t us) override {
    if (us == 0) return;
    computes_.push_back(us);
    CheckCuda(
        cu_,
        cu_.cuLaunchHostFunc(
            stream_, [](void* user) { Spin(*static_cast<uint32_t*>(user)); }, &computes_.back()),
        "cuLaunchHostFunc");
  }
  void Synchronize() override {
    CheckCuda(cu_, cu_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    pending_.clear();
    computes_.clear();
  }

 private:
  struct PendingCheck {
    CudaStream* self = nullptr;
    const void* copy = nullptr;
    const std::vector<std::byte>* want = nullptr;
    uint32_t block = 0;
    uint32_t slot = 0;
  };
  const CudaDriverTable& cu_;
  PrimaryContext context_;
  CUstream stream_ = nullptr;
  std::vector<void*> readback_;
  // Arguments of the host functions queued since the last Synchronize; deques
  // so that their addresses stay put.
  std::deque<PendingCheck> pending_;
  std::deque<uint32_t> computes_;
};
#endif

}  // namespace

std::unique_ptr<DemoStream> DemoStream::Open(int backend, const std::string& device_uuid) {
  if (backend == BS_BACKEND_HOST) return std::make_unique<HostStream>();
#if BLOCKSWAP_DEMO_CUDA
  if (backend == BS_BACKEND_CUDA) return std::make_unique<CudaStream>(device_uuid);
#endif
  throw Error(BS_FAILED_PRECONDITION,
              "blockswapd serves backend " + std::to_string(backend) +
                  ", which this blockswap-demo was built without (the CUDA toolkit was absent)");
}

std::string DemoStream::FirstMismatch() const {
  return "block " + std::to_string(first_block_.load()) + " in slot " +
         std::to_string(first_slot_.load());
}

void DemoStream::ForgetChecksSince(const Tally& since) {
  checks_ = since.checks;
  mismatches_ = since.mismatches;
  // The first mismatch was among those forgotten.
  if (since.mismatches == 0) first_block_ = first_slot_ = 0;
}

void DemoStream::Count(bool same, uint32_t block, uint32_t slot) {
  checks_.fetch_add(1);
  if (!same && mismatches_.fetch_add(1) == 0) {
    first_block_ = block;
    first_slot_ = slot;
  }
}

}  // namespace blockswap::demo
