#!/usr/bin/env bash
# make_bundle.sh LIBBLOCKSWAP BLOCKSWAPD VERSION OUT_DIR
#
# Builds a self-contained copy of the blockswap Python package in OUT_DIR:
# the package's sources plus blockswap/_lib/ holding libblockswap.so.1, the
# blockswapd of the same build (the private daemon the library starts when no
# system daemon answers, client/core/private_daemon.h) and the
# shared libraries both need that a trainer's machine may lack (gRPC, protobuf,
# abseil, OpenSSL, c-ares, re2, ...; Debian ships no PIC static builds of
# them: docs/rules.md, "A small C ABI"), debug info stripped, each with the rpath $ORIGIN so that
# they find one another there. Not bundled: the C runtime, libstdc++/libgcc
# and the GPU driver, which the target provides (glibc and libstdc++ at least
# as new as the build machine's). VERSION (CMake's project version) goes into
# blockswap/_version.py. Then: pip install OUT_DIR.
# (CMake: cmake --build build --target blockswap_python_bundle -> build/python)
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 LIBBLOCKSWAP BLOCKSWAPD VERSION OUT_DIR" >&2; exit 2; }
library=$1
daemon=$2
version=$3
out=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for tool in patchelf ldd strip; do
  command -v "${tool}" >/dev/null || { echo "make_bundle: ${tool} is missing (deploy/install-deps.sh installs it)" >&2; exit 1; }
done

rm -rf "${out}"
mkdir -p "${out}/blockswap/_lib"
cp "${here}/pyproject.toml" "${out}/"
cp "${here}"/blockswap/*.py "${out}/blockswap/"
echo "__version__ = \"${version}\"" >"${out}/blockswap/_version.py"
lib_dir="${out}/blockswap/_lib"

soname=$(patchelf --print-soname "${library}")
cp -L "${library}" "${lib_dir}/${soname}"
skip='^(linux-vdso|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|ld-linux|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libnvidia)'
cp -L "${daemon}" "${lib_dir}/blockswapd"
for binary in "${library}" "${daemon}"; do
  ldd "${binary}" | awk '/=> \//{print $1, $3}' | while read -r name path; do
    [[ ${name} =~ ${skip} ]] && continue
    cp -L "${path}" "${lib_dir}/${name}"
  done
  if ldd "${binary}" | grep -q 'not found'; then
    echo "make_bundle: ${binary} has unresolved dependencies:" >&2
    ldd "${binary}" | grep 'not found' >&2
    exit 1
  fi
done
for file in "${lib_dir}"/*; do
  chmod u+w "${file}"
  strip --strip-debug "${file}"
  patchelf --set-rpath '$ORIGIN' "${file}"
done
echo "make_bundle: $(ls "${lib_dir}" | wc -l) libraries, $(du -sh "${out}" | cut -f1) in ${out}"
