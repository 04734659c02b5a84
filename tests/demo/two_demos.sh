#!/usr/bin/env bash
# [BLOCKSWAP_DEMO=PROGRAM] two_demos.sh BIN_DIR [DEMO_ARGS...]
#
# Starts blockswapd (BIN_DIR/blockswapd, --backend auto: the host backend
# where there is no GPU; BLOCKSWAP_DEMO_BACKEND overrides it) on a temporary socket and master directory, runs two
# demo processes (BIN_DIR/$BLOCKSWAP_DEMO, default blockswap-demo; also
# blockswap-torch-demo) at once with the same arguments (so they share one
# model), shows `blockswapctl residency`, `stats` and `models` while they run
# and after, then stops the daemon with SIGTERM. Used by ctest (tests/demo/)
# and deploy/quickstart.sh.
#
# With BLOCKSWAP_TRACE_DIR=DIR, `blockswapctl trace` records the demos' run
# (from before they start until both have exited) into DIR/run.json (Chrome
# trace-event JSON: Perfetto, chrome://tracing) and DIR/run.png (a per-client
# timeline of copies and stalls), and the script prints both paths.
#
# Exits 0 only if both demos exited 0 having verified every block with a
# non-zero number of loads, the daemon showed exactly one model, the trace
# (when asked for) was written, and the daemon exited 0 on SIGTERM. Whatever happens, the daemon and the demos are
# stopped and the temporary files removed.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BIN_DIR [BLOCKSWAP_DEMO_ARGS...]" >&2
  exit 2
fi
bin=$(cd "$1" && pwd)
shift
demo=${BLOCKSWAP_DEMO:-blockswap-demo}
for tool in blockswapd blockswapctl "${demo}"; do
  if [[ ! -x ${bin}/${tool} ]]; then
    echo "two_demos: ${bin}/${tool} is missing (build it first)" >&2
    exit 2
  fi
done

scratch=$(mktemp -d "${TMPDIR:-/tmp}/blockswap-demo.XXXXXX")
# Masters live on a tmpfs; a name of our own, so that cleanup removes only ours.
shm=/dev/shm/$(basename "${scratch}")
socket=${scratch}/blockswapd.sock
daemon_pid=
trace_pid=
demo_pids=()

cleanup() {
  local pid
  # Only what this script started, by pid; SIGKILL, since a clean stop has
  # already happened on the success path (the pids are cleared then).
  for pid in "${demo_pids[@]}" ${trace_pid} ${daemon_pid}; do
    kill -KILL "${pid}" 2>/dev/null || true
    wait "${pid}" 2>/dev/null || true
  done
  rm -rf "${scratch}" "${shm}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ctl() { "${bin}/blockswapctl" --socket "${socket}" --timeout 5 "$@"; }
model_count() { ctl --json models | grep -c '"model_id"' || true; }
show() {
  echo "--- blockswapctl residency ($1)"
  ctl residency || true
  echo "--- blockswapctl stats ($1)"
  ctl stats || true
  echo "--- blockswapctl models ($1)"
  ctl models || true
}

# --config=/dev/null: not the machine's installed service config.
"${bin}/blockswapd" --config=/dev/null --backend "${BLOCKSWAP_DEMO_BACKEND:-auto}" --socket "${socket}" --shm-prefix "${shm}" \
  >"${scratch}/blockswapd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  if ctl health >/dev/null 2>&1; then break; fi
  if ! kill -0 "${daemon_pid}" 2>/dev/null; then
    echo "two_demos: blockswapd exited at start-up:" >&2
    cat "${scratch}/blockswapd.log" >&2
    exit 1
  fi
  sleep 0.1
done
ctl health >/dev/null

trace_dir=${BLOCKSWAP_TRACE_DIR:-}
if [[ -n ${trace_dir} ]]; then
  mkdir -p "${trace_dir}"
  rm -f "${trace_dir}/run.json" "${trace_dir}/run.png"
  # Ended by SIGINT once the demos are done; --seconds is only a bound.
  "${bin}/blockswapctl" --socket "${socket}" trace --seconds 600 \
    --out "${trace_dir}/run.json" --png "${trace_dir}/run.png" 2>"${scratch}/trace.log" &
  trace_pid=$!
  for _ in $(seq 300); do
    if grep -q 'recording for' "${scratch}/trace.log" 2>/dev/null; then break; fi
    if ! kill -0 "${trace_pid}" 2>/dev/null; then break; fi
    sleep 0.05
  done
fi

for i in 1 2; do
  "${bin}/${demo}" --socket "${socket}" --name "demo-${i}" "$@" \
    >"${scratch}/demo-${i}.log" 2>&1 &
  demo_pids+=($!)
done

# "During": once both demos are streaming (each has finished a step), or as
# soon as one of them is done.
for _ in $(seq 300); do
  running=0 streaming=0
  for i in 1 2; do
    kill -0 "${demo_pids[i - 1]}" 2>/dev/null && running=$((running + 1))
    grep -q '^step 1/' "${scratch}/demo-${i}.log" 2>/dev/null && streaming=$((streaming + 1))
  done
  if [[ ${streaming} -eq 2 || ${running} -lt 2 ]]; then break; fi
  sleep 0.05
done
show "while the demos run"
models_during=$(model_count)

failed=0
for i in 1 2; do
  status=0
  wait "${demo_pids[i - 1]}" || status=$?
  echo "--- demo-${i} (exit ${status})"
  cat "${scratch}/demo-${i}.log"
  if [[ ${status} -ne 0 ]]; then
    echo "two_demos: demo-${i} exited with ${status}" >&2
    failed=1
  elif ! grep -Eq '^demo ok: .* loads [1-9][0-9]* checks [1-9][0-9]* mismatches 0 ' \
      "${scratch}/demo-${i}.log"; then
    echo "two_demos: demo-${i} did not report verified loads" >&2
    failed=1
  fi
done
demo_pids=()

if [[ -n ${trace_pid} ]]; then
  kill -INT "${trace_pid}" 2>/dev/null || true
  trace_status=0
  wait "${trace_pid}" || trace_status=$?
  trace_pid=
  echo "--- blockswapctl trace (exit ${trace_status})"
  cat "${scratch}/trace.log"
  if [[ ${trace_status} -ne 0 || ! -s ${trace_dir}/run.json || ! -s ${trace_dir}/run.png ]]; then
    echo "two_demos: blockswapctl trace did not write ${trace_dir}/run.json and run.png" >&2
    failed=1
  else
    echo "trace of the demos' run: ${trace_dir}/run.json (open in https://ui.perfetto.dev or chrome://tracing)"
    echo "timeline of copies and stalls: ${trace_dir}/run.png"
  fi
fi

show "after the demos"
models_after=$(model_count)
if [[ ${models_during} -ne 1 || ${models_after} -ne 1 ]]; then
  echo "two_demos: expected one shared model, saw ${models_during} during and ${models_after} after" >&2
  failed=1
fi

kill -TERM "${daemon_pid}"
daemon_status=0
wait "${daemon_pid}" || daemon_status=$?
daemon_pid=
echo "--- blockswapd (exit ${daemon_status})"
cat "${scratch}/blockswapd.log"
if [[ ${daemon_status} -ne 0 ]]; then
  echo "two_demos: blockswapd exited with ${daemon_status} on SIGTERM" >&2
  failed=1
fi

if [[ ${failed} -ne 0 ]]; then
  echo "two_demos: FAILED" >&2
  exit 1
fi
echo "two_demos: both demos verified their blocks against one shared model"
