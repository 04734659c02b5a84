#!/usr/bin/env bash
# mixed_swap_demos.sh BIN_DIR
#
# Three blockswap-demo runs of the same weights (12 blocks, one
# seed) with different blocks_to_swap against one blockswapd (host backend
# where there is no GPU; BLOCKSWAP_DEMO_BACKEND overrides it): --swap 6 --ring 2, --swap 3 --ring 1, --swap 12
# --ring 4. Each uploads only its streaming blocks, so the daemon has three
# models; it must hold each distinct block once: its unique master bytes
# (`blockswapctl status` pinned_bytes) equal the bytes of the union of the
# three streaming sets (the 12-block model's), less than the three models'
# sum, and every model's bytes shared but the union's own extra blocks.
# Exits 0 only if all three demos verified their blocks and the counts hold.
set -euo pipefail
bin=$(cd "$1" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/blockswap-mixed.XXXXXX")
shm=/dev/shm/$(basename "${scratch}")
socket=${scratch}/blockswapd.sock
daemon_pid=
cleanup() {
  if [[ -n ${daemon_pid} ]]; then
    kill -KILL "${daemon_pid}" 2>/dev/null || true
    wait "${daemon_pid}" 2>/dev/null || true
  fi
  rm -rf "${scratch}" "${shm}"
}
trap cleanup EXIT
ctl() { "${bin}/blockswapctl" --socket "${socket}" --timeout 5 "$@"; }

"${bin}/blockswapd" --config=/dev/null --backend "${BLOCKSWAP_DEMO_BACKEND:-auto}" --socket "${socket}" --shm-prefix "${shm}" \
  >"${scratch}/blockswapd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  ctl health >/dev/null 2>&1 && break
  sleep 0.1
done
ctl health >/dev/null

run=0
for shape in "6 2" "3 1" "12 4"; do
  read -r swap ring <<<"${shape}"
  run=$((run + 1))
  if ! "${bin}/blockswap-demo" --socket "${socket}" --name "mixed-${run}" --blocks 12 \
      --swap "${swap}" --ring "${ring}" --block-bytes 131072 --seed 5 --steps 4 \
      --compute-us 200 >"${scratch}/demo-${run}.log" 2>&1 ||
      ! grep -Eq '^demo ok: .* mismatches 0 ' "${scratch}/demo-${run}.log"; then
    cat "${scratch}/demo-${run}.log" "${scratch}/blockswapd.log"
    echo "mixed_swap_demos: the demo with --swap ${swap} --ring ${ring} failed" >&2
    exit 1
  fi
done
ctl models
ctl status
ctl --json models >"${scratch}/models.json"
ctl --json status >"${scratch}/status.json"
python3 - "${scratch}/models.json" "${scratch}/status.json" <<'PY'
import json
import sys

models = json.load(open(sys.argv[1]))["models"]
status = json.load(open(sys.argv[2]))
# 64-bit integers are JSON strings (the proto's canonical mapping).
by_blocks = {m["block_count"]: m for m in models}
assert sorted(by_blocks) == [3, 6, 12], "expected models of 3, 6 and 12 blocks: %s" % models
union = int(by_blocks[12]["bytes"])  # the 12-block streaming set contains the others
total = sum(int(m["bytes"]) for m in models)
assert int(status["pinned_bytes"]) == union, (
    "unique master bytes %s, the union of the streamed blocks is %d (the three models: %d)"
    % (status["pinned_bytes"], union, total))
assert int(status["master_blocks"]) == 12, "%s distinct blocks held" % status["master_blocks"]
for count in (3, 6):
    assert by_blocks[count]["shared_bytes"] == by_blocks[count]["bytes"], by_blocks[count]
print("mixed_swap_demos: %d bytes of masters for three models of %d bytes" % (union, total))
PY
kill -TERM "${daemon_pid}"
wait "${daemon_pid}"
daemon_pid=
