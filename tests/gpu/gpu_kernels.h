// Kernels that stand in for a trainer's compute in the GPU tests and the H2D
// benchmark: a spin of a given duration (a "long kernel") and a byte
// comparison that runs on the stream, after whatever the stream waited for.
// Built by nvcc only where the CUDA toolkit is (tests/gpu/CMakeLists.txt).
#ifndef BLOCKSWAP_TESTS_GPU_GPU_KERNELS_H_
#define BLOCKSWAP_TESTS_GPU_GPU_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace blockswap::gpu_testing {

// Occupies `stream` for about `nanoseconds` (one thread reading the GPU's
// global timer), as a block's compute would.
cudaError_t LaunchSpin(cudaStream_t stream, uint64_t nanoseconds);

// Sets `*differs` (device memory) to 1 when the `bytes` at `a` and `b`
// (device memory, 8-byte aligned) differ; leaves it alone otherwise.
cudaError_t LaunchCompare(cudaStream_t stream, const void* a, const void* b, size_t bytes,
                          unsigned int* differs);

}  // namespace blockswap::gpu_testing

#endif  // BLOCKSWAP_TESTS_GPU_GPU_KERNELS_H_
