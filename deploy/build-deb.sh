#!/usr/bin/env bash
# Builds the blockswap Debian package from an existing release build (the one
# tests/run.sh makes; no second build):
#
#   deploy/build-deb.sh BUILD_DIR OUT_DIR   -> OUT_DIR/blockswap_<version>_amd64.deb
#
# The files are what `deploy/install.sh --prefix /usr` installs, staged with
# its --destdir: blockswapd, blockswapctl, blockswap-demo, libblockswap.so.1
# with its headers and CMake package, the systemd unit, its tmpfiles.d entry,
# /etc/blockswap/blockswapd.toml (a conffile) and the man pages. Depends comes
# from dpkg-shlibdeps over the binaries, plus adduser for the maintainer
# scripts (deploy/debian/) and python3 for `blockswapctl trace --png`'s script, which create the blockswap user and group and
# reload systemd without enabling the service. The version is the build's
# CMake project version (a native package: no Debian revision).
# Maintainer: $BLOCKSWAP_DEB_MAINTAINER ("Name <address>"), else the author of
# the checkout's HEAD commit.
# Needs dpkg-dev (dpkg-shlibdeps) and help2man's pages in the build
# (deploy/install-deps.sh installs both).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(realpath "$1")
mkdir -p "$2"
out=$(realpath "$2")
maintainer=${BLOCKSWAP_DEB_MAINTAINER:-$(git -C "${root}" log -1 --format='%an <%ae>' 2>/dev/null || true)}

fail() {
  echo "build-deb: $*" >&2
  exit 1
}
for tool in dpkg-deb dpkg-shlibdeps strip gzip; do
  command -v "${tool}" >/dev/null || fail "${tool} is missing (deploy/install-deps.sh installs dpkg-dev)"
done
[[ ${maintainer} =~ ^[^\<]+\ \<[^@\>]+@[^\>]+\>$ ]] ||
  fail "no maintainer ('${maintainer}'): set BLOCKSWAP_DEB_MAINTAINER='Name <address>' outside a git checkout"
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "${build}/CMakeCache.txt" 2>/dev/null || true)
[[ -n ${version} ]] || fail "${build} is not a configured CMake build of blockswap (no project version in CMakeCache.txt)"
[[ -d ${build}/man ]] || fail "${build} has no man pages (help2man missing when it was configured?)"

# dpkg-shlibdeps reads debian/control and the other packages' DEBIAN/shlibs
# from its working directory: lay the staging out as a source tree would.
work=$(mktemp -d "${TMPDIR:-/tmp}/blockswap-deb.XXXXXX")
trap 'rm -rf "${work}"' EXIT
stage=${work}/debian/blockswap
"${root}/deploy/install.sh" --prefix /usr --build-dir "${build}" --skip-build --destdir "${stage}" >/dev/null

# What Debian's debhelper would do to the staged tree: binaries stripped,
# man pages and the changelog compressed, the copyright beside the README.
mapfile -t elves < <(find "${stage}/usr/bin" "${stage}/usr/lib" -type f \
  -exec sh -c 'head -c 4 "$1" | grep -q ELF' _ {} \; -print)
for file in "${elves[@]}"; do
  strip --strip-unneeded --remove-section=.comment --remove-section=.note "${file}"
done
find "${stage}/usr/share/man" -type f ! -name '*.gz' -exec gzip -9n {} +
doc=${stage}/usr/share/doc/blockswap
install -m 0644 "${root}/deploy/debian/copyright" "${doc}/copyright"
printf 'blockswap (%s) unstable; urgency=medium\n\n  * Built from git revision %s.\n\n -- %s  %s\n' \
  "${version}" "$(git -C "${root}" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "${maintainer}" "$(date -R -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}")" \
  | gzip -9n >"${doc}/changelog.gz"
find "${stage}" -type d -exec chmod 0755 {} +
find "${stage}" -type f -exec chmod go-w {} +

mkdir -p "${stage}/DEBIAN"
for script in postinst prerm postrm; do
  install -m 0755 "${root}/deploy/debian/${script}" "${stage}/DEBIAN/${script}"
done
install -m 0644 "${root}/deploy/debian/triggers" "${stage}/DEBIAN/triggers"
(cd "${stage}" && find etc -type f -printf '/%p\n' | sort) >"${stage}/DEBIAN/conffiles"
echo "libblockswap 1 blockswap (>= ${version})" >"${stage}/DEBIAN/shlibs"

printf 'Source: blockswap\n\nPackage: blockswap\nArchitecture: amd64\n' >"${work}/debian/control"
depends=$(cd "${work}" && dpkg-shlibdeps -O -xblockswap -l"${stage}/usr/lib" "${elves[@]}" |
  sed -n 's/^shlibs:Depends=//p')
[[ -n ${depends} ]] || fail "dpkg-shlibdeps found no dependencies"
(cd "${stage}" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"${stage}/DEBIAN/md5sums"
sed -e "s|@VERSION@|${version}|" -e "s|@MAINTAINER@|${maintainer}|" \
  -e "s|@INSTALLED_SIZE@|$(du -sk --exclude=DEBIAN "${stage}" | cut -f1)|" \
  -e "s|@DEPENDS@|adduser, python3, ${depends}|" \
  "${root}/deploy/debian/control.in" >"${stage}/DEBIAN/control"

deb=${out}/blockswap_${version}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "${stage}" "${deb}" >/dev/null
echo "${deb}"
