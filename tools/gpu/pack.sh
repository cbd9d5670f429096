#!/usr/bin/env bash
# Builds the CUDA binaries here (sm_90a) and packs them as a relocatable bundle (tools/dist/bundle.sh, the
# `make dist` script) into build-gpu/ (git-ignored), to be carried to the device with `run(carry=["build-gpu"])`:
# build-gpu/bin/{m3,cuda_test,m3-kernel-bench} (side by side, so `m3 bench kernels` finds the bench), build-gpu/lib/
# with every library they need but glibc, the driver and the CUDA 13 runtime libraries (the device image has
# those; leaving them out keeps the carry under its limit), share/. The binaries find lib/ through their RUNPATH.
# M3_PACK_NODE=1 also packs node and the e2e suite's npm packages (xz, ~26 MB) so check.sh can run the server
# e2e suite on --device cuda there (the device image has no node).
# Why not build there: the device image has nvcc and cmake but not this project's Debian -dev packages
# (CLI11, PCRE2, utf8proc, yaml-cpp, Boost, brotli, GoogleTest), and it cannot install any.
set -euo pipefail
cd "$(dirname "$0")/../.."
CUDA=1 NVCC=/usr/local/cuda/bin/nvcc DIST_BUILD=${BUILD:-build-cuda} M3_DIST_OUT=build-gpu M3_DIST_TARBALL=0 \
  M3_DIST_CUDA_LIBS=0 M3_DIST_EXTRA="tests/gpu/cuda_test benchmarks/m3-kernel-bench" tools/dist/bundle.sh
if [ "${M3_PACK_NODE:-0}" = 1 ]; then
  # The carry limit (64 MiB with the tree) needs everything compressed: check.sh unpacks it in place.
  tar -C build-gpu -cJf bundle.tar.xz bin lib share && rm -rf build-gpu/* && mv bundle.tar.xz build-gpu/
  mkdir -p build-gpu/node
  cache=${M3_NODE_CACHE:-/tmp/m3-node-cache}
  mkdir -p "$cache"
  [ -s "$cache/node.xz" ] || xz -T0 -6 -c "$(readlink -f "$(command -v node)")" >"$cache/node.xz"
  cp "$cache/node.xz" build-gpu/node/
  # Claude Code (~400 MB) stays behind: the GPU machine runs the SDK suites, not the `claude -p` one.
  tar -C tests/e2e/server --exclude="node_modules/@anthropic-ai/claude-code*" -cJf build-gpu/node/node_modules.tar.xz \
    node_modules
fi
du -sh build-gpu
