#!/usr/bin/env bash
# service_users.sh BIN_DIR [DEMO_ARGS...]
#
# blockswapd as the system service runs it: an unprivileged service uid
# (SERVICE_UID, default 1) whose group is the socket's (the unit's Group=,
# SOCKET_GID, default 65534), under the default umask 0022. Three
# blockswap-demo processes stream one model through it at once, each of
# another kind of user: root, a uid in the socket's group (65534) and the
# service uid itself. Every GPU object reaches them as a descriptor over the
# socket (docs/protocol.md, "Users"), so each must verify every block.
# --backend is $BLOCKSWAP_DEMO_BACKEND (default auto).
#
# Exits 0 when every demo exited 0 reporting "mismatches 0" and the daemon
# stopped cleanly on SIGTERM; 77 (skipped) when not run as root; 1 otherwise.
# With EXPECT_SAID=PATTERN (an extended regex) every demo's output must also
# match it: how each copies, and why (a device the daemon cannot serve rings
# on: each trainer copies itself, and says so). EXPECT_SAID_BY_OTHERS and
# EXPECT_SAID_BY_SERVICE_UID do the same for the demos of root and uid 65534,
# and for the service uid's own demo (a driver that lets only the daemon's
# uid import its memory: the others copy themselves); the service uid's must
# not match EXPECT_NOT_SAID_BY_SERVICE_UID.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BIN_DIR [BLOCKSWAP_DEMO_ARGS...]" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "service_users: needs root (it runs processes as other users); skipped" >&2
  exit 77
fi
bin=$(cd "$1" && pwd)
shift
service_uid=${SERVICE_UID:-1}
socket_gid=${SOCKET_GID:-65534}
other_uid=65534

scratch=$(mktemp -d "${TMPDIR:-/tmp}/blockswap-service.XXXXXX")
shm=/dev/shm/$(basename "${scratch}")
run_dir=${scratch}/run
socket=${run_dir}/blockswapd.sock
daemon_pid=
demo_pids=()

cleanup() {
  local pid
  for pid in "${demo_pids[@]}" ${daemon_pid}; do
    kill -KILL "${pid}" 2>/dev/null || true
    wait "${pid}" 2>/dev/null || true
  done
  rm -rf "${scratch}" "${shm}"
}
trap cleanup EXIT

# Becomes, as `uid` with group `gid` and no supplementary group, under umask
# 0022, the program named next; run in the background (&), so that $! is the
# program's own pid.
as_user() {
  local uid=$1 gid=$2
  shift 2
  exec setpriv --reuid="${uid}" --regid="${gid}" --clear-groups -- \
    bash -c 'umask 0022; exec "$@"' bash "$@"
}

# The daemon's folder is its own (as RuntimeDirectory= makes it); the others
# may pass through it to the socket, whose own mode and group decide.
chmod 0755 "${scratch}"
mkdir -m 0755 "${run_dir}"
chown "${service_uid}:${socket_gid}" "${run_dir}"

as_user "${service_uid}" "${socket_gid}" "${bin}/blockswapd" --config=/dev/null \
  --backend "${BLOCKSWAP_DEMO_BACKEND:-auto}" --socket "${socket}" --shm-prefix "${shm}" \
  --socket-group="${socket_gid}" >"${scratch}/blockswapd.log" 2>&1 &
daemon_pid=$!
ctl() { "${bin}/blockswapctl" --socket "${socket}" --timeout 5 "$@"; }
for _ in $(seq 100); do
  if ctl health >/dev/null 2>&1; then break; fi
  if ! kill -0 "${daemon_pid}" 2>/dev/null; then
    echo "service_users: blockswapd exited at start-up:" >&2
    cat "${scratch}/blockswapd.log" >&2
    exit 1
  fi
  sleep 0.1
done
ctl health >/dev/null
echo "blockswapd runs as $(stat -c '%u:%g' /proc/${daemon_pid}), socket $(stat -c '%a %u:%g' "${socket}")"

names=(root "uid-${other_uid}" "service-uid-${service_uid}")
"${bin}/blockswap-demo" --socket "${socket}" --name "${names[0]}" "$@" \
  >"${scratch}/${names[0]}.log" 2>&1 &
demo_pids+=($!)
as_user "${other_uid}" "${other_uid}" "${bin}/blockswap-demo" --socket "${socket}" \
  --name "${names[1]}" "$@" >"${scratch}/${names[1]}.log" 2>&1 &
demo_pids+=($!)
as_user "${service_uid}" "${socket_gid}" "${bin}/blockswap-demo" --socket "${socket}" \
  --name "${names[2]}" "$@" >"${scratch}/${names[2]}.log" 2>&1 &
demo_pids+=($!)

failed=0
for i in 0 1 2; do
  status=0
  wait "${demo_pids[i]}" || status=$?
  echo "--- ${names[i]} (exit ${status})"
  tail -n 3 "${scratch}/${names[i]}.log"
  expected=${EXPECT_SAID:-}
  if [[ ${i} -eq 2 ]]; then
    expected=${EXPECT_SAID_BY_SERVICE_UID:-${expected}}
  else
    expected=${EXPECT_SAID_BY_OTHERS:-${expected}}
  fi
  if [[ -n ${expected} ]] && ! grep -Eq "${expected}" "${scratch}/${names[i]}.log"; then
    echo "service_users: the ${names[i]} demo did not say /${expected}/" >&2
    cat "${scratch}/${names[i]}.log" >&2
    failed=1
  elif [[ ${i} -eq 2 && -n ${EXPECT_NOT_SAID_BY_SERVICE_UID:-} ]] &&
    grep -Eq "${EXPECT_NOT_SAID_BY_SERVICE_UID}" "${scratch}/${names[i]}.log"; then
    echo "service_users: the ${names[i]} demo said /${EXPECT_NOT_SAID_BY_SERVICE_UID}/" >&2
    cat "${scratch}/${names[i]}.log" >&2
    failed=1
  elif [[ ${status} -ne 0 ]] || ! grep -q 'mismatches 0' "${scratch}/${names[i]}.log"; then
    echo "service_users: the ${names[i]} demo did not stream byte-exact" >&2
    cat "${scratch}/${names[i]}.log" >&2
    failed=1
  fi
done
demo_pids=()

kill -TERM "${daemon_pid}"
daemon_status=0
wait "${daemon_pid}" || daemon_status=$?
daemon_pid=
if [[ ${daemon_status} -ne 0 ]]; then
  echo "service_users: blockswapd exited ${daemon_status} on SIGTERM:" >&2
  failed=1
fi
if [[ ${failed} -ne 0 ]]; then
  echo "--- blockswapd.log" >&2
  cat "${scratch}/blockswapd.log" >&2
  exit 1
fi
echo "service_users: every user streamed byte-exact${EXPECT_SAID:+, saying /${EXPECT_SAID}/}"
