#!/usr/bin/env bash
# Installs blockswapd as a system service on a Debian machine with systemd:
# builds (Release, without tests, in a temporary directory outside the
# checkout, removed afterwards), installs the binaries, libblockswap.so, its
# headers and CMake package, the man pages, the systemd unit and — unless one
# exists — /etc/blockswap/blockswapd.toml, then creates the `blockswap`
# system user and group and reloads systemd. It does not enable or start the
# service.
#
#   deploy/install-deps.sh                 # Debian packages (once)
#   sudo deploy/install.sh [--prefix /usr/local] [--build-dir DIR] [--skip-build]
#                          [--destdir DIR]
#
# --destdir stages the files under DIR (packaging) and skips the user, group
# and systemd steps. --build-dir keeps the build in DIR (and reuses it next
# time); --skip-build installs an existing build there.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=/usr/local
build=
destdir=
skip_build=false
while (($#)); do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --destdir) destdir=$2; shift 2 ;;
    --skip-build) skip_build=true; shift ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "install.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [[ -z ${destdir} && $(id -u) -ne 0 ]]; then
  echo "install.sh: run as root (it installs into ${prefix} and /etc), or use --destdir" >&2
  exit 2
fi

if [[ -z ${build} ]]; then
  if ${skip_build}; then
    echo "install.sh: --skip-build needs --build-dir (the build to install)" >&2
    exit 2
  fi
  # Not inside the checkout: a staging run must leave the source tree as it was.
  build=$(mktemp -d "${TMPDIR:-/tmp}/blockswap-install.XXXXXX")
  trap 'rm -rf "${build}"' EXIT
fi

if ! ${skip_build}; then
  cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBLOCKSWAP_BUILD_TESTS=OFF -DCMAKE_INSTALL_PREFIX="${prefix}"
  cmake --build "${build}"
fi
# The config goes to /etc/blockswap whatever the prefix (the unit names it).
DESTDIR=${destdir} BLOCKSWAP_CONFIG_DIR=/etc/blockswap cmake --install "${build}" --prefix "${prefix}"

if [[ -n ${destdir} ]]; then
  echo "install.sh: staged under ${destdir}; user, group and systemd steps skipped"
  exit 0
fi

if ! getent group blockswap >/dev/null; then
  groupadd --system blockswap
  echo "install.sh: created group blockswap"
fi
if ! getent passwd blockswap >/dev/null; then
  useradd --system --gid blockswap --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin --comment "blockswap daemon" blockswap
  echo "install.sh: created user blockswap"
fi
# The config holds nothing secret, but only root edits it.
chmod 0644 /etc/blockswap/blockswapd.toml
ldconfig
if [[ -d /run/systemd/system ]]; then
  systemctl daemon-reload
fi
cat <<EOT
install.sh: installed into ${prefix}. Next:
  blockswapd --config /etc/blockswap/blockswapd.toml --check-config
  usermod -aG blockswap TRAINER_USER      # who may use the daemon
  systemctl enable --now blockswapd
  blockswapctl health
EOT
