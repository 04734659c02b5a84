#include "daemon/server/work_queue.h"

#include <tuple>
#include <utility>

namespace blockswap::daemon {

WorkQueue::WorkQueue(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkQueue::~WorkQueue() {
  Stop();
  {
    absl::MutexLock lock(&mu_);
    exiting_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void WorkQueue::Post(uid_t uid, Cancellation cancellation, Work work) {
  absl::MutexLock lock(&mu_);
  uids_[uid].items.push_back({std::move(cancellation), std::move(work)});
  ++queued_;
}

void WorkQueue::Stop() { stopped_.store(true, std::memory_order_release); }

std::map<uid_t, WorkQueue::UidQueue>::iterator WorkQueue::Next() {
  auto next = uids_.end();
  for (auto it = uids_.begin(); it != uids_.end(); ++it) {
    if (it->second.items.empty()) continue;
    if (next == uids_.end() || std::tie(it->second.running, it->second.served) <
                                   std::tie(next->second.running, next->second.served)) {
      next = it;
    }
  }
  return next;
}

void WorkQueue::Run() {
  while (true) {
    Item item;
    uid_t uid = 0;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queued_ > 0 || exiting_; };
      mu_.Await(absl::Condition(&ready));
      if (queued_ == 0) return;  // exiting, and nothing left to answer
      auto next = Next();
      uid = next->first;
      UidQueue& queue = next->second;
      item = std::move(queue.items.front());
      queue.items.pop_front();
      --queued_;
      ++queue.running;
      queue.served = ++turns_;
    }
    // The caller's wishes and the queue's stop, asked in that order of
    // precedence: a stop answers every caller the same way.
    const Cancellation cancellation([this, &item]() -> absl::Status {
      if (stopped_.load(std::memory_order_acquire)) {
        return absl::UnavailableError("blockswapd is shutting down");
      }
      return item.cancellation.Check();
    });
    item.work(cancellation);
    absl::MutexLock lock(&mu_);
    auto it = uids_.find(uid);
    if (--it->second.running == 0 && it->second.items.empty()) uids_.erase(it);
  }
}

}  // namespace blockswap::daemon
