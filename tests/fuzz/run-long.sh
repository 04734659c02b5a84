#!/usr/bin/env bash
# run-long.sh NAME SECONDS [BUILD_DIR]
# A long run of fuzzer NAME (built in configuration B, default build dir
# build/sanitize): regenerates its seeds when it has a seed test, then fuzzes
# for SECONDS with the corpus kept in BUILD_DIR/fuzz/NAME/work, so later runs
# start from what earlier ones found. Meant for the background, e.g.
#   nice -n 19 tests/fuzz/run-long.sh safetensors_header_fuzzer 600 > fuzz.log 2>&1 &
set -euo pipefail
name=$1 seconds=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${3:-$root/build/sanitize}
fuzzer=$build/bin/$name
[[ -x $fuzzer ]] || { echo "run-long: $fuzzer not built (configuration B)" >&2; exit 2; }
dir=$build/fuzz/$name
# grep reads all of ctest's output: with -q it would stop at the first match,
# and ctest's SIGPIPE would fail the pipeline (pipefail) and skip the seeds.
if ctest --test-dir "$build" -N -R "^fuzz\\.$name\\.seeds\$" | grep "fuzz.$name.seeds" >/dev/null; then
  ctest --test-dir "$build" -R "^fuzz\\.$name\\.seeds\$" --output-on-failure >/dev/null
fi
exec "$root/tests/fuzz/run-fuzzer.sh" "$fuzzer" "$seconds" "$dir/work" "$dir/seeds"
