#!/usr/bin/env bash
# Prints, one per line, the Debian packages that the programs and libraries
# under a staged install tree (deploy/install.sh --destdir DIR) need at run
# time: the packages owning the shared libraries they load, less the ones the
# tree itself provides. Run where the tree was built (the Dockerfile's build
# stage), so that the names match that Debian release.
#   runtime-packages.sh STAGE_DIR
set -euo pipefail

stage=${1:?usage: runtime-packages.sh STAGE_DIR}
[[ -d ${stage} ]] || { echo "runtime-packages.sh: ${stage} is not a directory" >&2; exit 2; }

# ELF files only: the tree also holds scripts, headers and docs.
mapfile -t elves < <(find "${stage}" -type f \( -perm -u+x -o -name '*.so*' \) -print0 |
  xargs -0 -r file --no-pad | sed -n 's/: *ELF .*dynamically linked.*//p')
((${#elves[@]})) || { echo "runtime-packages.sh: no dynamically linked program under ${stage}" >&2; exit 1; }

libs=$(for elf in "${elves[@]}"; do
  # ldd says "not found" for the tree's own libraries (they are not installed yet).
  LD_LIBRARY_PATH=$(find "${stage}" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:) \
    ldd "${elf}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u)

for lib in ${libs}; do
  case ${lib} in "${stage}"/*) continue ;; esac
  # /lib is a link to /usr/lib on merged-/usr systems; dpkg knows one of them.
  real=$(readlink -f "${lib}")
  owner=$(dpkg -S "${lib}" 2>/dev/null || dpkg -S "${real}" 2>/dev/null ||
          dpkg -S "${real#/usr}" 2>/dev/null) ||
    { echo "runtime-packages.sh: no Debian package owns ${lib}" >&2; exit 1; }
  echo "${owner%%:*}"
done | sort -u
