#!/usr/bin/env bash
# cmake --install into a temporary prefix (and deploy/install.sh into a
# staging directory), then check what an operator and a trainer get: the systemd unit passes `systemd-analyze verify` (its
# ExecStart is the installed binary), the installed config passes
# --check-config, and a project that only does find_package(blockswap)
# builds against the installed library and runs.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT
prefix=${tmp}/prefix

cmake --install "${build}" --prefix "${prefix}" >"${tmp}/install.log"
unit=${prefix}/lib/systemd/system/blockswapd.service
config=${prefix}/etc/blockswap/blockswapd.toml
for f in "${prefix}/bin/blockswapd" "${prefix}/bin/blockswapctl" "${unit}" "${config}" \
         "${prefix}/include/blockswap/blockswap.h" "${prefix}/include/blockswap/blockswap.hpp" \
         "${prefix}/lib/cmake/blockswap/blockswapConfig.cmake"; do
  [[ -e ${f} ]] || { echo "FAIL: ${f} was not installed"; exit 1; }
done
# The masters directory at boot, before any user can squat on it: what
# systemd-tmpfiles makes of the installed entry, in a root of its own.
tmpfiles=${prefix}/lib/tmpfiles.d/blockswapd.conf
[[ -f ${tmpfiles} ]] || { echo "FAIL: ${tmpfiles} was not installed"; exit 1; }
if command -v systemd-tmpfiles >/dev/null; then
  root=${tmp}/tmpfiles-root
  mkdir -p "${root}/etc" "${root}/dev/shm"
  echo 'blockswap:x:990:990::/nonexistent:/usr/sbin/nologin' >"${root}/etc/passwd"
  echo 'blockswap:x:990:' >"${root}/etc/group"
  systemd-tmpfiles --create --root="${root}" "${tmpfiles}"
  made=$(stat -c '%a %u %g' "${root}/dev/shm/blockswap")
  [[ ${made} == "700 990 990" ]] ||
    { echo "FAIL: systemd-tmpfiles made /dev/shm/blockswap as '${made}', not '700 990 990'"; exit 1; }
  echo "ok: the tmpfiles.d entry makes /dev/shm/blockswap 0700 blockswap:blockswap"
else
  grep -Eq '^d +/dev/shm/blockswap +0700 +blockswap +blockswap ' "${tmpfiles}" ||
    { echo "FAIL: ${tmpfiles} has no entry for /dev/shm/blockswap 0700 blockswap"; exit 1; }
  echo "SKIP (systemd-tmpfiles --create): not installed; the entry's line was checked"
fi
grep -q "^ExecStart=${prefix}/bin/blockswapd --config ${config}\$" "${unit}" ||
  { echo "FAIL: ExecStart does not name the installed binary and config:"; grep ExecStart "${unit}"; exit 1; }

if command -v systemd-analyze >/dev/null; then
  # --man=no: the Documentation= lines are not checked against man pages.
  if ! systemd-analyze verify --man=no "${unit}" 2>"${tmp}/verify.log"; then
    echo "FAIL: systemd-analyze verify:"; cat "${tmp}/verify.log"; exit 1
  fi
  if [[ -s ${tmp}/verify.log ]]; then
    echo "FAIL: systemd-analyze verify warned:"; cat "${tmp}/verify.log"; exit 1
  fi
  echo "ok: systemd-analyze verify ${unit}"
else
  echo "SKIP (systemd-analyze verify): systemd-analyze is not installed"
fi

for binary in blockswapd blockswapctl; do
  "${prefix}/bin/${binary}" --version >"${tmp}/version.txt" ||
    { echo "FAIL: installed ${binary} --version exited $?"; exit 1; }
  grep -q "^${binary} [0-9]" "${tmp}/version.txt" && grep -q "^C ABI version: " "${tmp}/version.txt" ||
    { echo "FAIL: installed ${binary} --version:"; cat "${tmp}/version.txt"; exit 1; }
done
echo "ok: the installed binaries answer --version"

"${prefix}/bin/blockswapd" --config "${config}" --check-config >"${tmp}/effective.toml"
grep -q '^socket_group = "blockswap"$' "${tmp}/effective.toml" ||
  { echo "FAIL: --check-config of the installed config:"; cat "${tmp}/effective.toml"; exit 1; }
echo "ok: the installed config passes --check-config"

# A second install keeps the operator's config and puts the default beside it.
echo "# edited by the operator" >>"${config}"
cmake --install "${build}" --prefix "${prefix}" >"${tmp}/install2.log"
grep -q "^# edited by the operator$" "${config}" || { echo "FAIL: a reinstall replaced the config"; exit 1; }
cmp -s "${source}/deploy/blockswapd.toml" "${config}.default" ||
  { echo "FAIL: the shipped default is not beside the kept config"; exit 1; }
echo "ok: a reinstall keeps the config"

# deploy/install.sh, staged: the unit runs /usr/local/bin/blockswapd with /etc/blockswap.
stage=${tmp}/stage
"${source}/deploy/install.sh" --skip-build --build-dir "${build}" --destdir "${stage}" >"${tmp}/stage.log"
grep -q "^ExecStart=/usr/local/bin/blockswapd --config /etc/blockswap/blockswapd.toml$" \
  "${stage}/usr/local/lib/systemd/system/blockswapd.service" ||
  { echo "FAIL: deploy/install.sh staged a unit with the wrong paths"; exit 1; }
[[ -x ${stage}/usr/local/bin/blockswapd && -f ${stage}/etc/blockswap/blockswapd.toml &&
   -f ${stage}/usr/local/lib/tmpfiles.d/blockswapd.conf ]] ||
  { echo "FAIL: deploy/install.sh did not stage the binary, the config and the tmpfiles.d entry"; exit 1; }
echo "ok: deploy/install.sh --destdir"

cmake -S "${source}/tests/service/consumer" -B "${tmp}/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="${prefix}" -DCMAKE_BUILD_TYPE=Release >"${tmp}/consumer.log" 2>&1 ||
  { cat "${tmp}/consumer.log"; echo "FAIL: find_package(blockswap)"; exit 1; }
cmake --build "${tmp}/consumer" >>"${tmp}/consumer.log" 2>&1 ||
  { cat "${tmp}/consumer.log"; echo "FAIL: building against blockswap::blockswap"; exit 1; }
out=$(LD_LIBRARY_PATH="${prefix}/lib" "${tmp}/consumer/consumer" "${tmp}/no-daemon.sock")
echo "${out}"
# The version the installed header promises (BS_ABI_VERSION), so that a bump needs no edit here.
abi=$(sed -n 's/^#define BS_ABI_VERSION \([0-9]*\)u$/\1/p' "${prefix}/include/blockswap/blockswap.h")
[[ -n ${abi} ]] || { echo "FAIL: no BS_ABI_VERSION in the installed blockswap.h"; exit 1; }
grep -q "^abi ${abi}$" <<<"${out}" || { echo "FAIL: the consumer did not run (abi ${abi})"; exit 1; }
grep -q "no-daemon.sock" <<<"${out}" || { echo "FAIL: the error does not name the socket"; exit 1; }
echo "ok: find_package(blockswap) consumer built and ran"
