#include "shared/protocol/copy_path.h"

#include "absl/strings/str_cat.h"

namespace blockswap {

absl::StatusOr<CopyPath> ParseCopyPath(absl::string_view name) {
  if (name == "daemon") return CopyPath::kDaemon;
  if (name == "trainer") return CopyPath::kTrainer;
  return absl::InvalidArgumentError(
      absl::StrCat("copy path '", name, "' (must be \"daemon\" or \"trainer\")"));
}

absl::string_view CopyPathName(CopyPath path) {
  return path == CopyPath::kTrainer ? "trainer" : "daemon";
}

v1::CopyPath CopyPathToProto(CopyPath path) {
  return path == CopyPath::kTrainer ? v1::COPY_PATH_TRAINER : v1::COPY_PATH_DAEMON;
}

absl::StatusOr<std::optional<CopyPath>> CopyPathFromProto(int value) {
  switch (value) {
    case v1::COPY_PATH_UNSPECIFIED:
      return std::nullopt;
    case v1::COPY_PATH_DAEMON:
      return CopyPath::kDaemon;
    case v1::COPY_PATH_TRAINER:
      return CopyPath::kTrainer;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "copy path ", value, " (this blockswapd knows 0 unspecified, 1 daemon and 2 trainer)"));
}

}  // namespace blockswap
