#!/usr/bin/env bash
# Checks that no CUDA runtime is linked into the given binaries
# (docs/backends.md, "How CUDA is reached": CUDA is reached only through the
# driver table of shared/backend/cuda_driver.h):
#   1. the link statement that produced each binary (build.ninja, or the
#      Makefile generator's link.txt) names no cudart archive or library and
#      no libcuda;
#   2. each binary holds no CUDA runtime symbol (nm and nm -D: cudaMalloc,
#      cudaMemcpyAsync, cudaLaunchHostFunc, ... or the runtime's __cudart*).
#      The driver API's own enum tags (cudaError_enum, CUresult's tag) are
#      not the runtime's and are let through.
# Usage: no_cuda_runtime.sh BUILD_DIR BINARY...
# Exits 1 naming every binary and what was found, 0 when all are clean.
set -uo pipefail

build=$1
shift
failed=0

# The link statement of `output` (a path relative to the build directory).
link_statement() {
  local output=$1 target
  if [[ -f ${build}/build.ninja ]]; then
    # Order-only inputs (after " || ") are built first but not linked.
    awk -v out="build ${output}:" '
      index($0, out) == 1 { inside = 1; sub(/ \|\| .*/, ""); print; next }
      inside && /^  / { print; next }
      inside { exit }' "${build}/build.ninja"
  else
    target=$(basename "${output}")
    target=${target#lib}
    target=${target%.so}
    find "${build}" -path "*/CMakeFiles/${target}.dir/link.txt" -exec cat {} +
  fi
}

for binary in "$@"; do
  output=$(realpath --relative-to="${build}" "${binary}")
  statement=$(link_statement "${output}")
  if [[ -z ${statement} ]]; then
    echo "no_cuda_runtime: no link statement for ${output} in ${build}" >&2
    failed=1
    continue
  fi
  if linked=$(grep -oE '[^ ]*(cudart|libcuda\.so|-lcuda\b)[^ ]*' <<<"${statement}" | sort -u) &&
     [[ -n ${linked} ]]; then
    echo "no_cuda_runtime: ${output} is linked with: ${linked//$'\n'/ }" >&2
    failed=1
  fi
  symbols=$( { nm -C "${binary}" 2>/dev/null; nm -D -C "${binary}" 2>/dev/null; } |
    grep -oE '(^|[^A-Za-z0-9_])(cuda[A-Z][A-Za-z0-9_]*|__cudart[A-Za-z0-9_]*)' |
    sed -E 's/^[^A-Za-z0-9_]//' | grep -vE '^cuda[A-Za-z]*_enum$' | sort -u)
  if [[ -n ${symbols} ]]; then
    echo "no_cuda_runtime: ${output} holds CUDA runtime symbols: $(head -n 8 <<<"${symbols}" | tr '\n' ' ')($(wc -l <<<"${symbols}") in all)" >&2
    failed=1
  fi
done
exit "${failed}"
