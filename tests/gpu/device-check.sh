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
# `run` has a core (the probe with /dev/shm's size and the driver, toolkit
# and torch versions; the protocol cases; the two-client byte-exact run; daemon
# death; P1 and the P4 rows) whose limits add up to 4 minutes from a cold
# start, then the rest (the other GPU tests, compute-sanitizer as information
# only, the demos, Python, the LibTorch build and demos). It stops after the
# probe, saying what failed, when the basics do not work. Every check runs
# under its own limit and writes its line to OUT/summary.txt when it ends
# ("PASS name  12s", "FAIL name (exit N)  12s", "INFO ..."), so a run cut
# short still returns what it did (a TERM adds a "CUT name" line); `run`
# exits non-zero when any check failed. docs/gpu.md explains every line.
# Files in OUT (a device call brings back at most 8):
#   summary.txt  one line per check, per part and in total
#   log.txt      everything the checks printed
#   gpu.xml      gpu_test's three runs (two-clients, daemon-death, the rest),
#                GoogleTest XML one after the other
#   protocol.xml the load protocol's cuda cases (shared_protocol_test), XML
#   bench.txt    blockswap-bench-h2d: P1, P4-GPU, the daemon's own memory;
#                then blockswap-bench-staged: P2-staged (the CUDA row)
#   admin.txt    blockswapctl views during and after two demos
#   torch-build.log  building client/torch there, against its torch
#
# BLOCKSWAP_DEVICE_CHECK_BACKEND=host runs everything that can on the host
# backend: a dry run of the script on a machine without a GPU.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack_dir=${root}/.device
programs=(blockswapd blockswapctl blockswap-demo shared_protocol_test gpu_test blockswap-bench-h2d
          blockswap-bench-staged libblockswap.so.1)
backend=${BLOCKSWAP_DEVICE_CHECK_BACKEND:-cuda}
# The GPU machine's Python with its torch (the dry run passes the venv's).
python=${BLOCKSWAP_DEVICE_CHECK_PYTHON:-python3}
# The user the two-client case's clients run as, beside a daemon of root, as
# trainers beside the system service (CUDA IPC across users): nobody unless
# set; set empty, the daemon's own user. Handed to gpu_test as
# BLOCKSWAP_GPU_TEST_CLIENT_USER.
client_user=${BLOCKSWAP_DEVICE_CHECK_CLIENT_USER-nobody}

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
  part_failed=0
  current=""
  : >"${log}"
  echo "device-check $(date -u +%Y-%m-%dT%H:%M:%SZ) backend=${backend} host=$(hostname)" >"${summary}"
  # A run cut short (the device call's limit) still says how far it got.
  trap 'cut_short' TERM INT
  set -m

  # --- core: ≤ 4 minutes from a cold start ---------------------------------
  part core
  check probe.environment 30 probe_environment "${out}"
  check probe.libraries 10 probe_libraries
  check probe.cuda-ipc 30 probe_cuda_ipc "${out}"
  if ((part_failed)); then
    echo "STOP the probe failed: the checks below were not run (see log.txt)" >>"${summary}"
    cat "${summary}"
    return 1
  fi
  # The LibTorch layer builds in the background meanwhile (it needs no GPU).
  torch_build=/tmp/blockswap-torch-build
  rm -f "${torch_build}.rc"
  { build_torch_layer; echo $? >"${torch_build}.rc"; } >"${out}/torch-build.log" 2>&1 &
  torch_builder=$!
  torch_build_start=${SECONDS}
  check protocol 60 protocol_on_gpu "${out}"
  check two-clients 45 gpu_tests "${out}" two-clients '*GpuStreamingTest.*'
  check daemon-death 30 gpu_tests "${out}" daemon-death 'GpuTest.DaemonKilledUnderAClient*'
  check bench-h2d 110 bench_h2d "${out}"
  end_part

  # --- the rest: each under its own limit -----------------------------------
  part rest
  check list-devices 20 blockswapd --list-devices --backend="${backend}"
  check gpu-tests 120 gpu_tests "${out}" gpu-rest \
    '-*GpuStreamingTest.*:GpuTest.DaemonKilledUnderAClient*'
  check bench-staged 60 bench_staged "${out}"
  info compute-sanitizer 90 sanitizer_on_gpu
  check demos 90 demos_on_gpu "${out}"
  check python 120 python_on_gpu
  check torch-build $((torch_build_limit + 10)) wait_for_torch_build "${out}"
  check torch-demos 120 torch_demos_on_gpu
  end_part
  local verdict=ok
  ((failed)) && verdict=FAIL
  echo "TOTAL ${verdict}  $((SECONDS - run_start))s" >>"${summary}"
  set +m
  trap - TERM INT
  cat "${summary}"
  return "${failed}"
}

# The time limits: each check runs under its own (run_check), so that a hang
# costs one line, not the run.
torch_build_limit=300
run_start=${SECONDS}
code=0  # the checks' functions keep theirs local; a stray reference must not end the run

# part NAME: a header line; end_part: "PART name ok|FAIL  Ns".
part() {
  part_name=$1
  part_start=${SECONDS}
  part_failed=0
  echo "----- ${part_name}" >>"${summary}"
}
end_part() {
  local verdict=ok
  ((part_failed)) && verdict=FAIL
  echo "PART ${part_name} ${verdict}  $((SECONDS - part_start))s" >>"${summary}"
}

# check NAME LIMIT COMMAND...: runs it for at most LIMIT seconds, its output into
# log.txt, a line into summary.txt as soon as it ends. In the background
# with `wait`, so that a TERM reaches the trap at once.
check() {
  run_check 0 "$@"
}
# info NAME LIMIT COMMAND...: the same, but a failure is information only
# ("INFO name (exit N)"), never a failure of the run.
info() {
  run_check 1 "$@"
}
run_check() {
  local informational=$1 name=$2 limit=$3 start=${SECONDS}
  shift 3
  current=${name}
  current_start=${start}
  echo "===== ${name} (limit ${limit}s): $*" >>"${log}"
  # Job control is on (run): the check and its watchdog each get a process
  # group, so that a check over its limit goes with all its children.
  "$@" >>"${log}" 2>&1 &
  current_pid=$!
  (
    sleep "${limit}"
    echo "===== ${name}: over its ${limit}s limit, stopped" >>"${log}"
    kill -TERM -- "-${current_pid}" 2>/dev/null
    sleep 5
    kill -KILL -- "-${current_pid}" 2>/dev/null
  ) &
  local watchdog=$!
  wait "${current_pid}"
  local code=$?
  kill -- "-${watchdog}" 2>/dev/null
  wait "${watchdog}" 2>/dev/null
  current=""
  local took=$((SECONDS - start)) note=""
  ((code != 0 && took >= limit)) && note=", over its ${limit}s limit"
  if ((code == 0)); then
    echo "PASS ${name}  ${took}s" >>"${summary}"
  elif ((informational)); then
    echo "INFO ${name} (exit ${code}${note}; information only)  ${took}s" >>"${summary}"
  else
    echo "FAIL ${name} (exit ${code}${note})  ${took}s" >>"${summary}"
    failed=1
    part_failed=1
  fi
}

cut_short() {
  if [[ -n ${current} ]]; then
    echo "CUT ${current} (running when the run was stopped)  $((SECONDS - current_start))s" \
      >>"${summary}"
    kill -TERM -- "-${current_pid}" 2>/dev/null
  fi
  [[ -n ${torch_builder:-} ]] && kill -TERM -- "-${torch_builder}" 2>/dev/null
  echo "TOTAL cut short  $((SECONDS - run_start))s" >>"${summary}"
  exit 124
}

# What the node is: one ENV line each into the summary (the /dev/shm tmpfs
# holds the masters and, on cuda, the IPC events' files), details in log.txt.
probe_environment() {
  local out=$1 shm driver toolkit torch
  shm=$(df -h --output=size,avail /dev/shm | tail -1 | awk '{print $1 " (" $2 " free)"}')
  if [[ ${backend} == host ]]; then
    driver="none (dry run on the host backend)"
  else
    timeout 20 nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,compute_mode,mig.mode.current \
      --format=csv || return 1
    driver=$(timeout 10 nvidia-smi --query-gpu=driver_version,name --format=csv,noheader | head -1)
  fi
  toolkit="bundled runtime: $(blockswapd --version 2>&1 | grep -io 'cuda[^,;)]*' | head -1)"
  if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
    toolkit+="; nvcc $("$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" --version |
      sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  fi
  torch=$(timeout 20 "${python}" -c \
    'import torch; print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' \
    2>&1 | tail -1)
  {
    echo "ENV /dev/shm ${shm}"
    echo "ENV driver ${driver}"
    echo "ENV toolkit ${toolkit}"
    echo "ENV torch ${torch}"
    if [[ -n ${client_user} ]]; then
      echo "ENV client user ${client_user} (the two-client case's clients run as this user)"
    fi
  } | tee -a "${summary}"
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
    shared_protocol_test --gtest_filter='*Streaming*host_2slots'
    return
  fi
  shared_protocol_test --gtest_filter='*Streaming*cuda_2*' --gtest_output="xml:${out}/probe.xml" ||
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
  shared_protocol_test --gtest_filter='*cuda*' --gtest_output="xml:${out}/protocol.xml" || return 1
  ! grep -q 'result="skipped"' "${out}/protocol.xml"
}

# gpu_tests OUT NAME FILTER: the tests of tests/gpu/gpu_test.cc that FILTER
# selects (byte-exact streaming with kernels, a slow consumer, every protocol
# mutation, a client killed during a kernel, a daemon killed under a
# client); its GoogleTest XML is appended to OUT/gpu.xml (a device call
# brings back at most 8 files); a skip is a failure here.
# BLOCKSWAP_DEVICE_CHECK_CLIENT_USER is handed on as
# BLOCKSWAP_GPU_TEST_CLIENT_USER: the user its clients are to run as.
gpu_tests() {
  local out=$1 name=$2 filter=$3
  local xml=/tmp/blockswap-gpu-${name}-$$.xml code=0
  BLOCKSWAP_GPU_TEST_BACKEND=${backend} BLOCKSWAP_GPU_TEST_CLIENT_USER=${client_user} \
    gpu_test --gtest_filter="${filter}" --gtest_output="xml:${xml}" || code=1
  { echo "<!-- ${name}: gpu_test --gtest_filter='${filter}' -->"; cat "${xml}"; } >>"${out}/gpu.xml"
  grep -q 'result="skipped"' "${xml}" && code=1
  # A filter that matched nothing passes in GoogleTest: not here.
  grep -q '<testsuites tests="0"' "${xml}" && { echo "no test matched ${filter}"; code=1; }
  rm -f "${xml}"
  return "${code}"
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
  "${sanitizer}" --tool memcheck --target-processes all --error-exitcode 99 \
    gpu_test --gtest_filter='GpuTest.SlowKernelConsumerNeverReadsAStaleSlot'
}

bench_h2d() {
  local out=$1
  local args=(--backend="${backend}")
  [[ ${backend} == host ]] && args+=(--sizes-mib=1,64 --clients=2 --gigabytes=0.2)
  # P1 at 4 GB a size, one round of each P4 row: what fits the core's budget.
  [[ ${backend} == cuda ]] && args+=(--gigabytes=4 --repeat=1)
  blockswap-bench-h2d "${args[@]}" 2>&1 | grep -v '^blockswapd: ' | tee "${out}/bench.txt"
  return "${PIPESTATUS[0]}"
}

# P2-staged on the GPU: staged copies (masters left pageable, bounced through
# the staging buffers) ÷ direct copies from pinned masters, 64 MiB blocks,
# two daemons side by side; goal >= 0.8. Appended to bench.txt.
bench_staged() {
  local out=$1
  local args=(--backend="${backend}" --sizes-mib=64 --repeat=2)
  [[ ${backend} == cuda ]] && args+=(--gigabytes=2)
  [[ ${backend} == host ]] && args+=(--gigabytes=0.2)
  blockswap-bench-staged "${args[@]}" 2>&1 | grep -v '^blockswapd: ' | tee -a "${out}/bench.txt"
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

# The background build, given at most torch_build_limit seconds from its
# start; stopped (its whole process group) past that.
wait_for_torch_build() {
  local out=$1 code=0
  while kill -0 "${torch_builder}" 2>/dev/null &&
    ((SECONDS - torch_build_start < torch_build_limit)); do
    sleep 1
  done
  if kill -0 "${torch_builder}" 2>/dev/null; then
    echo "the LibTorch build took over ${torch_build_limit}s: stopped"
    kill -TERM -- "-${torch_builder}" 2>/dev/null
    code=124
  fi
  # (A check runs in a job of its own: the builder is not its child to wait for.)
  [[ $(cat "${torch_build}.rc" 2>/dev/null) == 0 ]] || code=1
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
  # On the GPU the streamed and the resident pass need not run the same
  # kernels: step 1's loss within 1e-4 (relative) of the resident model's.
  # On the CPU the kernels are the same: bit for bit.
  local device=cuda tolerance=1e-4
  [[ ${backend} == host ]] && device=cpu tolerance=0
  local args=(--socket "${socket}" --device "${device}" --blocks 12 --swap 6 --ring 2 --steps 5
              --loss-tolerance "${tolerance}")
  "${torch_build}/bin/blockswap-torch-demo" "${args[@]}" --name torch1 \
    >"${dir}/torch1.log" 2>&1 &
  local first=$!
  "${torch_build}/bin/blockswap-torch-demo" "${args[@]}" --name torch2 \
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
    "${python}" "${root}/tests/gpu/python_on_gpu.py" --socket "${socket}" \
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
