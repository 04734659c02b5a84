#include "tests/gpu/gpu_kernels.h"

namespace blockswap::gpu_testing {
namespace {

__device__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void Spin(uint64_t nanoseconds) {
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < nanoseconds) {
  }
}

// Whole words, then the tail bytes. Any thread that sees a difference
// stores 1: idempotent, so no atomics.
__global__ void Compare(const uint64_t* a, const uint64_t* b, size_t words, const uint8_t* a_tail,
                        const uint8_t* b_tail, size_t tail, unsigned int* differs) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (size_t i = first; i < words; i += stride) {
    if (a[i] != b[i]) *differs = 1;
  }
  for (size_t i = first; i < tail; i += stride) {
    if (a_tail[i] != b_tail[i]) *differs = 1;
  }
}

}  // namespace

cudaError_t LaunchSpin(cudaStream_t stream, uint64_t nanoseconds) {
  Spin<<<1, 1, 0, stream>>>(nanoseconds);
  return cudaGetLastError();
}

cudaError_t LaunchCompare(cudaStream_t stream, const void* a, const void* b, size_t bytes,
                          unsigned int* differs) {
  const size_t words = bytes / sizeof(uint64_t);
  const size_t tail = bytes - words * sizeof(uint64_t);
  const auto* a_bytes = static_cast<const uint8_t*>(a);
  const auto* b_bytes = static_cast<const uint8_t*>(b);
  Compare<<<128, 256, 0, stream>>>(static_cast<const uint64_t*>(a),
                                   static_cast<const uint64_t*>(b), words,
                                   a_bytes + words * sizeof(uint64_t),
                                   b_bytes + words * sizeof(uint64_t), tail, differs);
  return cudaGetLastError();
}

}  // namespace blockswap::gpu_testing
