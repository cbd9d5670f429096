# Sourced by the GPU-machine scripts (check.sh, serve_bench.sh, prefix_bench.sh, grammar_bench.sh,
# multi_gpu.sh, tp_margin.sh): the repository root as the working directory, $OUT for results, build-gpu
# unpacked (pack.sh's bundle), $M3, NVLink multicast off (the device notes say why), and two helpers.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/m3-gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -f build-gpu/bundle.tar.xz ] && [ ! -x build-gpu/bin/m3 ] && tar -C build-gpu -xJf build-gpu/bundle.tar.xz
M3=build-gpu/bin/m3
# build-gpu/bin/* find build-gpu/lib through their RUNPATH. LD_LIBRARY_PATH only as a fallback for binaries that do
# not start without it: set for everything, it would also hand the bundle's libstdc++ to python3 and NVIDIA's tools.
if ! $M3 --version >/dev/null 2>&1; then
  echo "warning: $M3 does not start on its RUNPATH; using LD_LIBRARY_PATH=build-gpu/lib" >&2
  export LD_LIBRARY_PATH="$PWD/build-gpu/lib:${LD_LIBRARY_PATH:-}"
fi

# random_model DIR LAYERS: MiniMax-M3 at real widths with LAYERS (dense+MSA/MoE), config and the real tokenizer
# only (served with --load-format dummy).
random_model() {
  $M3 make-random-model --preset m3 --layers "$2" --config-only --out "$1" \
    --tokenizer-from tests/fixtures/minimax-m3 >/dev/null 2>&1
}
# up PORT [PID]: waits (up to 5 minutes) until the server on PORT answers /health; gives up at once when the
# server's process PID has ended (a startup error).
up() {
  for _ in $(seq 1 1500); do
    curl -sf "127.0.0.1:$1/health" >/dev/null && return 0
    [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null && return 1
    sleep 0.2
  done
  return 1
}
