#!/usr/bin/env bash
# The GPU check, in one device call (docs/gpu.md). GPU machines are lent
# rarely and briefly, and lack gRPC, protobuf and Boost, so every program is
# built and packed here first:
#
#   tests/gpu/device-check.sh pack        # here: build configuration A, pack
#                                         # the programs and their libraries
#                                         # into .device/ (git-ignored)
#   tests/gpu/device-check.sh run OUT     # there (carry .device): every GPU
#                                         # check, logs and a summary in OUT
#
# `run` takes at most ~4 minutes. It starts with a probe (≤ 30 s: the driver,
# the bundled libraries loading, CUDA IPC between two processes) and stops
# there, saying what failed, when the basics do not work. Then it runs every
# check whatever the others did: each check is one line of OUT/summary.txt
# ("PASS name  12s", "FAIL name (exit N)  12s"), and `run` exits non-zero when
# any failed. Files in OUT (a device call brings back at most 8):
#   summary.txt  one line per check
#   log.txt      everything the checks printed
#   gpu.xml      the GPU tests (tests/gpu/gpu_test.cc), GoogleTest XML
#   protocol.xml the load protocol's cuda cases (shared_protocol_test), XML
#   bench.txt    blockswap-bench-h2d: P1, P4-GPU, the daemon's own memory
#   admin.txt    blockswapctl views during and after two demos
#   torch-build.log  building client/torch there, against its torch
# It also builds the LibTorch layer as a project of its own (client/torch)
# against the machine's torch and runs two LibTorch demos on the GPU, and
# runs the Python package (client/python) in the machine's own torch
# (tests/gpu/python_on_gpu.py).
#
# BLOCKSWAP_DEVICE_CHECK_BACKEND=host runs everything that can on the host
# backend: a dry run of the script on a machine without a GPU.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack_dir=${root}/.device
programs=(blockswapd blockswapctl blockswap-demo shared_protocol_test gpu_test blockswap-bench-h2d
          libblockswap.so.1)
backend=${BLOCKSWAP_DEVICE_CHECK_BACKEND:-cuda}
# The GPU machine's Python with its torch (the dry run passes the venv's).
python=${BLOCKSWAP_DEVICE_CHECK_PYTHON:-python3}

pack() {
  BLOCKSWAP_CONFIGS=A "${root}/tests/run.sh" >/dev/null || {
    echo "device-check: tests/run.sh (configuration A) failed; fix that first" >&2
    exit 1
  }
  rm -rf "${pack_dir}"
  local files=()
  for program in "${programs[@]}"; do
    if [[ ${program} == *.so* ]]; then
      files+=("${root}/build/lib/${program}")
    else
      files+=("${root}/build/bin/${program}")
    fi
  done
  "${root}/../shared/device/pack.sh" "${pack_dir}" "${files[@]}"
  # Debug information would not fit the 64 MiB a device call carries.
  strip --strip-debug "${pack_dir}"/bin/* "${pack_dir}"/lib/*
  # CLI11 (header-only) for the LibTorch demo built there.
  mkdir -p "${pack_dir}/include"
  cp -r /usr/include/CLI "${pack_dir}/include/"
  du -sh "${pack_dir}"
}

run() {
  local out=${1:?usage: device-check.sh run OUT}
  mkdir -p "${out}"
  # shellcheck source=/dev/null
  . "${pack_dir}/env.sh"
  summary=${out}/summary.txt
  log=${out}/log.txt
  failed=0
  : >"${summary}"
  : >"${log}"

  # --- probe: stop early when the basics fail -----------------------------
  check probe.driver probe_driver
  check probe.libraries probe_libraries
  check probe.cuda-ipc probe_cuda_ipc "${out}"
  if ((failed)); then
    echo "STOP the probe failed: the checks below were not run (see log.txt)" >>"${summary}"
    cat "${summary}"
    return 1
  fi

  # --- the checks -----------------------------------------------------------
  # The LibTorch layer is built here, against this machine's torch, while
  # the first checks run.
  torch_build=/tmp/blockswap-torch-build
  build_torch_layer >"${out}/torch-build.log" 2>&1 &
  local torch_builder=$!
  check list-devices blockswapd --list-devices --backend="${backend}"
  check protocol protocol_on_gpu "${out}"
  check gpu-tests gpu_tests "${out}"
  check compute-sanitizer sanitizer_on_gpu
  check demos demos_on_gpu "${out}"
  check python python_on_gpu
  check torch-build wait_for_torch_build "${torch_builder}" "${out}"
  check torch-demos torch_demos_on_gpu
  check bench-h2d bench_h2d "${out}"
  cat "${summary}"
  return "${failed}"
}

# check NAME COMMAND...: runs it, its output into log.txt, a line into
# summary.txt.
check() {
  local name=$1 start=${SECONDS}
  shift
  echo "===== ${name}: $*" >>"${log}"
  "$@" >>"${log}" 2>&1
  local code=$?
  local took=$((SECONDS - start))
  if ((code == 0)); then
    echo "PASS ${name}  ${took}s" >>"${summary}"
  else
    echo "FAIL ${name} (exit ${code})  ${took}s" >>"${summary}"
    failed=1
  fi
}

probe_driver() {
  if [[ ${backend} == host ]]; then
    echo "dry run: no driver to probe"
    return 0
  fi
  timeout 20 nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,compute_mode,mig.mode.current \
    --format=csv
}

# Every bundled program finds every library it needs.
probe_libraries() {
  local missing
  missing=$(for program in "${programs[@]}"; do ldd "${pack_dir}/bin/${program}"; done |
    grep 'not found' | sort -u)
  if [[ -n ${missing} ]]; then
    echo "missing libraries: ${missing}"
    return 1
  fi
  echo "all ${#programs[@]} programs resolve their libraries"
}

# The load protocol through CUDA IPC between two processes, 2 slots: the
# smallest thing that proves memory and event handles cross processes.
probe_cuda_ipc() {
  local out=$1
  if [[ ${backend} == host ]]; then
    timeout 30 shared_protocol_test --gtest_filter='*Streaming*host_2slots'
    return
  fi
  timeout 30 shared_protocol_test --gtest_filter='*Streaming*cuda_2*' --gtest_output="xml:${out}/probe.xml" ||
    return 1
  if grep -q 'result="skipped"' "${out}/probe.xml"; then
    echo "device-check: the cuda case skipped: this process sees no usable GPU"
    return 1
  fi
  rm -f "${out}/probe.xml"
}

# The cuda cases of shared_protocol_test (they skip without a usable GPU, which here
# is a failure).
protocol_on_gpu() {
  local out=$1
  [[ ${backend} == host ]] && { echo "dry run: cuda-only"; return 0; }
  timeout 120 shared_protocol_test --gtest_filter='*cuda*' --gtest_output="xml:${out}/protocol.xml" || return 1
  ! grep -q 'result="skipped"' "${out}/protocol.xml"
}

# tests/gpu/gpu_test.cc: byte-exact streaming with kernels, a slow consumer,
# every protocol mutation, a client killed during a kernel, a daemon killed
# under a client.
gpu_tests() {
  local out=$1
  BLOCKSWAP_GPU_TEST_BACKEND=${backend} timeout 150 gpu_test --gtest_output="xml:${out}/gpu.xml" ||
    return 1
  ! grep -q 'result="skipped"' "${out}/gpu.xml"
}

# compute-sanitizer (memcheck) over the slow-consumer test: the daemon and
# the client processes, each kernel and copy checked.
sanitizer_on_gpu() {
  [[ ${backend} == host ]] && { echo "dry run: cuda-only"; return 0; }
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [[ ! -x ${sanitizer} ]]; then
    echo "compute-sanitizer not found on this machine: not run"
    return 0
  fi
  timeout 90 "${sanitizer}" --tool memcheck --target-processes all --error-exitcode 99 \
    gpu_test --gtest_filter='GpuTest.SlowKernelConsumerNeverReadsAStaleSlot'
}

bench_h2d() {
  local out=$1
  local args=(--backend="${backend}")
  [[ ${backend} == host ]] && args+=(--sizes-mib=1,64 --clients=2 --gigabytes=0.2)
  [[ ${backend} == cuda ]] && args+=(--gigabytes=8)
  timeout 240 blockswap-bench-h2d "${args[@]}" 2>&1 | grep -v '^blockswapd: ' | tee "${out}/bench.txt"
  return "${PIPESTATUS[0]}"
}

# start_daemon DIR: a blockswapd on DIR/blockswapd.sock, masters in
# /dev/shm/blockswap-gpu-<pid>, its log in DIR/blockswapd.log; sets
# `daemon` (its pid), `socket` and `shm`.
start_daemon() {
  local dir=$1
  socket=${dir}/blockswapd.sock
  shm=/dev/shm/blockswap-gpu-$$-${RANDOM}
  blockswapd --config=/dev/null --backend="${backend}" --socket="${socket}" --shm-prefix="${shm}" \
    >"${dir}/blockswapd.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [[ -S ${socket} ]] && break; sleep 0.1; done
}

# client/torch as a project of its own: the layer and its demo over the
# bundled libblockswap.so.1, against the torch of the machine's Python.
build_torch_layer() {
  local prefix
  prefix=$("${python}" -c 'import torch; print(torch.utils.cmake_prefix_path)') || return 1
  rm -rf "${torch_build}"
  cmake -S "${root}/client/torch" -B "${torch_build}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="${prefix}" -DBLOCKSWAP_LIBRARY="${pack_dir}/bin/libblockswap.so.1" \
    -DBLOCKSWAP_CLI11_INCLUDE="${pack_dir}/include" &&
    cmake --build "${torch_build}" -j "$(nproc)"
}

wait_for_torch_build() {
  local builder=$1 out=$2 code=0
  wait "${builder}" || code=1
  tail -n 20 "${out}/torch-build.log"
  return "${code}"
}

# Two LibTorch trainers (blockswap-torch-demo: LoRA training, ring-slot
# tensors consumed by real kernels, step 1's loss checked against the model
# kept whole) sharing one model on the daemon.
torch_demos_on_gpu() {
  [[ -x ${torch_build}/bin/blockswap-torch-demo ]] || { echo "no torch demo built"; return 1; }
  local dir code=0
  dir=$(mktemp -d /tmp/blockswap-gpu.XXXXXX)
  start_daemon "${dir}"
  local device=cuda
  [[ ${backend} == host ]] && device=cpu
  local args=(--socket "${socket}" --device "${device}" --blocks 12 --swap 6 --ring 2 --steps 5)
  timeout 120 "${torch_build}/bin/blockswap-torch-demo" "${args[@]}" --name torch1 \
    >"${dir}/torch1.log" 2>&1 &
  local first=$!
  timeout 120 "${torch_build}/bin/blockswap-torch-demo" "${args[@]}" --name torch2 \
    >"${dir}/torch2.log" 2>&1 &
  local second=$!
  wait "${first}" || code=1
  wait "${second}" || code=1
  blockswapctl --socket "${socket}" models || code=1
  kill -TERM "${daemon}"
  wait "${daemon}" || code=1
  local name
  for name in blockswapd torch1 torch2; do
    echo "----- ${name}"
    cat "${dir}/${name}.log"
  done
  rm -rf "${dir}" "${shm}"
  return "${code}"
}

# The Python package (the repository's client/python over the bundled
# libblockswap.so.1) in the GPU machine's own torch: training and inference
# through a cuda daemon give the resident results, weights in ring slots.
python_on_gpu() {
  local dir code=0
  dir=$(mktemp -d /tmp/blockswap-gpu.XXXXXX)
  start_daemon "${dir}"
  local device=cuda
  [[ ${backend} == host ]] && device=cpu
  BLOCKSWAP_LIBRARY=${pack_dir}/bin/libblockswap.so.1 PYTHONPATH=${root}/client/python \
    timeout 120 "${python}" "${root}/tests/gpu/python_on_gpu.py" --socket "${socket}" \
    --device "${device}" || code=1
  kill -TERM "${daemon}"
  wait "${daemon}" || code=1
  echo "----- blockswapd"
  cat "${dir}/blockswapd.log"
  rm -rf "${dir}" "${shm}"
  return "${code}"
}

# Two demos sharing one model on the daemon; 64 MiB blocks so that copies
# take measurable time on the GPU.
demos_on_gpu() {
  local out=$1 dir
  dir=$(mktemp -d /tmp/blockswap-gpu.XXXXXX)
  start_daemon "${dir}"
  local args=(--socket "${socket}" --blocks 8 --swap 4 --ring 2 --block-bytes 67108864
              --steps 5 --compute-us 2000)
  timeout 90 blockswap-demo "${args[@]}" >"${dir}/demo1.log" 2>&1 &
  local demo1=$!
  timeout 90 blockswap-demo "${args[@]}" >"${dir}/demo2.log" 2>&1 &
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
  local name
  for name in blockswapd demo1 demo2; do
    echo "----- ${name}"
    cat "${dir}/${name}.log"
  done
  rm -rf "${dir}" "${shm}"
  return "${code}"
}

case ${1:-} in
  pack) pack ;;
  run) shift; run "$@" ;;
  *) echo "usage: tests/gpu/device-check.sh pack | run OUT" >&2; exit 2 ;;
esac
