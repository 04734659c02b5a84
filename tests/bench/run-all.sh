#!/usr/bin/env bash
# Runs every benchmark of docs/BENCHMARKS.md against a built configuration A (build/,
# or BLOCKSWAP_BUILD_DIR) and ends with one summary table, one line per
# metric: `P<n> <name> goal=<goal> measured=<value> PASS|MISS`.
# P9 (saved_weights_bench.py) needs a Python with torch: $BLOCKSWAP_PYTHON,
# default the venv of deploy/install-deps.sh.
# Each program measures blockswap beside its ceiling in the same run; the
# full output is kept in ${BLOCKSWAP_BENCH_LOG:-<build>/bench-run.log}.
# About 3-4 minutes on 2 cores; docs/BENCHMARKS.md records a run.
#   --quick   small sizes and short P4 passes (seconds; numbers mean little)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BLOCKSWAP_BUILD_DIR:-${root}/build}
bin=${build}/bin
log=${BLOCKSWAP_BENCH_LOG:-${build}/bench-run.log}
python=${BLOCKSWAP_PYTHON:-${BLOCKSWAP_VENV:-${HOME}/.cache/blockswap/venv}/bin/python}
quick=0
[[ ${1:-} == --quick ]] && quick=1

for program in blockswapd blockswap-bench-h2d blockswap-bench-staged blockswap-bench-control \
    blockswap-bench-memory blockswap-bench-warm-start blockswap-bench-fair-copies \
    blockswap-bench-header; do
  if [[ ! -x ${bin}/${program} ]]; then
    echo "run-all.sh: ${bin}/${program} is not built (configuration A: tests/run.sh or" \
         "cmake --build ${build} --target ${program})" >&2
    exit 2
  fi
done
if ! "${python}" -c 'import torch' 2>/dev/null; then
  echo "run-all.sh: ${python} cannot import torch (deploy/install-deps.sh, or BLOCKSWAP_PYTHON)" >&2
  exit 2
fi

: > "${log}"
summary=()
# run NAME METRIC-IDS COMMAND...: runs a program, keeps its summary lines; a
# program that fails contributes one MISS line naming its exit code.
run() {
  local name=$1 ids=$2
  shift 2
  echo "=== ${name}: $*" | tee -a "${log}"
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  printf '%s\n' "${out}" | grep -v '^blockswapd: ' | tee -a "${log}"
  # A metric line: `P<n> <name> goal=... PASS|MISS` (p7-soak.sh's name and
  # goal hold spaces).
  # A run named NAME@PATH (the same program on another copy path) marks its
  # metrics' names with @PATH, so that both paths sit side by side.
  local suffix=
  [[ ${name} == *@* ]] && suffix="@${name#*@}"
  mapfile -t lines < <(printf '%s\n' "${out}" | grep -E '^P[0-9][^ ]* .*goal=.*(PASS|MISS)' |
    sed -E "s/^(P[0-9][^ ]*) ([^ ]+)/\1 \2${suffix}/")
  summary+=("${lines[@]}")
  if (( rc != 0 )); then
    summary+=("${ids} ${name} goal=exit-0 measured=exit-${rc} MISS")
  fi
}

# Processes other than this script's using more than 5% of a CPU over one
# second, or "none".
busy_processes() {
  local list
  list=$(top -b -n 2 -d 1 -w 200 | awk -v self="$$" '
    /^top -/ { sample++ }
    sample == 2 && $1 ~ /^[0-9]+$/ && $9 + 0 > 5 && $12 != "top" { printf "%s %s (%s%%), ", $1, $12, $9 }')
  echo "${list:-none}" | sed 's/, $//'
}

{
  echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
       "$(awk '/MemTotal/ {printf "%.1f GiB RAM", $2/1048576}' /proc/meminfo)," \
       "kernel $(uname -r)"
  echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at start"
  # The load average lags: say what else is running now. A stray daemon or
  # client left behind by a killed test makes the latency rows meaningless.
  echo "busy:    $(busy_processes)"
  echo "commit:  $(git -C "${root}" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee -a "${log}"

if (( quick )); then
  run host-copy P2,P4-host "${bin}/blockswap-bench-h2d" --backend=host --sizes-mib=1,8 \
    --clients=2 --gigabytes=0.2 --stall-loads=30
  run host-copy@trainer P2,P4-host env BLOCKSWAP_COPY=trainer "${bin}/blockswap-bench-h2d" \
    --backend=host --sizes-mib=1,8 --clients=2 --gigabytes=0.2 --stall-loads=30
  run staged P2-staged "${bin}/blockswap-bench-staged" --backend=host --sizes-mib=8 \
    --gigabytes=0.2 --repeat=1
  run control P3 "${bin}/blockswap-bench-control" --round-trips=2000 --throughput-loads=300
  run control@trainer P3 env BLOCKSWAP_COPY=trainer "${bin}/blockswap-bench-control" \
    --round-trips=2000 --throughput-loads=300
  run memory P5 "${bin}/blockswap-bench-memory" --model-mib=64 --block-mib=8 --clients=8
  run memory-mixed P5-mixed "${bin}/blockswap-bench-memory" --mixed --blocks=16 --block-mib=4 \
    --clients=8
  run warm-start P6-warm "${bin}/blockswap-bench-warm-start" --blocks=8 --block-mib=8
  run fair-copies P8 "${bin}/blockswap-bench-fair-copies" --loads=100 --repeat=1
  run header-parse P10 "${bin}/blockswap-bench-header" --tensors=10000,40000 --rounds=1
  run saved-weights P9 "${python}" "${root}/tests/bench/saved_weights_bench.py" --dim=128 \
    --steps=3
  run saved-weights-fp8 P9 "${python}" "${root}/tests/bench/saved_weights_bench.py" --dim=128 \
    --steps=3 --fp8
else
  run host-copy P2,P4-host "${bin}/blockswap-bench-h2d" --backend=host --sizes-mib=1,8,64,256 \
    --clients=2 --gigabytes=4 --stall-loads=200 --repeat=3
  # The same clients copying their own blocks (copy = "trainer").
  run host-copy@trainer P2,P4-host env BLOCKSWAP_COPY=trainer "${bin}/blockswap-bench-h2d" \
    --backend=host --sizes-mib=1,8,64,256 --clients=2 --gigabytes=4 --stall-loads=200 --repeat=3
  run staged P2-staged "${bin}/blockswap-bench-staged" --backend=host --sizes-mib=8,64 \
    --gigabytes=2 --repeat=3
  run control P3 "${bin}/blockswap-bench-control"
  # Request to usable slot with each client copying its own block.
  run control@trainer P3 env BLOCKSWAP_COPY=trainer "${bin}/blockswap-bench-control"
  run memory P5 "${bin}/blockswap-bench-memory" --model-mib=1024 --block-mib=32 --clients=8
  run memory-mixed P5-mixed "${bin}/blockswap-bench-memory" --mixed --blocks=16 --block-mib=64 \
    --clients=8
  run warm-start P6-warm "${bin}/blockswap-bench-warm-start" --blocks=16 --block-mib=64
  # P8: a streamer beside a prefetch flooder on one device ÷ alone.
  run fair-copies P8 "${bin}/blockswap-bench-fair-copies" --repeat=5
  # P10: the safetensors header parse per 10k tensors at 10k, 40k and 200k.
  run header-parse P10 "${bin}/blockswap-bench-header"
  # LoRA steps through streamed blocks without checkpointing ÷
  # with it, and the saved-tensor pack hook's share of the step (fp32, and
  # an fp8 base dequantized in forward).
  run saved-weights P9 "${python}" "${root}/tests/bench/saved_weights_bench.py"
  run saved-weights-fp8 P9 "${python}" "${root}/tests/bench/saved_weights_bench.py" --fp8
fi

# P7 (64 clients x 10k verified loads) is its own script, from the
# reliability work; it prints its own P7 line.
p7=${root}/tests/bench/p7-soak.sh
if [[ -x ${p7} ]]; then
  run scale P7 "${p7}"
else
  summary+=("P7 scale goal=0-errors measured=none MISS (not built: tests/bench/p7-soak.sh)")
fi

echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at end" | tee -a "${log}"
echo
echo "=== summary (full output: ${log})"
printf '%s\n' "${summary[@]}" | tee -a "${log}"
