#!/usr/bin/env bash
# The project's test command (README, CI): installs what is missing, then
# builds and tests four configurations (docs/architecture.md, "CI"):
#   A  g++, CUDA backend (when the toolkit is present), LibTorch, all tests
#      -> build/            (BLOCKSWAP_BUILD_DIR overrides), binaries in bin/
#   B  clang-14 with AddressSanitizer + UndefinedBehaviorSanitizer, the CUDA
#      toolkit hidden and no LibTorch: proves the build without CUDA and runs
#      every test that needs neither, the fuzzers included -> build/sanitize/
#   T  clang-14 with ThreadSanitizer over the concurrency tests
#      (tests/sanitize/tsan.sh)                           -> build/tsan/
#   R  the release build: g++, Release, no tests and no test hooks, as the
#      packages ship it; checked to contain no test switch
#      (tests/release/no-test-switches.sh)                -> build/release/
#      then the wheel and the Debian package built from it, and tested
#      (tests/package/run.sh)
# A, B and T are built with the test hooks (shared/base/test_hooks.h); R,
# like every package, without. Every configuration must leave no
# /dev/shm/blockswap-test* entry behind.
# Exits non-zero on any failure. BLOCKSWAP_CONFIGS (e.g. =A or ="B T") runs
# only those.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BLOCKSWAP_BUILD_DIR:-${root}/build}
configs=${BLOCKSWAP_CONFIGS:-A B T R}
# The release build; the packaging reuses it.
release_build=${BLOCKSWAP_RELEASE_BUILD_DIR:-${build}/release}
jobs=$(nproc)
# Lets ccache reuse objects across clones in different folders (CI clones anew).
export CCACHE_BASEDIR="${root}" CCACHE_NOHASHDIR=true

venv=$("${root}/deploy/install-deps.sh" --print-venv | tail -n 1)
torch_prefix=$("${venv}/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')

run_config() {
  local name=$1 dir=$2
  shift 2
  echo "=== configuration ${name}: ${dir}"
  cmake -S "${root}" -B "${dir}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
  cmake --build "${dir}" -j "${jobs}"
  if ! (cd "${dir}" && ctest --output-on-failure -j "${jobs}"); then
    report_failures "${dir}"
    return 1
  fi
}

# The failed assertions again, last: a CI log that keeps only its tail still
# names what failed and why, however long the failing tests' output was.
report_failures() {
  local log=$1/Testing/Temporary/LastTest.log
  [[ -f ${log} ]] || return 0
  echo "=== failed assertions (from ${log#"${root}/"})"
  grep -E -A6 ': Failure$|went unnoticed|^\[  FAILED  \]|^FAILED |\*\*\*Timeout' "${log}" \
    | grep -v '^\[  FAILED  \] [0-9]* tests\?, listed below' | tail -n 80 || true
}

# Test debris: what the tests' scratch directories leave in /dev/shm.
shm_debris() { find /dev/shm -maxdepth 1 -name 'blockswap-test*' 2>/dev/null | sort; }
debris_before=$(shm_debris)

release_config() {
  echo "=== configuration R: ${release_build}"
  cmake -S "${root}" -B "${release_build}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DBLOCKSWAP_TEST_HOOKS=OFF \
    -DBLOCKSWAP_BUILD_TESTS=OFF -DBLOCKSWAP_WITH_TORCH=OFF
  cmake --build "${release_build}" -j "${jobs}"
  "${root}/tests/release/no-test-switches.sh" "${release_build}"
  # The check can fail: a daemon with a switch's name in it.
  local planted
  planted=$(mktemp -d "${TMPDIR:-/tmp}/blockswap-planted.XXXXXX")
  mkdir -p "${planted}/bin" "${planted}/lib"
  cp "${release_build}"/bin/{blockswapd,blockswapctl,blockswap-demo} "${planted}/bin/"
  cp -L "${release_build}/lib/libblockswap.so.1" "${planted}/lib/"
  printf 'BLOCKSWAP_HOST_JITTER_US' >>"${planted}/bin/blockswapd"
  if "${root}/tests/release/no-test-switches.sh" "${planted}" 2>/dev/null; then
    rm -rf "${planted}"
    echo "tests/run.sh: no-test-switches.sh passed a daemon that contains a switch's name" >&2
    return 1
  fi
  rm -rf "${planted}"
}

for config in ${configs}; do
  case ${config} in
    A)
      run_config A "${build}" \
        -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DBLOCKSWAP_TEST_HOOKS=ON \
        -DBLOCKSWAP_WITH_TORCH=ON -DCMAKE_PREFIX_PATH="${torch_prefix}" \
        -DPython3_EXECUTABLE="${venv}/bin/python"
      ;;
    B)
      run_config B "${build}/sanitize" \
        -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DBLOCKSWAP_TEST_HOOKS=ON \
        -DBLOCKSWAP_SANITIZE=address,undefined -DBLOCKSWAP_BUILD_FUZZERS=ON \
        -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DBLOCKSWAP_WITH_TORCH=OFF
      ;;
    T)
      echo "=== configuration T: ${build}/tsan"
      BLOCKSWAP_TSAN_BUILD_DIR="${build}/tsan" "${root}/tests/sanitize/tsan.sh"
      ;;
    R)
      release_config
      BLOCKSWAP_VENV=${venv} "${root}/tests/package/run.sh" "${release_build}"
      ;;
    *)
      echo "tests/run.sh: unknown configuration '${config}' (A, B, T or R)" >&2
      exit 2
      ;;
  esac
done

debris=$(comm -13 <(echo "${debris_before}") <(shm_debris) | sed '/^$/d')
if [[ -n ${debris} ]]; then
  echo "tests/run.sh: the tests left $(wc -l <<<"${debris}") entries in /dev/shm:" >&2
  while read -r entry; do
    echo "  ${entry}: $(ls -A "${entry}" 2>/dev/null | head -n 5 | paste -sd' ')" >&2
  done <<<"${debris}"
  exit 1
fi
echo "=== tests/run.sh: configurations ${configs} passed"
