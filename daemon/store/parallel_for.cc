#include "daemon/store/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

namespace blockswap::daemon {

absl::Status ParallelFor(size_t count, const std::function<absl::Status(size_t)>& fn) {
  std::vector<absl::Status> results(count);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < count;) results[i] = fn(i);
  };
  unsigned threads = std::min<size_t>(
      {count, std::max(1u, std::thread::hardware_concurrency()), kMaxWorkerThreads});
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // out of threads: the ones started (and this one) do the work
    }
  }
  work();
  for (std::thread& thread : pool) thread.join();
  for (absl::Status& status : results) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace blockswap::daemon
