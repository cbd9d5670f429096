#!/usr/bin/env bash
# Builds the CUDA binaries here (sm_90a) and packs them with the shared libraries the GPU machine's image lacks
# into build-gpu/ (git-ignored), to be carried to the device with `run(carry=["build-gpu"])`.
# Why not build there: the device image has nvcc and cmake but not this project's Debian -dev packages
# (CLI11, PCRE2, utf8proc, yaml-cpp, cpp-httplib, GoogleTest), and it cannot install any.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-cuda}
cmake -S . -B "$BUILD" -G Ninja -DM3_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target m3 cuda_test
rm -rf build-gpu && mkdir -p build-gpu/lib
cp "$BUILD/m3" "$BUILD/tests/gpu/cuda_test" build-gpu/
strip --strip-debug build-gpu/m3 build-gpu/cuda_test
# Every shared library that is neither the C/C++ runtime nor CUDA's (the device image has those).
ldd build-gpu/m3 build-gpu/cuda_test | awk '/=> \//{print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libcudart|libcublas[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" build-gpu/lib/; done
du -sh build-gpu
