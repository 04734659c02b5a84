// Whether this build has the switches with which tests break or slow the
// product on purpose, each read from the environment: protocol steps switched
// off (shared/protocol/load_protocol.h), the host backend's jitter, slowed
// copies, pin limit and missing stream words (shared/backend/backend.h), its
// abort at a broken CUDA lifetime rule (host_lifetime.h), and the fake
// machine its GPU probe reads (gpu_presence.h). CMake's BLOCKSWAP_TEST_HOOKS:
// tests/run.sh turns it on; off by default and in every package, so that a
// released blockswapd or libblockswap.so reads none of these variables (the
// test rows of shared/base/env_settings.h; tests/release/no-test-switches.sh
// checks that their names are not in it).
#ifndef BLOCKSWAP_SHARED_BASE_TEST_HOOKS_H_
#define BLOCKSWAP_SHARED_BASE_TEST_HOOKS_H_

#ifndef BLOCKSWAP_TEST_HOOKS
#error "BLOCKSWAP_TEST_HOOKS (0 or 1) comes from the top-level CMakeLists.txt"
#endif

namespace blockswap {

inline constexpr bool kTestHooks = BLOCKSWAP_TEST_HOOKS != 0;

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_TEST_HOOKS_H_
