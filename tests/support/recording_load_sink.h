// RecordingLoadSink: a DeviceWorker's LoadEventSink that keeps every event,
// for the tests and fuzzers that run a real worker in-process. Thread-safe:
// the worker's thread sends, the test reads.
#ifndef BLOCKSWAP_TESTS_SUPPORT_RECORDING_LOAD_SINK_H_
#define BLOCKSWAP_TESTS_SUPPORT_RECORDING_LOAD_SINK_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "blockswap/v1/blockswap.pb.h"
#include "daemon/device/device_worker.h"

namespace blockswap::testing {

class RecordingLoadSink : public daemon::LoadEventSink {
 public:
  void Send(v1::LoadEvent event) override {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }
  std::vector<v1::LoadEvent> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  // The events once there are at least `count` (fewer after `patience`: a
  // hang guard, never a measure of speed).
  std::vector<v1::LoadEvent> AwaitEvents(size_t count,
                                         absl::Duration patience = absl::Seconds(10)) const {
    absl::MutexLock lock(&mu_);
    auto enough = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return events_.size() >= count;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), patience);
    return events_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<v1::LoadEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_RECORDING_LOAD_SINK_H_
