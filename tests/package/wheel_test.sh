#!/usr/bin/env bash
# The wheel as a trainer gets it: built by deploy/build-wheel.sh from the
# release build, installed into a new virtual environment that sees neither
# the build tree nor the repository's client/python, then
#   - auditwheel show: a manylinux tag, the one in the file name;
#   - no CUDA runtime or driver library inside (no file, no DT_NEEDED);
#   - blockswapctl and blockswapd --version from the venv's PATH: the build's
#     version, and the cuda backend;
#   - blockswap.__version__ and pip's metadata: the same version;
#   - the README's PyTorch example (its first python block, run as written)
#     from another directory with no daemon configured: the wheel's private
#     blockswapd starts, the example trains, Admin Status from that daemon
#     says the version, and the daemon exits after its idle time.
# torch: the new venv gets it through a .pth naming the site-packages of the
# project's environment (deploy/install-deps.sh's, which has no blockswap),
# so this runs offline; the test checks blockswap comes from the new venv.
#
#   tests/package/wheel_test.sh BUILD_DIR WORK_DIR
set -euo pipefail

[[ $# -eq 2 ]] || { echo "usage: $0 BUILD_DIR WORK_DIR" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(realpath "$1")
work=$2
rm -rf "${work}"
mkdir -p "${work}"
work=$(realpath "${work}")
project_venv=${BLOCKSWAP_VENV:-${HOME}/.cache/blockswap/venv}
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "${build}/CMakeCache.txt")

failures=0
fail() {
  echo "wheel_test: FAILED: $*" >&2
  failures=$((failures + 1))
}
check_eq() {  # WHAT EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then echo "wheel_test: ok: $1 = $3"; else fail "$1 is '$3', expected '$2'"; fi
}

wheel=$("${root}/deploy/build-wheel.sh" "${build}" "${work}/dist" | tail -n 1)
name=$(basename "${wheel}")
echo "wheel_test: built ${name}, $(du -k "${wheel}" | cut -f1) KiB"
[[ ${name} =~ ^blockswap-${version//./\\.}-py3-none-manylinux_2_([0-9]+)_x86_64\.whl$ ]] ||
  fail "wheel name ${name} is not blockswap-${version}-py3-none-manylinux_2_N_x86_64.whl"

show=$("${project_venv}/bin/python" -m auditwheel show "${wheel}")
echo "${show}" | sed 's/^/  auditwheel: /' | head -n 12
tag=${name#blockswap-"${version}"-py3-none-}
tag=${tag%.whl}
grep -qF "consistent with the following platform tag: \"${tag}\"" <<<"$(tr -s ' \n' ' ' <<<"${show}")" ||
  fail "auditwheel show does not find the wheel consistent with its tag ${tag}"

# Nothing of CUDA inside: the driver is the machine's, loaded by dlopen.
unpacked=${work}/unpacked
"${project_venv}/bin/python" -m zipfile -e "${wheel}" "${unpacked}"
cuda_files=$(find "${unpacked}" -name 'libcuda*' -o -name 'libcudart*' -o -name 'libnvidia*')
[[ -z ${cuda_files} ]] || fail "the wheel holds CUDA libraries: ${cuda_files}"
elves=0
while IFS= read -r -d '' file; do
  head -c 4 "${file}" | grep -q ELF || continue
  elves=$((elves + 1))
  needed=$(readelf -d "${file}" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  if grep -E '^lib(cuda|cudart|nvidia)' <<<"${needed}"; then
    fail "${file#"${unpacked}"/} needs a CUDA library"
  fi
done < <(find "${unpacked}" -type f -print0)
echo "wheel_test: ${elves} ELF files in the wheel, none needs a CUDA library"

venv=${work}/venv
python3 -m venv "${venv}"
site=$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
project_site=$("${project_venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if "${project_venv}/bin/python" -c 'import blockswap' 2>/dev/null; then
  fail "${project_venv} has a blockswap of its own: the test could not tell which one ran"
fi
echo "${project_site}" >"${site}/blockswap_test_torch.pth"
"${venv}/bin/python" -m pip install --quiet --no-index --no-deps "${wheel}"

check_eq "blockswapctl --version (venv PATH)" "blockswapctl ${version}" \
  "$(PATH=${venv}/bin:/usr/bin:/bin blockswapctl --version | head -n 1)"
check_eq "blockswapd --version's backends" "backends: host, cuda" \
  "$(PATH=${venv}/bin:/usr/bin:/bin blockswapd --version | tail -n 1)"
check_eq "the blockswap imported (nothing of client/ or the build's package on sys.path)" \
  "${site}/blockswap/__init__.py" "$(cd "${work}" && "${venv}/bin/python" -c '
import sys, blockswap
seen = [p for p in sys.path if p.startswith(tuple(sys.argv[1:]))]
print(seen if seen else blockswap.__file__)
' "${root}/client" "${build}/python" "${build}/lib")"
check_eq "blockswap.__version__" "${version}" \
  "$(cd "${work}" && "${venv}/bin/python" -c 'import blockswap; print(blockswap.__version__)')"
check_eq "pip's metadata version" "${version}" \
  "$("${venv}/bin/python" -c 'import importlib.metadata as m; print(m.version("blockswap"))')"

# The README's PyTorch example, from a directory of its own, nothing configured.
run_dir=${work}/run
mkdir -p "${run_dir}"
awk '/^## Use from a PyTorch trainer/ { inside = 1 }
     inside && /^```python$/ { code = 1; next }
     code && /^```$/ { exit }
     code { print }' "${root}/README.md" >"${run_dir}/example.py"
[[ -s ${run_dir}/example.py ]] || fail "no python block in README.md's 'Use from a PyTorch trainer'"
if [[ -S /run/blockswap/blockswapd.sock ]]; then
  fail "a system blockswapd socket exists at /run/blockswap/blockswapd.sock: no private daemon would start"
fi
private_dir=/dev/shm/blockswap-wheel-test-$$
idle_exit=15
daemon_pid=
cleanup() {
  if [[ -n ${daemon_pid} ]] && kill -0 "${daemon_pid}" 2>/dev/null; then kill "${daemon_pid}"; fi
  rm -rf "${private_dir}"
}
trap cleanup EXIT
started=${SECONDS}
if ! (cd "${run_dir}" && env -i HOME="${HOME}" PATH="${venv}/bin:/usr/bin:/bin" \
      BLOCKSWAP_AUTOSTART_DIR="${private_dir}" BLOCKSWAP_AUTOSTART_IDLE_EXIT=${idle_exit} \
      python example.py >"${run_dir}/stdout" 2>"${run_dir}/stderr"); then
  fail "the README's example failed:"
  cat "${run_dir}/stderr" >&2
fi
echo "wheel_test: the README's example ran in $((SECONDS - started)) s:"
sed 's/^/  /' "${run_dir}/stdout" "${run_dir}/stderr"
[[ $(grep -c '^step [0-9]: loss ' "${run_dir}/stdout") -eq 3 ]] || fail "the example did not print three steps"
daemon_pid=$(sed -n 's/.*started a private blockswapd (pid \([0-9]*\)).*/\1/p' "${run_dir}/stderr")
if [[ -z ${daemon_pid} ]]; then
  fail "no private blockswapd was started (stderr above)"
else
  check_eq "the private daemon's binary" "${site}/blockswap/_lib/blockswapd" \
    "$(readlink -f "/proc/${daemon_pid}/exe" || echo gone)"
  status_version=$(cd "${run_dir}" && env -i HOME="${HOME}" PATH="${venv}/bin:/usr/bin:/bin" \
    BLOCKSWAP_AUTOSTART_DIR="${private_dir}" blockswapctl --json status |
    "${venv}/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["version"])') ||
    status_version="(blockswapctl status failed)"
  check_eq "the private daemon's Admin Status version" "${version}" "${status_version}"
  waited=0
  while kill -0 "${daemon_pid}" 2>/dev/null && ((waited < 10 * (idle_exit + 10))); do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "${daemon_pid}" 2>/dev/null; then
    fail "the private daemon (pid ${daemon_pid}) still runs $((idle_exit + 10)) s after the example"
  else
    echo "wheel_test: ok: the private daemon exited $((waited / 10)) s after the example (idle exit ${idle_exit} s)"
  fi
fi

if ((failures)); then
  echo "wheel_test: ${failures} check(s) failed" >&2
  exit 1
fi
echo "wheel_test: passed (${name}, $(du -k "${wheel}" | cut -f1) KiB)"
