// Every environment variable blockswap reads, in one table (as NCCL_PARAM
// keeps NCCL's): its name, the kind of value, what it is when unset, whose it
// is, and what it means. Every read goes through EnvValue
// (tests/link/one_env_table.sh fails on any other getenv in the product, and
// on a BLOCKSWAP_* name the table lacks); the README's list of variables is
// checked against the table (EnvSettingsTest), and the release build's check
// for test switches (tests/release/no-test-switches.sh) takes their names
// from the test rows below. The test rows exist only in a build with the
// test hooks (shared/base/test_hooks.h): a release binary holds none of their
// names.
#ifndef BLOCKSWAP_SHARED_BASE_ENV_SETTINGS_H_
#define BLOCKSWAP_SHARED_BASE_ENV_SETTINGS_H_

#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/types/span.h"
#include "shared/base/test_hooks.h"

namespace blockswap {

// X(id, name, kind, unset, meaning): blockswap's own variables.
#define BLOCKSWAP_PRODUCT_ENV_SETTINGS(X)                                                      \
  X(kSocket, "BLOCKSWAP_SOCKET", kPath, "/run/blockswap/blockswapd.sock",                      \
    "the daemon's socket, where a trainer or blockswapctl names none")                         \
  X(kAutostart, "BLOCKSWAP_AUTOSTART", kFlag, "1",                                             \
    "0: never start a private daemon; with no socket configured only the system one is tried") \
  X(kAutostartDir, "BLOCKSWAP_AUTOSTART_DIR", kPath, "/dev/shm/blockswap-<uid>",               \
    "the private daemon's directory (absolute, on a tmpfs)")                                   \
  X(kAutostartIdleExit, "BLOCKSWAP_AUTOSTART_IDLE_EXIT", kSeconds, "300",                      \
    "seconds the private daemon stays with no session (0: until killed)")                      \
  X(kCopy, "BLOCKSWAP_COPY", kChoice, "blockswapd's copy setting",                             \
    "daemon or trainer: who copies a trainer's blocks into its ring")                          \
  X(kLoadTransport, "BLOCKSWAP_LOAD_TRANSPORT", kChoice, "shm",                                \
    "shm or grpc: how a trainer's load requests reach the daemon")                             \
  X(kHostDevices, "BLOCKSWAP_HOST_DEVICES", kCount, "1",                                       \
    "how many devices the host backend offers")                                                \
  X(kPython, "BLOCKSWAP_PYTHON", kPath, "/usr/bin/python3, else python3 on PATH",              \
    "the Python (with matplotlib) that `blockswapctl trace --png` runs")                       \
  X(kLibrary, "BLOCKSWAP_LIBRARY", kPath, "the bundled copy, else the system's",               \
    "the libblockswap.so the Python package loads (read by client/python/blockswap/_abi.py)")

// Other programs' variables, which blockswap reads and never sets.
#define BLOCKSWAP_FOREIGN_ENV_SETTINGS(X)                                  \
  X(kCudaVisibleDevices, "CUDA_VISIBLE_DEVICES", kText, "every device",    \
    "CUDA's: named when the daemon finds no device")                       \
  X(kNotifySocket, "NOTIFY_SOCKET", kPath, "no notification",              \
    "systemd's: where blockswapd reports READY=1, STATUS= and STOPPING=1") \
  X(kJournalStream, "JOURNAL_STREAM", kText, "plain stderr",               \
    "systemd's: blockswapd's log lines carry journal priority prefixes")   \
  X(kColumns, "COLUMNS", kCount, "80", "the terminal's width, where stdout is no terminal")

// Test switches: the tests break or slow the product with them.
#define BLOCKSWAP_TEST_ENV_SETTINGS(X)                                                        \
  X(kTestSkipProtocolSteps, "BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS", kText, "none",              \
    "protocol steps switched off, comma-separated (docs/protocol.md, \"Mutation switches\")") \
  X(kHostJitterUs, "BLOCKSWAP_HOST_JITTER_US", kCount, "0",                                   \
    "scale of the host backend's random delay before each stream operation")                  \
  X(kHostCopyDelayUs, "BLOCKSWAP_HOST_COPY_DELAY_US", kCount, "0",                            \
    "each host-to-device copy of the host backend takes at least this many microseconds")     \
  X(kHostNoStreamWords, "BLOCKSWAP_HOST_NO_STREAM_WORDS", kFlag, "0",                         \
    "1: the host backend has no stream memory operations")                                    \
  X(kHostPinLimitBytes, "BLOCKSWAP_HOST_PIN_LIMIT_BYTES", kCount, "0 (no limit)",             \
    "each host device pins at most this many bytes at once")                                  \
  X(kHostLifetimeChecks, "BLOCKSWAP_HOST_LIFETIME_CHECKS", kChoice, "report",                 \
    "abort: the host backend aborts at a broken CUDA lifetime rule")                          \
  X(kGpuProbeRoot, "BLOCKSWAP_GPU_PROBE_ROOT", kPath, "/",                                    \
    "the directory the GPU probe reads as if it were /")

#if BLOCKSWAP_TEST_HOOKS
#define BLOCKSWAP_ENV_SETTINGS(X) \
  BLOCKSWAP_PRODUCT_ENV_SETTINGS(X) BLOCKSWAP_FOREIGN_ENV_SETTINGS(X) BLOCKSWAP_TEST_ENV_SETTINGS(X)
#else
#define BLOCKSWAP_ENV_SETTINGS(X) \
  BLOCKSWAP_PRODUCT_ENV_SETTINGS(X) BLOCKSWAP_FOREIGN_ENV_SETTINGS(X)
#endif

#define BLOCKSWAP_ENV_SETTING_ID(id, name, kind, unset, meaning) id,
enum class EnvSetting { BLOCKSWAP_ENV_SETTINGS(BLOCKSWAP_ENV_SETTING_ID) };
#undef BLOCKSWAP_ENV_SETTING_ID

// What a variable holds: a path, a non-negative integer, seconds, 0 or 1, one
// of a few names, or free text.
enum class EnvKind { kPath, kCount, kSeconds, kFlag, kChoice, kText };
// Whose a variable is.
enum class EnvOwner { kProduct, kForeign, kTest };

struct EnvSettingRow {
  EnvSetting id;
  const char* name;
  EnvKind kind;
  const char* unset;  // what holds when it is unset, in words
  EnvOwner owner;
  const char* meaning;
};

// Every row of this build, in the order above.
absl::Span<const EnvSettingRow> EnvSettings();
const EnvSettingRow& EnvSettingOf(EnvSetting setting);
inline const char* EnvName(EnvSetting setting) { return EnvSettingOf(setting).name; }

// The one read of the environment: the variable's value, or nullopt when it
// is unset or empty (an empty value means what an unset one does).
std::optional<std::string> EnvValue(EnvSetting setting);

// The value as a number of type T (absl::SimpleAtoi's grammar), or nullopt
// when it is unset, empty or not such a number.
template <typename T>
std::optional<T> EnvNumber(EnvSetting setting) {
  const std::optional<std::string> text = EnvValue(setting);
  T number{};
  if (!text.has_value() || !absl::SimpleAtoi(*text, &number)) return std::nullopt;
  return number;
}

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_ENV_SETTINGS_H_
