#!/usr/bin/env bash
# The project's test command (README, CI): installs what is missing, then
# builds and tests the two configurations (docs/architecture.md, "CI"):
#   A  g++, CUDA backend (when the toolkit is present), LibTorch, all tests
#      -> build/            (BLOCKSWAP_BUILD_DIR overrides), binaries in bin/
#   B  clang-14 with AddressSanitizer + UndefinedBehaviorSanitizer, the CUDA
#      toolkit hidden and no LibTorch: proves the build without CUDA and runs
#      every test that needs neither, the fuzzers included -> build/sanitize/
#   P  the release build (Release, no tests, the cuda backend) -> build/release/,
#      then the wheel and the Debian package built from it and tested
#      (tests/package/run.sh)
# Exits non-zero on any failure. BLOCKSWAP_CONFIGS=A, =B or =P runs only one.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BLOCKSWAP_BUILD_DIR:-${root}/build}
configs=${BLOCKSWAP_CONFIGS:-A B P}
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

for config in ${configs}; do
  case ${config} in
    A)
      run_config A "${build}" \
        -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
        -DBLOCKSWAP_WITH_TORCH=ON -DCMAKE_PREFIX_PATH="${torch_prefix}" \
        -DPython3_EXECUTABLE="${venv}/bin/python"
      ;;
    B)
      run_config B "${build}/sanitize" \
        -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
        -DBLOCKSWAP_SANITIZE=address,undefined -DBLOCKSWAP_BUILD_FUZZERS=ON \
        -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DBLOCKSWAP_WITH_TORCH=OFF
      ;;
    P)
      release=${build}/release
      echo "=== configuration P: ${release}"
      cmake -S "${root}" -B "${release}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DBLOCKSWAP_BUILD_TESTS=OFF
      cmake --build "${release}" -j "${jobs}"
      BLOCKSWAP_VENV=${venv} "${root}/tests/package/run.sh" "${release}"
      ;;
    *)
      echo "tests/run.sh: unknown configuration '${config}' (A, B or P)" >&2
      exit 2
      ;;
  esac
done
echo "=== tests/run.sh: configurations ${configs} passed"
