#!/bin/sh
# check_trace.sh BLOCKSWAPCTL TRACE
#
# TRACE is a ground-truth schedule of the reference offloader: its first line
# is "# blockswapctl plan ..." and the rest is what that command must print,
# byte for byte. Runs the command and fails, showing the difference, unless
# the output is identical and the command succeeded.
set -eu

ctl=$1
trace=$2

first=$(head -n 1 "$trace")
case $first in
  "# blockswapctl plan "*) ;;
  *)
    echo "$trace: the first line is not a '# blockswapctl plan ...' command: $first" >&2
    exit 1
    ;;
esac
args=${first#"# blockswapctl "}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tail -n +2 "$trace" >"$scratch/expected"

# The recorded command line is split into words on purpose (no quoting in
# it); -f keeps a stray glob character literal.
set -f
status=0
# shellcheck disable=SC2086
"$ctl" $args >"$scratch/actual" 2>"$scratch/stderr" || status=$?
set +f

if [ "$status" -ne 0 ]; then
  echo "blockswapctl $args exited with $status:" >&2
  cat "$scratch/stderr" >&2
  exit 1
fi
if ! cmp -s "$scratch/expected" "$scratch/actual"; then
  echo "blockswapctl $args differs from $trace (--- expected, +++ actual):" >&2
  diff -u "$scratch/expected" "$scratch/actual" >&2 || true
  exit 1
fi
echo "$(basename "$trace"): $(($(wc -l <"$scratch/expected"))) lines identical"
