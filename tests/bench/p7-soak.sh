#!/usr/bin/env bash
# P7 at full scale (docs/reliability.md): 64 client processes, each streaming
# 10 000 loads through its own ring from one shared model and checking every
# byte, against one blockswapd (host backend). The CI runs the same test
# reduced (16 x 1000) inside daemon_client_test.
#
#   tests/bench/p7-soak.sh [CLIENTS [LOADS]]     (default 64 10000)
#
# Uses the configuration A build (build/bin; BLOCKSWAP_BUILD_DIR overrides),
# building daemon_client_test and blockswapd if needed. Prints
#   P7 scale (...) goal=0 errors measured=<n> errors PASS|MISS
# and exits non-zero on MISS.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BLOCKSWAP_BUILD_DIR:-${root}/build}
if [[ ! -f "${build}/build.ninja" ]]; then
  echo "p7-soak.sh: no build in ${build}: run tests/run.sh (or BLOCKSWAP_CONFIGS=A tests/run.sh) first" >&2
  exit 2
fi
cmake --build "${build}" --target daemon_client_test blockswapd >/dev/null
export BLOCKSWAP_P7_CLIENTS=${1:-64} BLOCKSWAP_P7_LOADS=${2:-10000}
output=$("${build}/bin/daemon_client_test" \
  --gtest_filter='ReliabilityTest.P7SoakManyClientsVerifiedLoadsNoError' 2>&1) || status=$?
line=$(grep '^P7 scale' <<<"${output}" || true)
if [[ -z "${line}" ]]; then
  echo "${output}" | tail -n 40
  echo "P7 scale goal=0 errors measured=? errors MISS (the test did not report)"
  exit 1
fi
echo "${line}"
[[ ${line} == *PASS ]]
