// DemoStream: the demo's "compute stream" and its byte checks, for the
// daemon's backend. On host the stream is the calling thread (the C ABI's
// null stream): slots are host memory, checks and compute run inline. On
// cuda it is a CUDA stream: a check copies the slot back and compares on the
// stream (a host function), so it sees exactly what a kernel at that point of
// the stream would read, and compute is a host function that holds the
// stream. Not thread-safe: the training thread owns it.
#ifndef BLOCKSWAP_TOOLS_DEMO_DEMO_STREAM_H_
#define BLOCKSWAP_TOOLS_DEMO_DEMO_STREAM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace blockswap::demo {

class DemoStream {
 public:
  // For the daemon's backend (enum bs_backend) and the ring's device (its
  // UUID); throws blockswap::Error when it cannot drive it (cuda without this
  // build's CUDA support, or no visible GPU with that UUID).
  static std::unique_ptr<DemoStream> Open(int backend, const std::string& device_uuid);
  // Waits for everything queued.
  virtual ~DemoStream() = default;

  // What to pass as `stream` to the C ABI.
  virtual void* native() const = 0;
  // Room for one readback per slot.
  virtual void PrepareChecks(uint32_t slots, uint64_t slot_bytes) = 0;
  // Compares the slot's bytes with `want` at this point of the stream.
  // `want` must outlive the stream's work.
  virtual void Check(const void* slot_memory, uint32_t slot, const std::vector<std::byte>& want,
                     uint32_t block) = 0;
  // A kernel stand-in: holds the stream for `us` microseconds.
  virtual void Compute(uint32_t us) = 0;
  virtual void Synchronize() = 0;

  uint64_t checks() const { return checks_.load(); }
  uint64_t mismatches() const { return mismatches_.load(); }
  std::string FirstMismatch() const;

  // The counts so far; after Synchronize, nothing queued adds to them.
  struct Tally {
    uint64_t checks = 0;
    uint64_t mismatches = 0;
  };
  Tally tally() const { return {checks_.load(), mismatches_.load()}; }
  // Forgets every check since `since` (a void pass's). Only after
  // Synchronize.
  void ForgetChecksSince(const Tally& since);

 protected:
  // Counts one comparison; `same` is its result.
  void Count(bool same, uint32_t block, uint32_t slot);

 private:
  std::atomic<uint64_t> checks_{0};
  std::atomic<uint64_t> mismatches_{0};
  std::atomic<uint32_t> first_block_{0};
  std::atomic<uint32_t> first_slot_{0};
};

}  // namespace blockswap::demo

#endif  // BLOCKSWAP_TOOLS_DEMO_DEMO_STREAM_H_
