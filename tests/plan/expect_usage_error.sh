#!/bin/sh
# expect_usage_error.sh MESSAGE BLOCKSWAPCTL ARGS...
#
# Passes when blockswapctl ARGS exits 2 (a usage error) and says MESSAGE (a
# fixed string) on stderr.
set -u
message=$1
shift
status=0
stderr=$("$@" 2>&1 >/dev/null) || status=$?
if [ "$status" -ne 2 ]; then
  echo "expected exit 2, got $status: $*" >&2
  echo "$stderr" >&2
  exit 1
fi
case $stderr in
  *"$message"*) echo "exit 2: $stderr" ;;
  *)
    echo "expected '$message' on stderr, got: $stderr" >&2
    exit 1
    ;;
esac
