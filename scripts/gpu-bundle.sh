#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh --no-build needs onto a GPU machine that has nvcc's runtime but not this
# project's Debian packages (the `device` tool's nvidia-h200 image: no Boost/spdlog/ICU, no zstd, no apt access):
# the release build's tessera, cuda_test, conformance_test, vulkan_test and vulkan_families_test, stripped, and
# every shared library they load except glibc's and the compiler runtime's, into one gzip tarball (~30 MB).
# Usage: bash scripts/gpu-bundle.sh [OUT.tgz]   (default .gpu/b.tgz; add /.gpu/ to .git/info/exclude)
# On the GPU machine, in a copy of the repository: tar -xzf .gpu/b.tgz && LD_LIBRARY_PATH=$PWD/.gpulib \
#   bash scripts/gpu-check.sh --no-build   (vulkan there also needs the loader's GL packages: docs/gpu-check.md)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.gpu/b.tgz}"
bash scripts/build release tessera cuda_test conformance_test vulkan_test vulkan_families_test >/dev/null
grep -q 'cuda/kernels.cu.o' build/release/build.ninja ||
  { echo "gpu-bundle: build/release has no cuda backend (no nvcc at configure time)" >&2; exit 1; }
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/release/bin" "$stage/build/release/tests" "$stage/.gpulib"
cp build/release/bin/tessera "$stage/build/release/bin/"
for t in cuda_test conformance_test vulkan_test vulkan_families_test; do cp "build/release/tests/$t" "$stage/build/release/tests/"; done
strip "$stage/build/release/bin/tessera" "$stage"/build/release/tests/*
for b in "$stage/build/release/bin/tessera" "$stage"/build/release/tests/*; do ldd "$b"; done |
  awk '/=>/ {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so|ld-linux' |
  while read -r lib; do cp -L "$lib" "$stage/.gpulib/"; done
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - build .gpulib | gzip -6 >"$out"
echo "gpu-bundle: $out ($(du -h "$out" | cut -f1)): $(ls "$stage/.gpulib" | wc -l) libraries"
