#!/usr/bin/env bash
# Quick start: installs the dependencies, builds blockswap into build/, and
# runs two blockswap-demo trainers at once against a private blockswapd
# (the host backend where there is no GPU), sharing one model; shows
# `blockswapctl residency` and `stats` while they run and after. Then the
# same with two blockswap-torch-demo LoRA trainers (LibTorch from the torch
# wheel that install-deps.sh puts in its Python environment).
#
#   deploy/quickstart.sh [BLOCKSWAP_DEMO_ARGS...]
#
# Defaults: --blocks 12 --swap 6 --ring 2 --block-bytes 4194304 --steps 10
# --compute-us 2000 (arguments given are appended and win). BLOCKSWAP_BUILD_DIR
# overrides build/. The first run is traced (`blockswapctl trace`): the trace
# JSON and its timeline PNG are left in build/quickstart/ and their paths
# printed. Exits 0 only if both demos verified their blocks with a
# non-zero number of loads and the daemon stopped cleanly on SIGTERM; the
# daemon and its temporary socket and master directory are removed whatever
# happens (tests/demo/two_demos.sh does the running).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BLOCKSWAP_BUILD_DIR:-${root}/build}

echo "=== quickstart: dependencies (deploy/install-deps.sh)"
venv=$("${root}/deploy/install-deps.sh" --print-venv | tail -n 1)
torch_prefix=$("${venv}/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')

echo "=== quickstart: building into ${build}"
# Keeps whatever else build/ is configured with (e.g. tests/run.sh's A).
torch_args=(-DBLOCKSWAP_WITH_TORCH=ON -DCMAKE_PREFIX_PATH="${torch_prefix}")
if [[ -f ${build}/CMakeCache.txt ]]; then
  cmake -S "${root}" -B "${build}" "${torch_args[@]}" >/dev/null
else
  cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${torch_args[@]}"
fi
cmake --build "${build}" -j "$(nproc)" \
  --target blockswapd blockswapctl blockswap-demo blockswap-torch-demo

echo "=== quickstart: two demos, one model (traced into ${build}/quickstart/)"
BLOCKSWAP_TRACE_DIR="${build}/quickstart" "${root}/tests/demo/two_demos.sh" "${build}/bin" \
  --blocks 12 --swap 6 --ring 2 --block-bytes 4194304 --steps 10 --compute-us 2000 "$@"

echo "=== quickstart: two LibTorch LoRA trainers, one model"
BLOCKSWAP_DEMO=blockswap-torch-demo "${root}/tests/demo/two_demos.sh" "${build}/bin" \
  --blocks 12 --swap 6 --ring 2 --steps 5 --dim 64
echo "=== quickstart: ok"
echo "trace of the first run: ${build}/quickstart/run.json (Perfetto: https://ui.perfetto.dev), timeline: ${build}/quickstart/run.png"
