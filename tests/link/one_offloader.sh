#!/usr/bin/env bash
# The offloader is written once (client/c_api/c_api_offloader.cc, issue 48):
#   1. under client/, outside the C ABI that defines them, a ring and a
#      scheduler are created in one place, the C ABI's offloader;
#   2. each of the offloader's user-facing messages appears once under client/
#      (tests aside);
#   3. libblockswap.so exports the offloader's entry points.
# Usage: one_offloader.sh SOURCE_ROOT LIBBLOCKSWAP
set -euo pipefail
root=$1
library=$2
failed=0

sources() {
  cd "${root}" && { git ls-files -co --exclude-standard client 2>/dev/null || find client -type f; } |
    grep -E '\.(cc|h|hpp|py)$' | grep -vE '(_test\.cc|/tests/)' || true
}

# 1. Creation calls, definitions and declarations aside.
for call in bs_ring_create bs_scheduler_create; do
  where=$(cd "${root}" && sources | xargs grep -nE "\b${call}\(" |
    grep -vE '^client/include/|^[^:]*:[0-9]+:(int|void) '"${call}"'\(' || true)
  count=$(printf '%s' "${where}" | grep -c . || true)
  if [[ ${count} != 1 || ${where} != client/c_api/c_api_offloader.cc:* ]]; then
    echo "one_offloader.sh: ${call} is called ${count} times under client/ (once, in" \
      "client/c_api/c_api_offloader.cc, expected):" >&2
    printf '%s\n' "${where}" >&2
    failed=1
  fi
done

# 2. The offloader's messages, once each (the public headers' comments aside).
messages=(
  "during CUDA graph capture"
  "but streamed tensors must be frozen"
  "is a meta tensor (never materialised): set"
  "is a meta tensor (never materialised) that no model gives"
  "the model must hold every block"
  "streams, but the selector picked no tensor in it"
  "runs the host backend"
  "runs the cuda backend"
  ") is not one of the devices blockswapd "
  "model_id and model_file are exclusive"
  "BlockSwapConfig.model_select picks the streamed ones"
  "the offloader was never prepared"
  "creating a ring of"
  "which is neither a parameter nor a registered buffer"
)
for message in "${messages[@]}"; do
  count=$( (cd "${root}" && sources | grep -v '^client/include/' | xargs grep -hoF -- "${message}" ||
    true) | grep -c . || true)
  if [[ ${count} != 1 ]]; then
    echo "one_offloader.sh: \"${message}\" appears ${count} times under client/ (once expected):" >&2
    (cd "${root}" && sources | grep -v '^client/include/' | xargs grep -nF -- "${message}" >&2 || true)
    failed=1
  fi
done

# 3. The entry points.
exported=$(nm -D --defined-only "${library}" | awk '{print $NF}' | sed 's/@.*//')
for symbol in bs_offloader_create bs_offloader_connect bs_offloader_use_device \
  bs_offloader_open_model bs_offloader_start bs_offloader_prepare bs_offloader_wait_for_block \
  bs_offloader_after_forward bs_offloader_after_backward bs_offloader_ensure_block \
  bs_offloader_last_pass bs_offloader_close bs_offloader_destroy; do
  if ! grep -qx "${symbol}" <<<"${exported}"; then
    echo "one_offloader.sh: ${library} does not export ${symbol}" >&2
    failed=1
  fi
done
exit "${failed}"
