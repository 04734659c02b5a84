#!/usr/bin/env bash
# ThreadSanitizer over the daemon's concurrency tests (docs/reliability.md):
# configuration T of tests/run.sh, or by hand:
#
#   tests/sanitize/tsan.sh [extra gtest filter, e.g. 'ReliabilityTest.*']
#
# Builds configuration T — clang-14, -fsanitize=thread, the test hooks
# (shared/base/test_hooks.h), the CUDA toolkit hidden, no LibTorch — into
# build/tsan (BLOCKSWAP_TSAN_BUILD_DIR overrides), only the targets below, and
# runs, with tests/sanitize/tsan.supp:
#   daemon_*_test        each daemon layer's unit tests: listener, peer
#                        registry, model store (concurrent registrations
#                        coalescing), work queue, ...
#   shared_*_test        each shared layer's: the load protocol's two halves
#                        in two processes, host backend streams and events,
#                        futexes
#   daemon_client_test   the real blockswapd (built with TSan too) under
#                        several client processes
# Left out here, each for its reason (configurations A and B run them):
#   *MutationTest.*      they switch a protocol step off on purpose, and the
#                        race that causes is what they prove a client
#                        notices: a staged copy without its waits has a
#                        staging thread's memcpy race the host stream's copy
#                        of the same staging buffer, which TSan reports
#   daemon_client_test's throughput comparison, P7 soak, and the two work
#                        thread tests that bound seconds (a 40k-tensor
#                        header's daemon CPU, an upload beside header
#                        floods): timing under TSan says nothing (a
#                        200k-tensor header parses 7x slower); the other
#                        WorkThreadsTest cases run
# Debian's abseil is not instrumented either, so TSan would not see our
# absl::Mutex, CondVar and Notification synchronise anything: every process
# runs with tests/sanitize/tsan_absl_sync.cc LD_PRELOADed, which tells it.
# Every process built here (the daemon and the client roles included) writes
# its reports to stderr; the script keeps the whole output in
# build/tsan/tsan.log, prints how many reports it found and in which of our
# functions, and exits non-zero when a test failed or a report was printed.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BLOCKSWAP_TSAN_BUILD_DIR:-${root}/build/tsan}
filter=${1:-*}
export CCACHE_BASEDIR="${root}" CCACHE_NOHASHDIR=true

cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DBLOCKSWAP_SANITIZE=thread -DBLOCKSWAP_TEST_HOOKS=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DBLOCKSWAP_WITH_TORCH=OFF >/dev/null || exit 1
unit_tests=(shared_base_test shared_os_test shared_backend_test shared_protocol_test
            daemon_runtime_test daemon_store_test daemon_device_test daemon_session_test
            daemon_server_test daemon_test)
cmake --build "${build}" -j "$(nproc)" --target \
  "${unit_tests[@]}" daemon_client_test blockswapd blockswap_abi_client || exit 1

# The abseil shim, built without TSan (its annotations bind to the runtime of
# the instrumented executable that loads it).
shim=${build}/libblockswap_tsan_absl_sync.so
clang++-14 -std=c++20 -O1 -fPIC -shared "${root}/tests/sanitize/tsan_absl_sync.cc" -o "${shim}" -ldl ||
  exit 1
export LD_PRELOAD="${shim}"

# exitcode=66: a process that printed a report fails, so the test that
# spawned it fails too. halt_on_error=0: see every report of a run.
export TSAN_OPTIONS="suppressions=${root}/tests/sanitize/tsan.supp halt_on_error=0 exitcode=66 second_deadlock_stack=1 history_size=4"
log=${build}/tsan.log
: >"${log}"
failed=0
run() {
  local binary=$1 gtest_filter=$2
  local output=${build}/${binary}.log
  echo "=== ${binary} --gtest_filter=${gtest_filter}" | tee -a "${log}"
  if ! "${build}/bin/${binary}" --gtest_filter="${gtest_filter}" >"${output}" 2>&1; then
    echo "    FAILED (see ${log})"
    # What failed, so that a log cut to its tail still says it.
    grep -A8 -E '^[^ ]+:[0-9]+: Failure$' "${output}" | head -n 60 | sed 's/^/    | /'
    failed=1
  fi
  cat "${output}" >>"${log}"
  grep -E '^\[  (PASSED|FAILED)  \]|tests? from .* ran' "${output}" | tail -n 2 | sed 's/^/    /'
}
left_out='*MutationTest.*'
for binary in "${unit_tests[@]}"; do
  run "${binary}" "${filter}:-${left_out}"
done
run daemon_client_test \
  "${filter}:-${left_out}:*ClientHoldingASlotDoesNotSlowAnother*:*P7Soak*:*WorkThreadsTest.AFortyThousand*:*WorkThreadsTest.AnotherUidsUpload*"

reports=$(grep -c 'WARNING: ThreadSanitizer' "${log}" || true)
echo "=== ThreadSanitizer reports: ${reports} (full output: ${log})"
if [[ ${reports} -gt 0 ]]; then
  # The first frame of ours in each report.
  grep -A40 'WARNING: ThreadSanitizer' "${log}" | grep -oE 'blockswap::[A-Za-z_:]+' |
    sort | uniq -c | sort -rn | head -n 20
  failed=1
fi
exit ${failed}
