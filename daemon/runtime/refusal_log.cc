#include "daemon/runtime/refusal_log.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {

void RefusalLog::Refused(std::optional<uid_t> uid, absl::string_view message, absl::Time now) {
  Flush(now);
  const int64_t key = uid.has_value() ? static_cast<int64_t>(*uid) : -1;
  auto [it, opened] = windows_.try_emplace(key);
  if (opened) {
    it->second.end = now + window_;
    sink_(message);
    return;
  }
  ++it->second.suppressed;
  it->second.last = std::string(message);
}

void RefusalLog::Flush(absl::Time now) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    if (it->second.end > now) {
      ++it;
      continue;
    }
    Summarize(it->first, it->second);
    it = windows_.erase(it);
  }
}

absl::Time RefusalLog::next_flush() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, window] : windows_) next = std::min(next, window.end);
  return next;
}

void RefusalLog::Summarize(int64_t key, const Window& window) {
  if (window.suppressed == 0) return;
  sink_(absl::StrCat(
      "refused ", window.suppressed, " more ", what_, window.suppressed == 1 ? "" : "s", " from ",
      key < 0 ? std::string("peers of unknown uid") : absl::StrCat("uid ", key), " in the last ",
      absl::FormatDuration(window_), " (the last: ", window.last, ")"));
}

}  // namespace blockswap::daemon
