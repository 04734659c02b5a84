// RefusalLog: a log of refusals rate-limited per uid, so that a peer
// retrying thousands of times cannot flood the journal: the listener's
// refused connections, the session manager's quota refusals. The first
// refusal of a uid in a window is logged as it is; the others are counted,
// and one line sums them up once the window has ended (at the next Refused
// or Flush):
//   refused 1999 more connections from uid 1000 in the last 10s (the last:
//   pid 4242 (uid 1000): it did not send its first message within 5s)
// Not thread-safe: its owner serialises the calls.
#ifndef BLOCKSWAP_DAEMON_RUNTIME_REFUSAL_LOG_H_
#define BLOCKSWAP_DAEMON_RUNTIME_REFUSAL_LOG_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace blockswap::daemon {

class RefusalLog {
 public:
  using Sink = std::function<void(absl::string_view)>;
  // `what`: the singular noun the summary counts ("connection" refused...).
  explicit RefusalLog(Sink sink, absl::Duration window = absl::Seconds(10),
                      std::string what = "connection")
      : sink_(std::move(sink)), window_(window), what_(std::move(what)) {}

  // One refusal: `uid` is empty when its credentials are not
  // known (yet); `message` is the whole line to log.
  void Refused(std::optional<uid_t> uid, absl::string_view message, absl::Time now);
  // Logs the summaries of the windows that ended by `now`.
  void Flush(absl::Time now);
  // When the next window ends; InfiniteFuture when none is open.
  absl::Time next_flush() const;

 private:
  struct Window {
    absl::Time end;
    uint64_t suppressed = 0;
    std::string last;
  };
  void Summarize(int64_t key, const Window& window);

  const Sink sink_;
  const absl::Duration window_;
  const std::string what_;
  std::map<int64_t, Window> windows_;  // by uid; -1: credentials unknown
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_RUNTIME_REFUSAL_LOG_H_
