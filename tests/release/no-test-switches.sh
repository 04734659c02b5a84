#!/usr/bin/env bash
# tests/release/no-test-switches.sh BUILD_DIR
#
# Fails when a binary that ships from BUILD_DIR — blockswapd, blockswapctl,
# blockswap-demo, libblockswap.so.1, and where built the Python package's
# copies of the library and the daemon and the LibTorch layer — contains the
# name of a test switch: an environment variable with which the tests break
# or slow the product, a test row of shared/base/env_settings.h. A build
# configured without BLOCKSWAP_TEST_HOOKS reads none of them, so none may be
# in it. tests/run.sh
# runs this on its release build, and once more on a copy of the daemon with
# a name appended, which must fail.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
dir=$1
# The switches: the test rows of the table of environment settings.
table=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/base/env_settings.h
mapfile -t switches < <(sed -n '/^#define BLOCKSWAP_TEST_ENV_SETTINGS(X)/,/^$/p' "${table}" |
  grep -oE 'X\(k[A-Za-z]+, "[A-Z_]+"' | grep -oE 'BLOCKSWAP_[A-Z_]+')
if ((${#switches[@]} == 0)); then
  echo "no-test-switches: no test rows in ${table} (BLOCKSWAP_TEST_ENV_SETTINGS)" >&2
  exit 1
fi

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
