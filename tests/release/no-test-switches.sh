#!/usr/bin/env bash
# tests/release/no-test-switches.sh BUILD_DIR
#
# Fails when a binary that ships from BUILD_DIR — blockswapd, blockswapctl,
# blockswap-demo, libblockswap.so.1, and where built the Python package's
# copies of the library and the daemon and the LibTorch layer — contains the
# name of a test switch: an environment variable with which the tests break
# or slow the product (shared/base/test_hooks.h). A build configured without
# BLOCKSWAP_TEST_HOOKS reads none of them, so none may be in it. tests/run.sh
# runs this on its release build, and once more on a copy of the daemon with
# a name appended, which must fail.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
dir=$1
switches=(BLOCKSWAP_TEST_SKIP_PROTOCOL_STEPS BLOCKSWAP_HOST_JITTER_US BLOCKSWAP_HOST_COPY_DELAY_US
          BLOCKSWAP_HOST_NO_STREAM_WORDS BLOCKSWAP_HOST_PIN_LIMIT_BYTES
          BLOCKSWAP_HOST_LIFETIME_CHECKS BLOCKSWAP_GPU_PROBE_ROOT)

# What ships, always; a missing one fails (a check of nothing would pass).
binaries=()
for required in bin/blockswapd bin/blockswapctl bin/blockswap-demo lib/libblockswap.so.1; do
  if [[ ! -f ${dir}/${required} ]]; then
    echo "no-test-switches: ${dir}/${required} is missing (build BUILD_DIR first)" >&2
    exit 1
  fi
  binaries+=("${dir}/${required}")
done
# What ships where it was built.
for optional in python/blockswap/_lib/libblockswap.so.1 python/blockswap/_lib/blockswapd \
                lib/libblockswap_torch.so.1; do
  [[ -f ${dir}/${optional} ]] && binaries+=("${dir}/${optional}")
done

pattern=$(printf '%s\n' "${switches[@]}")
found=0
for binary in "${binaries[@]}"; do
  names=$(LC_ALL=C grep -a -o -F -e "${pattern}" "${binary}" | sort -u | paste -sd' ' || true)
  if [[ -n ${names} ]]; then
    echo "no-test-switches: ${binary} contains test switches: ${names}" >&2
    found=1
  fi
done
((found)) && exit 1
echo "no-test-switches: none of ${#switches[@]} test switches in ${#binaries[@]} shipped binaries" \
  "of ${dir}"
