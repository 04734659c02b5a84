#!/usr/bin/env bash
# The packages' tests over a release build (tests/run.sh runs them after
# building it): the wheel (wheel_test.sh) and the Debian package
# (deb_test.sh), each with the seconds it took; their files are left in
# BUILD_DIR/packages/{wheel,deb}.
#
#   tests/package/run.sh BUILD_DIR
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(realpath "$1")
passed=0
failed=0
for test in wheel deb; do
  started=${SECONDS}
  if "${here}/${test}_test.sh" "${build}" "${build}/packages/${test}"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
  echo "=== package test ${test}: $((SECONDS - started)) s"
done
echo "packages: ${passed} passed, ${failed} failed"
((failed == 0))
