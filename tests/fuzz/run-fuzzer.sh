#!/usr/bin/env bash
# run-fuzzer.sh FUZZER SECONDS WORK_DIR [SEED_DIR...]
# Runs one libFuzzer binary for SECONDS over its seeds, writing new inputs to
# WORK_DIR (created) and a crash reproducer to WORK_DIR/../artifacts/. Exits
# non-zero on a crash, leak, timeout (10 s for one input) or out-of-memory.
# Prints libFuzzer's final statistics (stat::number_of_executed_units...).
set -euo pipefail
fuzzer=$1 seconds=$2 work=$3
shift 3
mkdir -p "$work" "$work/../artifacts"
for seeds in "$@"; do mkdir -p "$seeds"; done
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/../artifacts/" "$work" "$@"
