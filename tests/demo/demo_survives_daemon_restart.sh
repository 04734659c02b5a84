#!/usr/bin/env bash
# demo_survives_daemon_restart.sh BIN_DIR [DEMO_ARGS...]
#
# Starts blockswapd (host or cuda backend, as `auto` finds, or
# BLOCKSWAP_DEMO_BACKEND) on a temporary
# socket and master directory, runs blockswap-demo against it, SIGKILLs the
# daemon once the demo has finished a step, starts a new daemon on the same
# socket and masters 0.5 s later, and expects the demo to ride it out: its
# scheduler re-attaches, reopens the model the new daemon adopted and
# reloads, and the demo exits 0 with every block verified. With
# --reconnect-timeout 0 in DEMO_ARGS the same run must fail instead
# (EXPECT_FAILURE=1), which shows the restart really happened under it.
# Under trainer copies (BLOCKSWAP_COPY=trainer) EXPECT_NO_VOID=1 asks that
# no pass be void, whatever the reconnection setting, and EXPECT_REATTACH=1
# that the demo's session come back in the restarted daemon (its `clients`,
# COPY trainer) while the demo still streams.
set -euo pipefail

bin=$(cd "$1" && pwd)
shift
scratch=$(mktemp -d "${TMPDIR:-/tmp}/blockswap-restart.XXXXXX")
shm=/dev/shm/$(basename "${scratch}")
socket=${scratch}/blockswapd.sock
daemon_pid=
demo_pid=
cleanup() {
  for pid in ${demo_pid} ${daemon_pid}; do
    kill -KILL "${pid}" 2>/dev/null || true
    wait "${pid}" 2>/dev/null || true
  done
  rm -rf "${scratch}" "${shm}"
}
trap cleanup EXIT

ctl() { "${bin}/blockswapctl" --socket "${socket}" --timeout 5 "$@"; }
start_daemon() {
  "${bin}/blockswapd" --config=/dev/null --backend "${BLOCKSWAP_DEMO_BACKEND:-auto}" --socket "${socket}" \
    --shm-prefix "${shm}" >>"${scratch}/blockswapd.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 100); do
    if ctl health >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "restart: blockswapd did not come up:" >&2
  cat "${scratch}/blockswapd.log" >&2
  exit 1
}

start_daemon
"${bin}/blockswap-demo" --socket "${socket}" "$@" >"${scratch}/demo.log" 2>&1 &
demo_pid=$!
for _ in $(seq 600); do
  if grep -q '^step 1/' "${scratch}/demo.log"; then break; fi
  if ! kill -0 "${demo_pid}" 2>/dev/null; then break; fi
  sleep 0.05
done
if ! grep -q '^step 1/' "${scratch}/demo.log"; then
  echo "restart: the demo never finished a step:" >&2
  cat "${scratch}/demo.log" >&2
  exit 1
fi
kill -KILL "${daemon_pid}"
wait "${daemon_pid}" 2>/dev/null || true
echo "restart: blockswapd SIGKILLed under the demo; restarting it in 0.5 s"
sleep 0.5
start_daemon

if [[ ${EXPECT_REATTACH:-0} == 1 ]]; then
  reattached=0
  for _ in $(seq 100); do
    if ctl clients 2>/dev/null | grep -q ' trainer '; then reattached=1; break; fi
    if ! kill -0 "${demo_pid}" 2>/dev/null; then break; fi
    sleep 0.05
  done
  if [[ ${reattached} -ne 1 ]]; then
    echo "restart: the trainer-copy demo did not re-attach to the restarted daemon while it ran" >&2
    ctl clients >&2 || true
    cat "${scratch}/demo.log" >&2
    exit 1
  fi
  echo "restart: the demo re-attached while streaming:"
  ctl clients
fi

status=0
wait "${demo_pid}" || status=$?
demo_pid=
echo "--- blockswap-demo (exit ${status})"
cat "${scratch}/demo.log"
if [[ ${EXPECT_FAILURE:-0} == 1 ]]; then
  if [[ ${status} -eq 0 ]]; then
    echo "restart: the demo without reconnection exited 0 across a daemon restart" >&2
    exit 1
  fi
  grep -q '^blockswap-demo: [A-Z_]*: ' "${scratch}/demo.log"
  echo "restart: without reconnection the demo failed, as it must"
  exit 0
fi
if [[ ${status} -ne 0 ]] ||
  ! grep -Eq '^demo ok: .* loads [1-9][0-9]* checks [1-9][0-9]* mismatches 0 ' "${scratch}/demo.log"; then
  echo "restart: the demo did not ride out the daemon restart" >&2
  exit 1
fi
if [[ ${EXPECT_NO_VOID:-0} == 1 ]] && grep -q ' void, run again: ' "${scratch}/demo.log"; then
  echo "restart: a pass was void under trainer copies, which need no daemon in a pass" >&2
  exit 1
fi
# A pass whose work read a slot the killed daemon had not finished copying
# is void, and the demo runs it again (docs/protocol.md, "A dead daemon"):
# only that reason may void one.
if grep -v 'blockswapd was lost before its copy into ' "${scratch}/demo.log" |
  grep -q ' void, run again: '; then
  echo "restart: the demo voided a pass for another reason" >&2
  exit 1
fi
echo "restart: the demo rode out a daemon SIGKILL + restart with every block verified"
