#!/usr/bin/env bash
# Every environment variable the product reads is a row of one table,
# shared/base/env_settings.h (issue 49):
#   1. under client/, daemon/, shared/ and tools/ (tests aside), no C++ file
#      but env_settings.cc calls getenv: every read goes through EnvValue;
#   2. every BLOCKSWAP_* name the Python package or the C++ product spells out
#      is a row of the table (a message may name one; none may be new).
# Usage: one_env_table.sh SOURCE_ROOT
set -euo pipefail
root=$1
cd "${root}"
table=shared/base/env_settings.h
failed=0

product_files() {
  { git ls-files -co --exclude-standard client daemon shared tools 2>/dev/null ||
    find client daemon shared tools -type f; } |
    grep -E "\.($1)\$" | grep -vE '(_test\.cc|/tests/|/demo/)' || true
}

# 1. The one read.
reads=$(product_files 'cc|h|hpp' | grep -vx 'shared/base/env_settings.cc' |
  xargs grep -nE '\b(secure_)?getenv\(' || true)
if [[ -n ${reads} ]]; then
  echo "one_env_table.sh: read the environment through EnvValue (${table}), not getenv:" >&2
  printf '%s\n' "${reads}" >&2
  failed=1
fi

# 2. Names.
mapfile -t rows < <(grep -oE 'X\(k[A-Za-z]+, "[A-Z_]+"' "${table}" | grep -oE '"[A-Z_]+"' | tr -d '"')
if ((${#rows[@]} == 0)); then
  echo "one_env_table.sh: no rows found in ${table}" >&2
  exit 1
fi
mapfile -t named < <(product_files 'cc|h|hpp|py' | grep -vx "${table}" |
  xargs grep -ohE '\bBLOCKSWAP_[A-Z][A-Z_]*[A-Z]\b' | sort -u)
for name in "${named[@]}"; do
  # Macros and include guards are C++ names, not variables.
  [[ ${name} == BLOCKSWAP_*_H_ || ${name} == BLOCKSWAP_TEST_HOOKS ]] && continue
  grep -qx -- "${name}" < <(printf '%s\n' "${rows[@]}") && continue
  if product_files 'cc|h|hpp|py' | xargs grep -lE "\"${name}\"|'${name}'|\\\$${name}\b" >/dev/null 2>&1; then
    echo "one_env_table.sh: ${name} is spelled out as a string but is no row of ${table}:" >&2
    product_files 'cc|h|hpp|py' | xargs grep -nE "\"${name}\"|'${name}'|\\\$${name}\b" >&2 || true
    failed=1
  fi
done
exit "${failed}"
