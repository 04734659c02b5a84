#!/usr/bin/env bash
# Installs every build and test dependency of blockswap.
#
# Idempotent and quick when everything is present: apt-get update runs only
# when a Debian package is missing, and the Python environment lives outside
# the clone (BLOCKSWAP_VENV, default ~/.cache/blockswap/venv) so that torch is
# downloaded once per machine, not once per clone.
#
# Prints the Python environment's path on its last line of stdout when called
# with --print-venv (tests/run.sh uses that).
set -euo pipefail

BLOCKSWAP_VENV="${BLOCKSWAP_VENV:-${HOME}/.cache/blockswap/venv}"

# C++ side: Debian packages.
debian_packages=(
  build-essential cmake ninja-build ccache pkg-config
  clang-14 libclang-rt-14-dev llvm-14
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libxxhash-dev libcivetweb-dev
  libssl-dev libsystemd-dev yamllint python3-yaml systemd libre2-dev
  patchelf
  python3 python3-venv python3-matplotlib
)
# Python side: PyPI packages, installed into the reused environment.
python_packages=(torch pytest numpy)

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

missing=()
for pkg in "${debian_packages[@]}"; do
  # python3/python3-venv may come from elsewhere (pyenv); only require them
  # when no usable python3 with venv exists.
  if [[ $pkg == python3 || $pkg == python3-venv ]]; then
    if python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then continue; fi
  fi
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  echo "install-deps: installing Debian packages: ${missing[*]}" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >&2
fi

if [[ ! -x "${BLOCKSWAP_VENV}/bin/python" ]]; then
  echo "install-deps: creating Python environment ${BLOCKSWAP_VENV}" >&2
  mkdir -p "$(dirname "${BLOCKSWAP_VENV}")"
  python3 -m venv "${BLOCKSWAP_VENV}" >&2
fi
py_missing=()
for pkg in "${python_packages[@]}"; do
  if ! "${BLOCKSWAP_VENV}/bin/python" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('${pkg}') is None)" 2>/dev/null; then
    py_missing+=("$pkg")
  fi
done
if ((${#py_missing[@]})); then
  echo "install-deps: installing PyPI packages: ${py_missing[*]}" >&2
  "${BLOCKSWAP_VENV}/bin/python" -m pip install -q --upgrade pip >&2
  "${BLOCKSWAP_VENV}/bin/python" -m pip install -q "${py_missing[@]}" >&2
fi

if [[ ${1:-} == --print-venv ]]; then
  echo "${BLOCKSWAP_VENV}"
fi
