// Exit codes of the GPU test client roles (gpu_roles.cc).
#ifndef BLOCKSWAP_TESTS_GPU_GPU_ROLES_H_
#define BLOCKSWAP_TESTS_GPU_GPU_ROLES_H_

namespace blockswap::gpu_testing {

enum GpuClientExit : int {
  kGpuClientOk = 0,
  kGpuClientFailed = 1,  // an error other than a timeout; reported
  kGpuClientWrongBytes = 10,
  kGpuClientTimedOut = 12,
};

}  // namespace blockswap::gpu_testing

#endif  // BLOCKSWAP_TESTS_GPU_GPU_ROLES_H_
