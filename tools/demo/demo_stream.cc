#include "tools/demo/demo_stream.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <string>

#include "blockswap/blockswap.h"
#include "blockswap/blockswap.hpp"

#if BLOCKSWAP_DEMO_CUDA
#include <cuda_runtime_api.h>
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
void CheckCuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    throw Error(BS_INTERNAL, std::string(what) + ": " + cudaGetErrorString(error));
  }
}

class CudaStream final : public DemoStream {
 public:
  CudaStream() {
    CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaStream() override {
    (void)cudaStreamSynchronize(stream_);
    for (void* buffer : readback_) (void)cudaFreeHost(buffer);
    (void)cudaStreamDestroy(stream_);
  }
  void* native() const override { return stream_; }
  void PrepareChecks(uint32_t slots, uint64_t slot_bytes) override {
    // One pinned readback buffer per slot is enough: the stream runs the
    // previous comparison before the next copy into it.
    for (uint32_t s = 0; s < slots; ++s) {
      void* buffer = nullptr;
      CheckCuda(cudaMallocHost(&buffer, slot_bytes), "cudaMallocHost");
      readback_.push_back(buffer);
    }
  }
  void Check(const void* slot_memory, uint32_t slot, const std::vector<std::byte>& want,
             uint32_t block) override {
    CheckCuda(
        cudaMemcpyAsync(readback_[slot], slot_memory, want.size(), cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync");
    pending_.push_back(PendingCheck{this, readback_[slot], &want, block, slot});
    CheckCuda(cudaLaunchHostFunc(
                  stream_,
                  [](void* user) {
                    auto* c = static_cast<PendingCheck*>(user);
                    c->self->Count(std::memcmp(c->copy, c->want->data(), c->want->size()) == 0,
                                   c->block, c->slot);
                  },
                  &pending_.back()),
              "cudaLaunchHostFunc");
  }
  void Compute(uint32_t us) override {
    if (us == 0) return;
    computes_.push_back(us);
    CheckCuda(
        cudaLaunchHostFunc(
            stream_, [](void* user) { Spin(*static_cast<uint32_t*>(user)); }, &computes_.back()),
        "cudaLaunchHostFunc");
  }
  void Synchronize() override {
    CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
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
  cudaStream_t stream_ = nullptr;
  std::vector<void*> readback_;
  // Arguments of the host functions queued since the last Synchronize; deques
  // so that their addresses stay put.
  std::deque<PendingCheck> pending_;
  std::deque<uint32_t> computes_;
};
#endif

}  // namespace

std::unique_ptr<DemoStream> DemoStream::Open(int backend) {
  if (backend == BS_BACKEND_HOST) return std::make_unique<HostStream>();
#if BLOCKSWAP_DEMO_CUDA
  if (backend == BS_BACKEND_CUDA) return std::make_unique<CudaStream>();
#endif
  throw Error(BS_FAILED_PRECONDITION,
              "blockswapd serves backend " + std::to_string(backend) +
                  ", which this blockswap-demo was built without (the CUDA toolkit was absent)");
}

std::string DemoStream::FirstMismatch() const {
  return "block " + std::to_string(first_block_.load()) + " in slot " +
         std::to_string(first_slot_.load());
}

void DemoStream::Count(bool same, uint32_t block, uint32_t slot) {
  checks_.fetch_add(1);
  if (!same && mismatches_.fetch_add(1) == 0) {
    first_block_ = block;
    first_slot_ = slot;
  }
}

}  // namespace blockswap::demo
