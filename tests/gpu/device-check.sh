#!/usr/bin/env bash
# The GPU check, in two short device calls (docs/gpu.md). GPU machines are
# lent rarely and briefly (a quarter of an hour), and lack gRPC, protobuf and
# Boost, so every program is built and packed here first:
#
#   tests/gpu/device-check.sh pack            # here: build configuration A,
#                                             # pack the programs and their
#                                             # libraries into .device/
#   tests/gpu/device-check.sh run core OUT    # call 1 there (carry .device):
#                                             # decides alone, <= 240 s
#   tests/gpu/device-check.sh run rest OUT    # call 2, only if time is left:
#                                             # <= 290 s
#
# `run core`: the bundled libraries, then blockswap-primitives-probe (one
# line per environment fact, kernel feature and CUDA primitive between
# processes), then the protocol's cuda cases, two clients byte-exact as
# another user, daemon death, and P1/P4 on both copy paths with the
# read-only registration time: nothing of it needs a CUDA runtime (its
# clients compare bytes copied to the host, no kernels), so it runs on the
# oldest driver blockswap supports. It starts the LibTorch layer's build in
# the background for call 2 (it outlives call 1; its state is in
# /tmp/blockswap-device-check). `run rest`: P1/P4-GPU (bench-h2d), the other
# GPU tests, P2-staged, compute-sanitizer, the demos, Python, the LibTorch
# build and its demos (kernels, through the CUDA runtime the tests were
# built with). Every check runs under its own limit and writes its line to
# OUT/summary.txt when it ends ("PASS name  12s", "FAIL name (exit N)  12s",
# "INFO name ..." for timing rows and information, never a failure; "SKIP
# name (reason)"), the probe's own lines in between; a run cut short still
# returns what it did (a TERM adds a "CUT name" line); `run` exits non-zero
# when any check failed. docs/gpu.md explains every line.
# Files in OUT (a device call brings back at most 8):
#   summary.txt  one line per check, per part and in total
#   log.txt      everything the checks printed
#   gpu.xml      gpu_test's runs, GoogleTest XML one after the other
#   protocol.xml the load protocol's cuda cases (shared_protocol_test), XML
#   bench.txt    blockswap-bench-h2d on both copy paths (core); bench-h2d and
#                blockswap-bench-staged (rest)
#   admin.txt    blockswapctl views during and after two demos (rest)
#   torch-build.log  building client/torch there, against its torch (rest)
#
# BLOCKSWAP_DEVICE_CHECK_BACKEND=host runs everything that can on the host
# backend: a dry run of the script on a machine without a GPU.
# BLOCKSWAP_DEVICE_CHECK_STANDIN=DIR runs over the stand-in CUDA driver in
# DIR (tests/standin_driver/, a TEST DOUBLE of libcuda.so.1): the cuda
# backend's code, not a GPU; a line that cannot mean anything there prints
# "SKIP name (stand-in: reason)" (timing, compute-sanitizer, torch's CUDA).
# BLOCKSWAP_DEVICE_CHECK_PROGRAMS=DIR takes the programs from a build tree
# (DIR/bin, DIR/lib) instead of .device (ctest's standin.device_check_*).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack_dir=${root}/.device
programs=(blockswap-primitives-probe blockswapd blockswapctl blockswap-demo shared_protocol_test
          gpu_test blockswap-bench-h2d blockswap-bench-staged libblockswap.so.1)
backend=${BLOCKSWAP_DEVICE_CHECK_BACKEND:-cuda}
standin=${BLOCKSWAP_DEVICE_CHECK_STANDIN:-}
build_tree=${BLOCKSWAP_DEVICE_CHECK_PROGRAMS:-}
# The GPU machine's Python with its torch (the dry run passes the venv's).
python=${BLOCKSWAP_DEVICE_CHECK_PYTHON:-python3}
# The user the clients run as (the probe's process B, gpu_test's
# two-client case), beside a daemon of root, as trainers beside the system
# service (device memory and pages cross users as descriptors): nobody unless
# set; set empty, the daemon's own user. Handed to gpu_test as
# BLOCKSWAP_GPU_TEST_CLIENT_USER.
client_user=${BLOCKSWAP_DEVICE_CHECK_CLIENT_USER-nobody}
# Call 1's limits: each check's time over the stand-in (measured on the
# shared 2-core build machine; docs/gpu.md) times this one factor, on a GPU
# and over the stand-in alike.
limit_scale=${BLOCKSWAP_DEVICE_CHECK_LIMIT_SCALE:-5}
# Call 2's limits are a GPU's (unmeasured there so far); over the stand-in
# (host threads with random pauses, not a GPU) each is multiplied by this.
rest_scale=$([[ -n ${standin} ]] && echo 4 || echo 1)
# What outlives a call on the machine: the background LibTorch build.
state=/tmp/blockswap-device-check
torch_build=${state}/torch-build

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

# Where the programs are: the pack, or a build tree. Sets bin_dir,
# library (libblockswap.so.1) and cli11_include; puts bin_dir on PATH.
locate_programs() {
  if [[ -n ${build_tree} ]]; then
    bin_dir=${build_tree}/bin
    library=${build_tree}/lib/libblockswap.so.1
    cli11_include=/usr/include
    export PATH="${bin_dir}:${PATH}"
  else
    # shellcheck source=/dev/null
    . "${pack_dir}/env.sh"
    bin_dir=${pack_dir}/bin
    library=${pack_dir}/bin/libblockswap.so.1
    cli11_include=${pack_dir}/include
  fi
  # Python and torch never see the stand-in (it is no GPU, and torch must
  # load the real driver or none): they run with the path as it was.
  python_library_path=${LD_LIBRARY_PATH:-}
  if [[ -n ${standin} ]]; then
    python_library_path=$(tr ':' '\n' <<<"${python_library_path}" | grep -vxF "${standin}" |
      paste -sd:)
    export LD_LIBRARY_PATH="${standin}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
    export BLOCKSWAP_STANDIN_VIOLATIONS=abort
  fi
}

run() {
  local which=${1:-} out=${2:-}
  if [[ ${which} != core && ${which} != rest ]] || [[ -z ${out} ]]; then
    echo "usage: tests/gpu/device-check.sh run core|rest OUT" >&2
    return 2
  fi
  mkdir -p "${out}" "${state}"
  locate_programs
  summary=${out}/summary.txt
  log=${out}/log.txt
  failed=0
  part_failed=0
  current=""
  : >"${log}"
  local mode=${backend}
  [[ -n ${standin} ]] && mode="cuda over the stand-in driver (a test double, not a GPU)"
  echo "device-check ${which} $(date -u +%Y-%m-%dT%H:%M:%SZ) backend=${mode} host=$(hostname)" \
    >"${summary}"
  # A run cut short (the device call's limit) still says how far it got.
  trap 'cut_short' TERM INT
  set -m
  if [[ ${which} == core ]]; then
    run_core "${out}"
  else
    run_rest "${out}"
  fi
  local verdict=ok
  ((failed)) && verdict=FAIL
  echo "TOTAL ${verdict}  $((SECONDS - run_start))s" >>"${summary}"
  set +m
  trap - TERM INT
  cat "${summary}"
  return "${failed}"
}

# core_limit SECONDS: call 1's limit of a check that took SECONDS (at least
# 1) over the stand-in.
core_limit() {
  echo $(($1 * limit_scale))
}
# rest_limit SECONDS: call 2's limit of a check given SECONDS on a GPU.
rest_limit() {
  echo $(($1 * rest_scale))
}

# Call 1: each check's time over the stand-in, rounded up (docs/gpu.md,
# 2026-12-05): 35 s in all, so 175 s of limits with limit_scale 5; and 30 s
# (a GPU's guess: the stand-in's timings mean nothing) for P1 and P4 on
# both copy paths, so that the first GPU run alone tells which default its
# numbers support.
run_core() {
  local out=$1
  part core
  check libraries "$(core_limit 1)" probe_libraries
  if [[ ${backend} == host ]]; then
    skip probe "host backend dry run: the probe's CUDA lines need a driver"
  else
    check probe "$(core_limit 1)" primitives_probe
  fi
  info environment "$(core_limit 1)" probe_environment
  # Without the driver, a context or device memory that crosses processes,
  # nothing below can work.
  if grep -Eq '^FAIL (cuda\.driver|cuda\.init|cuda\.vmm-fd\.import\.same-uid)' "${summary}"; then
    echo "STOP the probe failed where everything depends on it: the core's checks were not run" \
      >>"${summary}"
    end_part
    return
  fi
  start_torch_build
  check protocol "$(core_limit 26)" protocol_on_gpu "${out}"
  check two-clients "$(core_limit 5)" gpu_tests "${out}" two-clients '*GpuStreamingTest.*'
  check daemon-death "$(core_limit 1)" gpu_tests "${out}" daemon-death \
    'GpuTest.DaemonKilledUnderAClient*'
  if [[ -n ${standin} ]]; then
    skip bench-h2d.both-paths "stand-in: its timings would measure the test double, not a GPU"
  else
    info bench-h2d.both-paths 30 bench_h2d_both_paths "${out}"
  fi
  end_part
}

# Call 2: limits add up to 290 s on a GPU.
run_rest() {
  local out=$1
  part rest
  if [[ -n ${standin} ]]; then
    skip bench-h2d "stand-in: its timings would measure the test double, not a GPU"
  else
    # Its P4-GPU rows run kernels: here, not in call 1.
    info bench-h2d "$(rest_limit 50)" bench_h2d "${out}"
  fi
  check list-devices "$(rest_limit 10)" blockswapd --list-devices --backend="${backend}"
  check gpu-tests "$(rest_limit 70)" gpu_tests "${out}" gpu-rest \
    '-*GpuStreamingTest.*:GpuTest.DaemonKilledUnderAClient*'
  if [[ -n ${standin} ]]; then
    skip bench-staged "stand-in: its timings would measure the test double, not a GPU"
    skip compute-sanitizer "stand-in: compute-sanitizer instruments a real driver and GPU"
  else
    info bench-staged "$(rest_limit 25)" bench_staged "${out}"
    info compute-sanitizer "$(rest_limit 30)" sanitizer_on_gpu
  fi
  check demos "$(rest_limit 30)" demos_on_gpu "${out}"
  if [[ -n ${standin} ]]; then
    skip python "stand-in: torch's CUDA paths need a GPU; torch never loads the stand-in"
    skip torch-build "stand-in: tests/run.sh builds and tests the LibTorch layer (configuration A)"
    skip torch-demos "stand-in: torch's CUDA paths need a GPU; torch never loads the stand-in"
  else
    check python "$(rest_limit 35)" python_on_gpu
    check torch-build "$(rest_limit 20)" wait_for_torch_build "${out}"
    check torch-demos "$(rest_limit 20)" torch_demos_on_gpu
  fi
  end_part
}

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

# skip NAME REASON: a line for a check that is not run, and why.
skip() {
  echo "SKIP $1 ($2)" >>"${summary}"
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
  echo "TOTAL cut short  $((SECONDS - run_start))s" >>"${summary}"
  exit 124
}

# The primitives probe's lines (tests/gpu/primitives_probe.cc), each into
# the summary as it is printed. Its process B runs as the client user.
primitives_probe() {
  local code
  blockswap-primitives-probe --client-user="${client_user}" --shm-needed-mib=4096 |
    tee -a "${summary}"
  code=${PIPESTATUS[0]}
  [[ -n ${standin} ]] &&
    echo "INFO probe: over the stand-in driver, a test double: its PASS lines say the probe keeps CUDA's rules, not that a GPU works" |
    tee -a "${summary}"
  return "${code}"
}

# What the probe leaves to the shell: the GPU as nvidia-smi sees it, and
# torch with its CUDA version (torch never sees the stand-in). INFO lines.
probe_environment() {
  if [[ -n ${standin} ]]; then
    echo "SKIP env.nvidia-smi (stand-in: no GPU to query)" | tee -a "${summary}"
  elif command -v nvidia-smi >/dev/null; then
    echo "INFO env.nvidia-smi: $(timeout 8 nvidia-smi \
      --query-gpu=name,driver_version,memory.total,compute_mode,mig.mode.current \
      --format=csv,noheader | head -1)" | tee -a "${summary}"
  else
    echo "SKIP env.nvidia-smi (not on PATH)" | tee -a "${summary}"
  fi
  local torch
  if torch=$(LD_LIBRARY_PATH=${python_library_path} timeout 8 "${python}" -c \
    'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1); then
    echo "INFO env.torch: ${python}: torch ${torch}" | tee -a "${summary}"
  else
    echo "SKIP env.torch (${python} has no torch: the Python and LibTorch checks cannot run: $(tail -n 1 <<<"${torch}"))" |
      tee -a "${summary}"
  fi
}

# Every program finds every library it needs, with the symbol versions it
# needs (ldd names a missing one: "version `GLIBCXX_3.4.30' not found"),
# before anything that could fail to load runs.
probe_libraries() {
  local missing program path
  missing=$(for program in "${programs[@]}"; do
    path=${bin_dir}/${program}
    [[ ${program} == *.so* ]] && path=${library}
    ldd "${path}"
  done | grep 'not found' | sort -u)
  if [[ -n ${missing} ]]; then
    echo "missing libraries or symbol versions: ${missing}"
    return 1
  fi
  echo "all ${#programs[@]} programs resolve their libraries"
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

# bench_h2d OUT [trainer]: with `trainer`, every client copies itself
# (BLOCKSWAP_COPY=trainer) at half the bytes, appended to bench.txt.
bench_h2d() {
  local out=$1
  local args=(--backend="${backend}")
  [[ ${backend} == host ]] && args+=(--sizes-mib=1,64 --clients=2 --gigabytes=0.2)
  # P1 at 2 GB a size, one round of each P4 row: what fits its 50 s.
  [[ ${backend} == cuda ]] && args+=(--gigabytes=2 --repeat=1)
  blockswap-bench-h2d "${args[@]}" 2>&1 | grep -v '^blockswapd: ' | tee "${out}/bench.txt"
  return "${PIPESTATUS[0]}"
}

# Call 1's P1 and P4 on each copy path in turn (the daemon's, then
# BLOCKSWAP_COPY=trainer), beside the in-process baseline, and the
# read-only registration time per GiB: no CUDA runtime (--compute=copies,
# P4's kernels host functions of the same length), 64 MiB blocks, one
# round. Into bench.txt.
bench_h2d_both_paths() {
  local out=$1 copy code=0
  local args=(--backend="${backend}" --compute=copies --sizes-mib=64 --clients=2 --repeat=1
              --stall-loads=100)
  [[ ${backend} == host ]] && args+=(--gigabytes=0.2 --registration-gib=0.25)
  [[ ${backend} == cuda ]] && args+=(--gigabytes=0.5 --registration-gib=1)
  : >"${out}/bench.txt"
  for copy in daemon trainer; do
    echo "--- BLOCKSWAP_COPY=${copy}" >>"${out}/bench.txt"
    BLOCKSWAP_COPY=${copy} blockswap-bench-h2d "${args[@]}" 2>&1 | grep -Ev '^blockswapd?: ' |
      tee -a "${out}/bench.txt"
    ((PIPESTATUS[0] == 0)) || code=1
  done
  return "${code}"
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
  prefix=$(LD_LIBRARY_PATH=${python_library_path} "${python}" -c \
    'import torch; print(torch.utils.cmake_prefix_path)') || return 1
  rm -rf "${torch_build}"
  cmake -S "${root}/client/torch" -B "${torch_build}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="${prefix}" -DBLOCKSWAP_LIBRARY="${library}" \
    -DBLOCKSWAP_CLI11_INCLUDE="${cli11_include}" &&
    cmake --build "${torch_build}" -j "$(nproc)"
}

# Starts the LibTorch build for call 2 in a session of its own, so that it
# outlives call 1 (`device-check.sh torch-build`, its pid, log and exit
# status in ${state}). Not over the stand-in (see run_rest).
start_torch_build() {
  [[ -n ${standin} ]] && return 0
  local pid
  pid=$(cat "${state}/torch-build.pid" 2>/dev/null)
  [[ -n ${pid} ]] && kill -0 "${pid}" 2>/dev/null && return 0
  rm -f "${state}/torch-build.rc"
  setsid nohup "${root}/tests/gpu/device-check.sh" torch-build >"${state}/torch-build.log" 2>&1 </dev/null &
  echo $! >"${state}/torch-build.pid"
  echo "INFO torch-build: started in the background for call 2 (${state}/torch-build.log)" \
    >>"${summary}"
}

# Call 2's side: the build call 1 started, waited for within this check's
# limit; on a machine where call 1 did not run (a fresh one) it starts now
# and will rarely finish in time: run `run rest` again.
wait_for_torch_build() {
  local out=$1 start=${SECONDS} pid
  pid=$(cat "${state}/torch-build.pid" 2>/dev/null)
  if [[ ! -f ${state}/torch-build.rc ]] && ! { [[ -n ${pid} ]] && kill -0 "${pid}" 2>/dev/null; }; then
    echo "no LibTorch build from call 1 on this machine (a fresh machine?): starting it now"
    start_torch_build
    pid=$(cat "${state}/torch-build.pid")
  fi
  while kill -0 "${pid}" 2>/dev/null && ((SECONDS - start < 17)); do sleep 1; done
  cp "${state}/torch-build.log" "${out}/torch-build.log" 2>/dev/null
  tail -n 20 "${state}/torch-build.log"
  if [[ ! -f ${state}/torch-build.rc ]]; then
    echo "the LibTorch build is still running ($((SECONDS - start))s waited here): run rest again"
    return 124
  fi
  [[ $(cat "${state}/torch-build.rc") == 0 ]]
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
  BLOCKSWAP_LIBRARY=${library} PYTHONPATH=${root}/client/python \
    LD_LIBRARY_PATH=${python_library_path} "${python}" "${root}/tests/gpu/python_on_gpu.py" --socket "${socket}" \
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
  # Internal: the background LibTorch build that start_torch_build starts.
  torch-build)
    mkdir -p "${state}"
    locate_programs
    build_torch_layer
    echo $? >"${state}/torch-build.rc"
    ;;
  *) echo "usage: tests/gpu/device-check.sh pack | run core|rest OUT" >&2; exit 2 ;;
esac
