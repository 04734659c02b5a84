#!/usr/bin/env bash
# gone_demos.sh BIN_DIR [DEMO_ARGS...]
#
# Nothing is kept for a client that is gone, on whatever backend
# $BLOCKSWAP_DEMO_BACKEND names (default auto; over the stand-in driver: the
# cuda backend, whose rings are exported as descriptors). blockswapd serves a
# warm-up blockswap-demo run to its end; its descriptors once they have
# settled are the baseline (what it opens once and keeps is open by then).
# Then three demos stream at once: one ends normally, two are SIGKILLed
# mid-stream with their rings loaded. Once the daemon shows no client, it
# must hold within 10 s no descriptor it did not hold before, none of a
# deleted file above all (a deleted file's pages stay allocated while a
# descriptor holds it); each one that remains is named.
#
# DEMO_ARGS are every demo's; the killed ones add a long --steps.
# Exits 0 on success, 1 otherwise.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BIN_DIR [BLOCKSWAP_DEMO_ARGS...]" >&2
  exit 2
fi
bin=$(cd "$1" && pwd)
shift

scratch=$(mktemp -d "${TMPDIR:-/tmp}/blockswap-gone.XXXXXX")
shm=/dev/shm/$(basename "${scratch}")
socket=${scratch}/blockswapd.sock
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

ctl() { "${bin}/blockswapctl" --socket "${socket}" --timeout 5 "$@"; }
client_count() { ctl --json clients | grep -c '"pid"' || true; }
# The daemon's descriptors, one per line: "N -> TARGET".
descriptors() {
  local fd
  for fd in /proc/"${daemon_pid}"/fd/*; do
    echo "${fd##*/} -> $(readlink "${fd}" 2>/dev/null || echo gone)"
  done | sort -n
}
settled_descriptors() {
  local now next same=0
  now=$(descriptors)
  for _ in $(seq 100); do
    sleep 0.1
    next=$(descriptors)
    if [[ ${next} == "${now}" ]]; then same=$((same + 1)); else same=0; fi
    now=${next}
    if [[ ${same} -ge 5 ]]; then break; fi
  done
  echo "${now}"
}
deleted_count() { grep -c '(deleted)$' <<<"$1" || true; }
fail() {
  echo "gone_demos: $*" >&2
  echo "--- blockswapd log" >&2
  cat "${scratch}/blockswapd.log" >&2
  exit 1
}

"${bin}/blockswapd" --config=/dev/null --backend "${BLOCKSWAP_DEMO_BACKEND:-auto}" \
  --socket "${socket}" --shm-prefix "${shm}" >"${scratch}/blockswapd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  if ctl health >/dev/null 2>&1; then break; fi
  kill -0 "${daemon_pid}" 2>/dev/null || fail "blockswapd exited at start-up"
  sleep 0.1
done
ctl health >/dev/null

"${bin}/blockswap-demo" --socket "${socket}" --name warm-up "$@" >"${scratch}/warm-up.log" 2>&1 ||
  { cat "${scratch}/warm-up.log" >&2; fail "the warm-up demo failed"; }
for _ in $(seq 100); do
  [[ $(client_count) -eq 0 ]] && break
  sleep 0.1
done
before=$(settled_descriptors)

"${bin}/blockswap-demo" --socket "${socket}" --name ends "$@" >"${scratch}/ends.log" 2>&1 &
demo_pids+=($!)
for i in 1 2; do
  "${bin}/blockswap-demo" --socket "${socket}" --name "killed-${i}" "$@" --steps 100000 \
    >"${scratch}/killed-${i}.log" 2>&1 &
  demo_pids+=($!)
done
for i in 1 2; do
  for _ in $(seq 300); do
    grep -q '^step 1/' "${scratch}/killed-${i}.log" 2>/dev/null && break
    kill -0 "${demo_pids[i]}" 2>/dev/null ||
      { cat "${scratch}/killed-${i}.log" >&2; fail "killed-${i} ended before it streamed"; }
    sleep 0.05
  done
  grep -q '^step 1/' "${scratch}/killed-${i}.log" || fail "killed-${i} never streamed"
  kill -KILL "${demo_pids[i]}"
done
wait "${demo_pids[0]}" || { cat "${scratch}/ends.log" >&2; fail "the demo that ends failed"; }
for i in 1 2; do wait "${demo_pids[i]}" 2>/dev/null || true; done
demo_pids=()

for _ in $(seq 300); do
  [[ $(client_count) -eq 0 ]] && break
  sleep 0.1
done
[[ $(client_count) -eq 0 ]] || fail "sessions of clients that are gone remain: $(ctl clients)"
# The daemon frees a dead client's rings once its own copies into them are
# done: well within 10 s.
for _ in $(seq 100); do
  after=$(descriptors)
  if [[ $(wc -l <<<"${after}") -le $(wc -l <<<"${before}") &&
    $(deleted_count "${after}") -le $(deleted_count "${before}") ]]; then
    break
  fi
  sleep 0.1
done
echo "daemon descriptors: $(wc -l <<<"${before}") before, $(wc -l <<<"${after}") after" \
  "($(deleted_count "${before}") and $(deleted_count "${after}") of deleted files)"
if [[ $(wc -l <<<"${after}") -gt $(wc -l <<<"${before}") ||
  $(deleted_count "${after}") -gt $(deleted_count "${before}") ]]; then
  echo "held now and not before:" >&2
  comm -13 <(echo "${before}") <(echo "${after}") >&2
  fail "the daemon keeps descriptors for clients that are gone"
fi

kill -TERM "${daemon_pid}"
status=0
wait "${daemon_pid}" || status=$?
daemon_pid=
[[ ${status} -eq 0 ]] || fail "blockswapd exited with ${status} on SIGTERM"
echo "gone_demos: nothing kept for the demos that are gone"
