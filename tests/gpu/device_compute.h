// The compute side of a GPU test client: its own stream on the ring's
// device, a "kernel" of a given duration, and byte comparisons of slots
// against device copies of what each block must hold — all queued on the
// stream, so they run after the stream's waits exactly as a trainer's
// kernels would.
//
// With ComputeKind::kKernels, on cuda these are real kernels (gpu_kernels.cu,
// through the CUDA runtime) on a cudaStream_t; on the host backend
// (BLOCKSWAP_GPU_TEST_BACKEND=host, a dry run of the GPU suite on a machine
// without one) and over the stand-in CUDA driver (tests/standin_driver/,
// which runs no kernels) the same calls are host functions on a backend
// stream. ComputeKind::kHostCopies needs no CUDA runtime, on any backend: a
// comparison copies the slot to pinned host memory on the stream and
// compares it on the host, a spin is a host function. One thread uses an
// object.
#ifndef BLOCKSWAP_TESTS_GPU_DEVICE_COMPUTE_H_
#define BLOCKSWAP_TESTS_GPU_DEVICE_COMPUTE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shared/backend/backend.h"

namespace blockswap::gpu_testing {

// How the comparisons read a slot: kernels (a trainer's way, through the
// CUDA runtime, which needs a driver of at least its own major version), or
// a device-to-host copy compared on the host, through the backend only (the
// GPU check's first call, which must run on the oldest driver blockswap
// supports).
enum class ComputeKind { kKernels, kHostCopies };

class DeviceCompute {
 public:
  // On `device` of a backend of `kind`. With kernels on cuda the calling
  // thread's current device becomes `device` (a test client drives one
  // device).
  static absl::StatusOr<std::unique_ptr<DeviceCompute>> Create(
      BackendKind kind, Device& device, size_t checks, ComputeKind compute = ComputeKind::kKernels);
  virtual ~DeviceCompute() = default;

  // The stream to order ring loads, waits and releases against.
  virtual Stream& stream() = 0;
  // Keeps a device copy of `bytes`; the pointer stays valid for the
  // object's lifetime.
  virtual absl::StatusOr<const void*> Keep(const std::vector<std::byte>& bytes) = 0;
  // Occupies the stream for `duration`.
  virtual absl::Status Spin(absl::Duration duration) = 0;
  // Queues comparison `check` (< `checks` of Create) of `bytes` at `slot`
  // with a kept copy.
  virtual absl::Status Compare(const void* slot, const void* kept, size_t bytes, size_t check) = 0;
  // Waits for the stream, then counts the comparisons that found a
  // difference.
  virtual absl::StatusOr<uint64_t> CountMismatches() = 0;
  // Waits for everything queued; the stream's error if one occurred (on
  // cuda: a fault in a kernel, which a dead daemon must never cause).
  virtual absl::Status Synchronize() = 0;
  // The same, giving up after `timeout` with DEADLINE_EXCEEDED: a stream
  // that waits on an event of a process that died may never drain, and a
  // test must say so rather than hang.
  absl::Status SynchronizeWithin(absl::Duration timeout);
};

}  // namespace blockswap::gpu_testing

#endif  // BLOCKSWAP_TESTS_GPU_DEVICE_COMPUTE_H_
