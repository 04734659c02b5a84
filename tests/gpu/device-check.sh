#!/usr/bin/env bash
# The GPU check, in one device call. GPU machines are lent rarely and
# briefly, and lack gRPC, protobuf and Boost, so everything is built and
# packed here first:
#
#   tests/gpu/device-check.sh pack        # here: build configuration A, pack
#                                         # the programs and their libraries
#                                         # into .device/ (git-ignored)
#   tests/gpu/device-check.sh run OUT     # there (carry .device): run every
#                                         # GPU check, logs and a summary in OUT
#
# `run` never stops at the first failure: each check's result is one line of
# OUT/summary.txt ("PASS name", "FAIL name (exit N)"), and it exits non-zero
# when any check failed. Everything the checks print goes to OUT/log.txt
# (a device call brings back at most 8 files), the Admin views to
# OUT/admin.txt, the protocol tests' results to OUT/protocol.xml. It runs:
#   - nvidia-smi, and blockswapd --list-devices --backend=cuda (GPUs by UUID);
#   - the cuda cases of shared_test: the load protocol across two processes
#     on a real GPU (1000 generations through 2 and 4 slots, a slow consumer,
#     a consumer that requests without releasing);
#   - blockswapd --backend=cuda with two blockswap-demo trainers sharing one
#     model (every block checked on the GPU stream before and after its
#     compute), blockswapctl residency/stats during and after, SIGTERM.
#
# BLOCKSWAP_DEVICE_CHECK_BACKEND=host runs the same demos on the host backend,
# to dry-run the script on a machine without a GPU.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack_dir=${root}/.device
programs=(blockswapd blockswapctl blockswap-demo shared_test)

pack() {
  BLOCKSWAP_CONFIGS=A "${root}/tests/run.sh" >/dev/null || {
    echo "device-check: tests/run.sh (configuration A) failed; fix that first" >&2
    exit 1
  }
  rm -rf "${pack_dir}"
  local files=()
  for program in "${programs[@]}"; do files+=("${root}/build/bin/${program}"); done
  "${root}/../shared/device/pack.sh" "${pack_dir}" "${files[@]}"
  # Debug information would not fit the 64 MiB a device call carries.
  strip --strip-debug "${pack_dir}"/bin/* "${pack_dir}"/lib/*
  du -sh "${pack_dir}"
}

run() {
  local out=${1:?usage: device-check.sh run OUT}
  mkdir -p "${out}"
  # shellcheck source=/dev/null
  . "${pack_dir}/env.sh"
  local summary=${out}/summary.txt failed=0
  : >"${summary}"
  : >"${out}/log.txt"
  check() {  # check NAME COMMAND...: runs it, its output into OUT/log.txt
    local name=$1
    shift
    echo "===== ${name}: $*" >>"${out}/log.txt"
    "$@" >>"${out}/log.txt" 2>&1
    local code=$?
    if ((code == 0)); then
      echo "PASS ${name}" >>"${summary}"
    else
      echo "FAIL ${name} (exit ${code})" >>"${summary}"
      failed=1
    fi
  }

  check nvidia-smi nvidia-smi -L
  check list-devices blockswapd --list-devices --backend=cuda
  check protocol protocol_on_cuda "${out}"
  check demos demos_on_cuda "${out}"
  cat "${summary}"
  return "${failed}"
}

# The cuda cases of shared_test. They skip without a usable GPU, which on
# the GPU machine is a failure of this check.
protocol_on_cuda() {
  local out=$1
  shared_test --gtest_filter='*cuda*' --gtest_output="xml:${out}/protocol.xml" || return 1
  if grep -q 'result="skipped"' "${out}/protocol.xml"; then
    echo "device-check: cuda cases skipped: no usable GPU" >&2
    return 1
  fi
}

# Two demos sharing one model on a cuda daemon; 64 MiB blocks so that copies
# take measurable time on the GPU.
demos_on_cuda() {
  local out=$1 dir
  dir=$(mktemp -d /tmp/blockswap-gpu.XXXXXX)
  local socket=${dir}/blockswapd.sock shm=/dev/shm/blockswap-gpu-$$
  blockswapd --backend="${BLOCKSWAP_DEVICE_CHECK_BACKEND:-cuda}" --socket="${socket}" --shm-prefix="${shm}" \
    >"${dir}/blockswapd.log" 2>&1 &
  local daemon=$!
  for _ in $(seq 100); do [[ -S ${socket} ]] && break; sleep 0.1; done
  local args=(--socket "${socket}" --blocks 8 --swap 4 --ring 2 --block-bytes 67108864
              --steps 5 --compute-us 2000)
  blockswap-demo "${args[@]}" >"${dir}/demo1.log" 2>&1 &
  local demo1=$!
  blockswap-demo "${args[@]}" >"${dir}/demo2.log" 2>&1 &
  local demo2=$!
  sleep 2
  {
    echo "===== during the demos"
    blockswapctl --socket "${socket}" residency
    blockswapctl --socket "${socket}" stats
  } >>"${out}/admin.txt" 2>&1
  local code=0
  wait "${demo1}" || code=1
  wait "${demo2}" || code=1
  {
    echo "===== after the demos"
    blockswapctl --socket "${socket}" stats
    blockswapctl --socket "${socket}" models
  } >>"${out}/admin.txt" 2>&1
  kill -TERM "${daemon}"
  wait "${daemon}" || code=1
  for log in blockswapd demo1 demo2; do
    echo "----- ${log}"
    cat "${dir}/${log}.log"
  done
  rm -rf "${dir}" "${shm}"
  return "${code}"
}

case ${1:-} in
  pack) pack ;;
  run) shift; run "$@" ;;
  *) echo "usage: tests/gpu/device-check.sh pack | run OUT" >&2; exit 2 ;;
esac
