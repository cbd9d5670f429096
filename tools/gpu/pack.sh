#!/usr/bin/env bash
# Builds the CUDA binaries here (sm_90a) and packs them with the shared libraries the GPU machine's image lacks
# into build-gpu/ (git-ignored), to be carried to the device with `run(carry=["build-gpu"])`.
# M3_PACK_NODE=1 also packs node and the e2e suite's npm packages (xz, ~26 MB) so check.sh can run the server
# e2e suite on --device cuda there (the device image has no node).
# Why not build there: the device image has nvcc and cmake but not this project's Debian -dev packages
# (CLI11, PCRE2, utf8proc, yaml-cpp, Boost, brotli, GoogleTest), and it cannot install any.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-cuda}
cmake -S . -B "$BUILD" -G Ninja -DM3_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target m3 cuda_test m3-kernel-bench
rm -rf build-gpu && mkdir -p build-gpu/lib
cp "$BUILD/m3" "$BUILD/tests/gpu/cuda_test" "$BUILD/benchmarks/m3-kernel-bench" build-gpu/
strip --strip-debug build-gpu/m3 build-gpu/cuda_test build-gpu/m3-kernel-bench
# Every shared library that is neither the C/C++ runtime nor CUDA's (the device image has those).
ldd build-gpu/m3 build-gpu/cuda_test build-gpu/m3-kernel-bench | awk '/=> \//{print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libcudart|libcublas[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" build-gpu/lib/; done
if [ "${M3_PACK_NODE:-0}" = 1 ]; then
  # The carry limit (64 MiB with the tree) needs everything compressed: check.sh unpacks it in place.
  tar -C build-gpu -cJf bundle.tar.xz m3 cuda_test m3-kernel-bench lib && rm -rf build-gpu/* && mv bundle.tar.xz build-gpu/
  mkdir -p build-gpu/node
  cache=${M3_NODE_CACHE:-/tmp/m3-node-cache}
  mkdir -p "$cache"
  [ -s "$cache/node.xz" ] || xz -T0 -6 -c "$(readlink -f "$(command -v node)")" >"$cache/node.xz"
  cp "$cache/node.xz" build-gpu/node/
  tar -C tests/e2e/server -cJf build-gpu/node/node_modules.tar.xz node_modules
fi
du -sh build-gpu
