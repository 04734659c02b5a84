#include "shared/copy/staged_copier.h"

#include <algorithm>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {

// How the worker waits for a buffer's `consumed` record: queries a few times
// back to back (the record of a chunk copied long ago has completed), then
// sleeps between queries a fraction of one chunk's DMA (8 MiB take about
// 160 us at 50 GB/s).
constexpr int kBusyQueries = 64;
constexpr absl::Duration kQueryPause = absl::Microseconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<StagedCopier>> StagedCopier::Start(Device& device,
                                                                  const StagingOptions& options) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<StagingPool> pool,
                             StagingPool::Create(device, options));
  return std::unique_ptr<StagedCopier>(new StagedCopier(std::move(pool), options));
}

StagedCopier::StagedCopier(std::unique_ptr<StagingPool> pool, const StagingOptions& options)
    : pool_(std::move(pool)), jitter_us_(options.jitter_us) {
  std::random_device seeds;
  for (uint32_t t = 0; t < options.threads; ++t) {
    threads_.emplace_back([this, seed = seeds()] { RunStagingThread(seed); });
  }
}

StagedCopier::~StagedCopier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void StagedCopier::RunStagingThread(uint64_t seed) {
  std::mt19937_64 rng(seed);
  while (true) {
    Job* job = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&has_work));
      if (queue_.empty()) return;
      job = queue_.front();
      queue_.pop_front();
    }
    if (jitter_us_ > 0) {
      std::uniform_int_distribution<int64_t> delay(0, jitter_us_);
      int64_t us = delay(rng);
      if ((rng() & 15) == 0) us += 20 * delay(rng);
      absl::SleepFor(absl::Microseconds(us));
    }
    std::memcpy(job->buffer, job->source, job->bytes);
    absl::MutexLock lock(&mu_);
    job->done = true;
  }
}

void StagedCopier::Hand(Job* job) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(job);
}

void StagedCopier::AwaitStaged(const Job& job) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&job.done));
}

absl::Status StagedCopier::AwaitConsumed(size_t buffer) {
  Event& consumed = pool_->consumed(buffer);
  for (int queries = 0;; ++queries) {
    BLOCKSWAP_ASSIGN_OR_RETURN(bool done, consumed.Query());
    if (done) return absl::OkStatus();
    if (queries >= kBusyQueries) absl::SleepFor(kQueryPause);
  }
}

absl::Status StagedCopier::Copy(Stream& stream, void* device_dst, const void* source,
                                size_t bytes) {
  const size_t chunk = pool_->buffer_bytes();
  const size_t chunks = (bytes + chunk - 1) / chunk;
  auto* dst = static_cast<std::byte*>(device_dst);
  const auto* src = static_cast<const std::byte*>(source);
  std::vector<Job> jobs(chunks);
  size_t handed = 0;
  // The staging threads write into jobs[] and the buffers: whatever happens,
  // none may still do so once Copy returns.
  absl::Cleanup drained = [&] {
    for (size_t k = 0; k < handed; ++k) AwaitStaged(jobs[k]);
  };
  for (size_t k = 0; k < chunks; ++k) {
    // Every chunk a buffer can take now goes to the staging threads, so that
    // they work ahead of the copy stream: at most count() chunks are staged
    // or being copied at once (chunk k + count() reuses chunk k's buffer, and
    // its `consumed` was recorded when chunk k's copy was queued).
    while (handed < chunks && handed - k < pool_->count()) {
      Job& job = jobs[handed];
      job.buffer_index = next_buffer_;
      next_buffer_ = (next_buffer_ + 1) % pool_->count();
      if (!ProtocolStepSkipped(ProtocolStep::kDaemonAwaitStagingReuse)) {
        BLOCKSWAP_RETURN_IF_ERROR(AwaitConsumed(job.buffer_index));
      }
      job.buffer = pool_->data(job.buffer_index);
      job.source = src + handed * chunk;
      job.bytes = std::min(chunk, bytes - handed * chunk);
      Hand(&job);
      ++handed;
    }
    const Job& job = jobs[k];
    if (!ProtocolStepSkipped(ProtocolStep::kDaemonAwaitStaging)) AwaitStaged(job);
    BLOCKSWAP_RETURN_IF_ERROR(stream.CopyHostToDevice(dst + k * chunk, job.buffer, job.bytes));
    BLOCKSWAP_RETURN_IF_ERROR(stream.Record(pool_->consumed(job.buffer_index)));
  }
  return absl::OkStatus();
}

}  // namespace blockswap
