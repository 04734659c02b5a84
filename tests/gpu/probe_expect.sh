#!/usr/bin/env bash
# Runs blockswap-primitives-probe (over the stand-in CUDA driver, as ctest's
# standin.primitives_probe* entries call it) and checks its lines:
#
#   [PROBE_EXPECT_ROOT=1] probe_expect.sh PROBE [FAIL_REGEX...]
#
# PROBE_EXPECT_ROOT=1 says the expectation holds only as root (process B as
# another user): exit 77 (ctest's SKIP_RETURN_CODE) otherwise.
#
# Every CUDA line must run (no "SKIP cuda." line; but for the cross-uid line
# when B cannot be another user: not root), and the FAIL lines must be
# exactly the expected ones: each FAIL line matches one FAIL_REGEX and each
# FAIL_REGEX matches a FAIL line (none given: no FAIL line at all, exit 0).
# A stand-in that passes shows that the probe's code keeps CUDA's rules and
# that its lines run before they first meet a GPU, not that a GPU works.
set -uo pipefail
probe=${1:?usage: probe_expect.sh PROBE [FAIL_REGEX...]}
shift
if [[ ${PROBE_EXPECT_ROOT:-} == 1 && $(id -u) != 0 ]]; then
  echo "probe_expect: not root, so process B cannot be another user: not run"
  exit 77
fi
output=$("${probe}" 2>&1)
code=$?
printf '%s\n' "${output}"
verdict=0
if grep '^SKIP cuda\.' <<<"${output}" |
  grep -vq "^SKIP cuda\.vmm-fd\.import\.cross-uid: not run: B runs as A's own user"; then
  echo "probe_expect: a CUDA line was skipped: over the stand-in every one must run" >&2
  verdict=1
fi
while IFS= read -r line; do
  expected=0
  for regex in "$@"; do [[ ${line} =~ ${regex} ]] && expected=1; done
  if ((!expected)); then
    echo "probe_expect: unexpected: ${line}" >&2
    verdict=1
  fi
done < <(grep '^FAIL ' <<<"${output}")
for regex in "$@"; do
  if ! grep '^FAIL ' <<<"${output}" | grep -Eq -- "${regex}"; then
    echo "probe_expect: no FAIL line matches '${regex}'" >&2
    verdict=1
  fi
done
want=$(($# > 0 ? 1 : 0))
if ((code != want)); then
  echo "probe_expect: the probe exited ${code}, expected ${want}" >&2
  verdict=1
fi
exit "${verdict}"
