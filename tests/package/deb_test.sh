#!/usr/bin/env bash
# The Debian package as an operator gets it: built by deploy/build-deb.sh from
# the release build, then
#   - dpkg-deb -c: every file the service section of the README names;
#   - the control fields: the build's version, Depends from dpkg-shlibdeps
#     (gRPC among them) and adduser, /etc/blockswap/blockswapd.toml a conffile;
#   - the unit's ExecStart is the packaged /usr/bin/blockswapd;
#   - the maintainer scripts: valid sh, creating the blockswap user and
#     group, reloading systemd, never enabling or starting the service;
#   - lintian: no errors (warnings are printed);
#   - apt-get install --simulate ./blockswap_<version>_amd64.deb: its
#     dependencies resolve on this machine.
#
#   tests/package/deb_test.sh BUILD_DIR WORK_DIR
set -euo pipefail

[[ $# -eq 2 ]] || { echo "usage: $0 BUILD_DIR WORK_DIR" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(realpath "$1")
work=$2
rm -rf "${work}"
mkdir -p "${work}"
work=$(realpath "${work}")
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "${build}/CMakeCache.txt")

failures=0
fail() {
  echo "deb_test: FAILED: $*" >&2
  failures=$((failures + 1))
}

deb=$("${root}/deploy/build-deb.sh" "${build}" "${work}" | tail -n 1)
echo "deb_test: built $(basename "${deb}"), $(du -k "${deb}" | cut -f1) KiB"
[[ $(basename "${deb}") == "blockswap_${version}_amd64.deb" ]] || fail "package name $(basename "${deb}")"

contents=$(dpkg-deb -c "${deb}" | awk '{ print $6 }')
for path in ./usr/bin/blockswapd ./usr/bin/blockswapctl ./usr/bin/blockswap-demo \
    ./usr/lib/libblockswap.so.1 ./usr/lib/libblockswap.so \
    ./usr/include/blockswap/blockswap.h ./usr/include/blockswap/blockswap.hpp \
    ./usr/lib/cmake/blockswap/blockswapConfig.cmake \
    ./usr/lib/cmake/blockswap/blockswapConfigVersion.cmake \
    ./usr/lib/systemd/system/blockswapd.service ./usr/lib/tmpfiles.d/blockswapd.conf \
    ./etc/blockswap/blockswapd.toml ./usr/share/man/man8/blockswapd.8.gz \
    ./usr/share/man/man1/blockswapctl.1.gz ./usr/share/doc/blockswap/copyright; do
  grep -qxF "${path}" <<<"${contents}" || fail "the package lacks ${path}"
done
if grep -E 'blockswap/torch\.h|libcudart|libcuda\.so' <<<"${contents}"; then
  fail "the package holds the LibTorch header or a CUDA library"
fi

field() { dpkg-deb -f "${deb}" "$1"; }
[[ $(field Version) == "${version}" ]] || fail "Version is '$(field Version)', the build's is ${version}"
depends=$(field Depends)
echo "deb_test: Depends: ${depends}"
for needed in adduser 'libc6 (>=' 'libgrpc++1.51' 'libprotobuf32' 'libstdc++6'; do
  [[ ${depends} == *"${needed}"* ]] || fail "Depends lacks ${needed}"
done

control=${work}/control
files=${work}/files
dpkg-deb -e "${deb}" "${control}"
dpkg-deb -x "${deb}" "${files}"
grep -qxF /etc/blockswap/blockswapd.toml "${control}/conffiles" || fail "blockswapd.toml is no conffile"
grep -qxF 'ExecStart=/usr/bin/blockswapd --config /etc/blockswap/blockswapd.toml' \
  "${files}/usr/lib/systemd/system/blockswapd.service" || fail "the unit's ExecStart is not /usr/bin/blockswapd"
for script in postinst prerm postrm; do
  sh -n "${control}/${script}" || fail "${script} is not valid sh"
done
grep -q 'addgroup --system' "${control}/postinst" || fail "postinst creates no blockswap group"
grep -q 'adduser --system' "${control}/postinst" || fail "postinst creates no blockswap user"
grep -q 'daemon-reload' "${control}/postinst" || fail "postinst does not reload systemd"
if grep -nE 'systemctl[^#]*(enable|start|restart)|deb-systemd-(helper enable|invoke start)' \
    "${control}/postinst"; then
  fail "postinst enables or starts the service"
fi

lintian_out=$(lintian --fail-on error "${deb}" 2>&1) || fail "lintian reports errors"
echo "${lintian_out}" | sed 's/^/  lintian: /'

if ! apt-get install --simulate -q "${deb}" >"${work}/apt.log" 2>&1; then
  fail "apt-get install --simulate fails:"
  cat "${work}/apt.log" >&2
fi
grep -E '^Inst blockswap ' "${work}/apt.log" || fail "apt-get would not install blockswap"

if ((failures)); then
  echo "deb_test: ${failures} check(s) failed" >&2
  exit 1
fi
echo "deb_test: passed ($(basename "${deb}"), $(du -k "${deb}" | cut -f1) KiB)"
