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
# Trainers of other users reach every GPU object as a descriptor over the
# socket, so no file of the daemon's needs a group-open umask: the unit sets
# none. It runs with the socket's group, since without CAP_CHOWN the daemon
# can give the socket only to a group of its own.
if grep -q '^UMask=' "${unit}"; then
  echo "FAIL: the unit sets a UMask, which nothing needs:"; grep UMask "${unit}"; exit 1
fi
unit_group=$(sed -n 's/^Group=//p' "${unit}")
socket_group=$(sed -n 's/^socket_group = "\(.*\)"$/\1/p' "${config}")
[[ -n ${unit_group} && ${unit_group} == "${socket_group}" ]] ||
  { echo "FAIL: the unit's Group (${unit_group}) is not the socket's (${socket_group})"; exit 1; }
echo "ok: no UMask, and the unit's Group=${unit_group} is the socket's"
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
# What --man=no leaves out: every Documentation= of the unit is in the install.
for doc in $(sed -n 's/^Documentation=//p' "${unit}"); do
  case ${doc} in
    file://*) [[ -f ${doc#file://} ]] || { echo "FAIL: the unit's ${doc} is not installed"; exit 1; } ;;
    man:*)
      page=${doc#man:}  # name(section)
      name=${page%%(*}; section=${page#*(}; section=${section%)}
      [[ -f ${prefix}/share/man/man${section}/${name}.${section} ]] ||
        { echo "FAIL: the unit's ${doc} is not installed"; exit 1; } ;;
    *) echo "FAIL: the unit's Documentation=${doc} is neither file:// nor man:"; exit 1 ;;
  esac
done
echo "ok: the unit's Documentation= is installed"

# The man pages, rendered as man would, with every subcommand of blockswapctl.
for page in man8/blockswapd.8 man1/blockswapctl.1 man1/blockswap-demo.1; do
  [[ -f ${prefix}/share/man/${page} ]] || { echo "FAIL: ${page} was not installed"; exit 1; }
done
if command -v man >/dev/null; then
  rendered=$(MANWIDTH=100 man -l "${prefix}/share/man/man1/blockswapctl.1" 2>&1)
  for command in $("${prefix}/bin/blockswapctl" --help | sed -n '/^Subcommands:/,$s/^  \([a-z][a-z-]*\) .*/\1/p'); do
    [[ ${command} == help ]] && continue
    grep -q "Usage: blockswapctl ${command} " <<<"${rendered}" ||
      { echo "FAIL: blockswapctl(1) lacks the subcommand ${command}"; exit 1; }
  done
  grep -q -- "--check-config" <<<"$(man -l "${prefix}/share/man/man8/blockswapd.8" 2>&1)" ||
    { echo "FAIL: blockswapd(8) lacks --check-config"; exit 1; }
  echo "ok: the man pages render with every option and subcommand"
else
  echo "SKIP (rendering the man pages): man is not installed"
fi

# No header without its library: the LibTorch layer is not installed.
[[ ! -e ${prefix}/include/blockswap/torch.h ]] ||
  { echo "FAIL: blockswap/torch.h is installed without libblockswap_torch"; exit 1; }
[[ -x ${prefix}/bin/blockswap-demo ]] || { echo "FAIL: blockswap-demo was not installed"; exit 1; }

for binary in blockswapd blockswapctl; do
  "${prefix}/bin/${binary}" --version >"${tmp}/version.txt" ||
    { echo "FAIL: installed ${binary} --version exited $?"; exit 1; }
  grep -q "^${binary} [0-9]" "${tmp}/version.txt" && grep -q "^C ABI version: " "${tmp}/version.txt" ||
    { echo "FAIL: installed ${binary} --version:"; cat "${tmp}/version.txt"; exit 1; }
done
echo "ok: the installed binaries answer --version"

"${prefix}/bin/blockswapd" --config "${config}" --check-config --no-preflight >"${tmp}/effective.toml"
grep -q '^socket_group = "blockswap"$' "${tmp}/effective.toml" ||
  { echo "FAIL: --check-config of the installed config:"; cat "${tmp}/effective.toml"; exit 1; }
echo "ok: the installed config passes --check-config --no-preflight"
# On this machine as it is: install.sh (which creates the group) did not run here.
if ! getent group blockswap >/dev/null; then
  if "${prefix}/bin/blockswapd" --config "${config}" --check-config >/dev/null 2>"${tmp}/preflight.txt"; then
    echo "FAIL: --check-config passed without the socket group blockswap"; exit 1
  fi
  grep -q "error: socket group 'blockswap' does not exist" "${tmp}/preflight.txt" ||
    { echo "FAIL: --check-config did not name the missing group:"; cat "${tmp}/preflight.txt"; exit 1; }
  echo "ok: --check-config names the missing socket group"
fi

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

# deploy/install.sh with no --build-dir builds outside the checkout and removes
# its build: a cmake on PATH that records its arguments stands in for the build.
fake=${tmp}/fake-bin
mkdir -p "${fake}"
cat >"${fake}/cmake" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"${FAKE_CMAKE_LOG}"
case $1 in -S) mkdir -p "$4" && touch "$4/configured" ;; esac
EOF
chmod +x "${fake}/cmake"
before=$(git -C "${source}" status --porcelain --ignored 2>/dev/null | sort)
FAKE_CMAKE_LOG=${tmp}/cmake.log PATH=${fake}:${PATH} \
  "${source}/deploy/install.sh" --destdir "${tmp}/stage2" >"${tmp}/stage2.log"
used=$(sed -n 's/^-S [^ ]* -B \([^ ]*\) .*/\1/p' "${tmp}/cmake.log")
[[ -n ${used} ]] || { echo "FAIL: install.sh did not configure a build:"; cat "${tmp}/cmake.log"; exit 1; }
case ${used} in "${source}"/*) echo "FAIL: install.sh built inside the checkout (${used})"; exit 1 ;; esac
[[ ! -e ${used} ]] || { echo "FAIL: install.sh left its build ${used} behind"; exit 1; }
grep -q "^--build ${used}\$" "${tmp}/cmake.log" && grep -q "^--install ${used} --prefix /usr/local\$" "${tmp}/cmake.log" ||
  { echo "FAIL: install.sh did not build and install ${used}:"; cat "${tmp}/cmake.log"; exit 1; }
after=$(git -C "${source}" status --porcelain --ignored 2>/dev/null | sort)
[[ ${before} == "${after}" ]] || { echo "FAIL: install.sh changed the checkout"; diff <(echo "${before}") <(echo "${after}"); exit 1; }
echo "ok: deploy/install.sh builds outside the checkout and cleans up"

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
