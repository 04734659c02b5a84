#!/usr/bin/env bash
# Builds blockswap's container image from deploy/docker/Dockerfile, with the
# repository's root as the context, and tags it blockswap:<version> (the
# version in CMakeLists.txt; deploy/k8s/ names that tag).
#   deploy/docker/build.sh [--tag NAME:TAG] [--cuda-image IMAGE] [--push]
# --cuda-image picks the CUDA 13 devel image the toolkit is taken from (its
# glibc must not be newer than Debian 12's). Needs docker (or podman as
# `docker`) with network access to the base images' registry.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
version=$(sed -n 's/^project(blockswap VERSION \([0-9.]*\).*/\1/p' "${root}/CMakeLists.txt")
[[ -n ${version} ]] || { echo "build.sh: no project version in ${root}/CMakeLists.txt" >&2; exit 1; }
tag=blockswap:${version}
build_args=()
push=false
while (($#)); do
  case $1 in
    --tag) tag=$2; shift 2 ;;
    --cuda-image) build_args+=(--build-arg "CUDA_IMAGE=$2"); shift 2 ;;
    --push) push=true; shift ;;
    -h|--help) sed -n '2,8p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "build.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
command -v docker >/dev/null ||
  { echo "build.sh: docker is not installed (apt-get install docker.io, or podman-docker)" >&2; exit 2; }

docker build -f "${root}/deploy/docker/Dockerfile" -t "${tag}" "${build_args[@]}" "${root}"
if ${push}; then docker push "${tag}"; fi
echo "build.sh: built ${tag}"
