#!/usr/bin/env bash
# `make dist`: builds `m3` (Release) in its own build dir and packs it as a relocatable bundle,
#   dist/m3serve-<version>-<arch>[-cuda<major>]/{bin/m3, lib/, share/m3serve/README.md} and a .tar.gz of it,
# that runs from any directory on any x86_64 Linux host whose glibc is at least the one printed at the end.
# bin/* find lib/ through RUNPATH $ORIGIN/../lib; each lib/ entry has RUNPATH $ORIGIN, so the libraries' own
# dependencies resolve inside lib/ too. Verified at the end: `env -i bin/m3 --version` runs (with every symbol
# bound) and ldd resolves every bundled library inside lib/; otherwise the script fails.
#
# What goes into lib/: every shared library bin/* need, as ldd resolves them, and recursively what those need
# (whatever they are: yaml-cpp, PCRE2, Open MPI, ...), except
#   - glibc (libc, libm, libpthread, libdl, librt, ld-linux, ...): it is tied to the host's loader; the host's
#     glibc must be at least the newest GLIBC_ symbol version the bundle uses (printed, and in the README);
#   - the NVIDIA driver's libraries (libcuda, libnvidia-*): they must match the host's kernel driver.
# libstdc++, libgcc_s and libgomp ARE bundled: target hosts may have older ones than the build host.
# CUDA runtime libraries (libcudart, libcublas, libcublasLt, anything resolved from the CUDA toolkit): the
#   CUDA build links them dynamically today, so they are bundled by default (~600 MB, mostly libcublasLt) and the
#   bundle runs on a host that has only the NVIDIA driver. A statically linked runtime simply does not show up
#   in ldd and there is nothing to copy. M3_DIST_CUDA_LIBS=0 leaves them out, for hosts and images that have the
#   same CUDA major's runtime, such as the GPU machine of tools/gpu (pack.sh). (The Dockerfile keeps the full
#   bundle and drops, at image build time, every library the NVIDIA CUDA runtime image has itself.)
# Open MPI: its libraries are bundled like any other, but MPI_Init also loads plugins and help files from the
#   Open MPI installation, and mpirun is not bundled: multi-rank runs need Open MPI on the host (or the image).
#
# Environment (the Makefile passes its own values):
#   CUDA=0|1 (default: 1 when nvcc is found, as in the Makefile), NVCC, DIST_BUILD (build-dist), DIST_DIR (dist),
#   JOBS, CMAKE_ARGS (extra cmake arguments), M3_DIST_OUT (bundle directory; default DIST_DIR/<name>),
#   M3_DIST_TARBALL=1|0, M3_DIST_CUDA_LIBS=1|0, M3_DIST_EXCLUDE (extended regex of library names to leave to the
#   host, e.g. '^lib(mpi|open-pal|open-rte)\.'), M3_DIST_EXTRA (more binaries of the build dir to bundle in bin/,
#   as paths relative to it; their file names are the cmake targets, e.g. "tests/gpu/cuda_test").
# `bundle.sh --name` prints the bundle's name and exits.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

die() { echo "bundle.sh: error: $*" >&2; exit 1; }

if [ -z "${CUDA:-}" ]; then  # the Makefile's rule
  if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then CUDA=1; else CUDA=0; fi
fi
if [ "$CUDA" = 1 ] && [ -z "${NVCC:-}" ]; then NVCC=$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc); fi

VERSION=$(sed -n 's/^project(m3serve VERSION \([0-9][0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$VERSION" ] || die "no 'project(m3serve VERSION x.y.z' in CMakeLists.txt"
ARCH=$(uname -m)
NAME=m3serve-$VERSION-$ARCH
CUDA_MAJOR=
if [ "$CUDA" = 1 ]; then
  CUDA_MAJOR=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  [ -n "$CUDA_MAJOR" ] || die "cannot read the CUDA version from '$NVCC --version'"
  NAME=$NAME-cuda$CUDA_MAJOR
fi
if [ "${1:-}" = --name ]; then echo "$NAME"; exit 0; fi

DIST_BUILD=${DIST_BUILD:-build-dist}
DIST_DIR=${DIST_DIR:-dist}
JOBS=${JOBS:-$(nproc)}
OUT=${M3_DIST_OUT:-$DIST_DIR/$NAME}
CUDA_LIBS=${M3_DIST_CUDA_LIBS:-1}
EXCLUDE=${M3_DIST_EXCLUDE:-}
EXTRA=${M3_DIST_EXTRA:-}
command -v patchelf >/dev/null || die "patchelf is not installed (make deps installs it)"

# --- build ----------------------------------------------------------------------------------------------------
cmake_args=(-S . -B "$DIST_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release)
if [ "$CUDA" = 1 ]; then
  cmake_args+=(-DM3_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC")
else
  cmake_args+=(-DM3_CUDA=OFF)
fi
if command -v ccache >/dev/null; then
  cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  [ "$CUDA" = 1 ] && cmake_args+=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}  # hits across build dirs (build-dist, build-cuda, ...)
fi
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of words
cmake "${cmake_args[@]}" ${CMAKE_ARGS:-} >/dev/null
targets=(m3)
for b in $EXTRA; do targets+=("$(basename "$b")"); done
cmake --build "$DIST_BUILD" -j "$JOBS" --target "${targets[@]}"

# --- bin/ and share/ ----------------------------------------------------------------------------------------------
case "$OUT" in ""|/|.|"$ROOT") die "refusing to write the bundle into '$OUT'";; esac
rm -rf "$OUT" "$OUT.tar.gz"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/share/m3serve"
OUT=$(cd "$OUT" && pwd -P)
cp "$DIST_BUILD/m3" "$OUT/bin/"
for b in $EXTRA; do cp "$DIST_BUILD/$b" "$OUT/bin/"; done
strip --strip-debug "$OUT"/bin/*

# --- lib/ -------------------------------------------------------------------------------------------------------
SYSTEM_RE='^(linux-vdso|linux-gate|ld-linux.*|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libnsl|libBrokenLocale|libthread_db|libnss_.*|libcuda|libnvidia-.*)\.so'
CUDA_RE='^lib(cudart|cublas|cublasLt|nvrtc|nvrtc-builtins|nvJitLink|cufft|curand|cusolver|cusparse|nccl|nvshmem.*)\.so'
CUDA_ROOT=
[ "$CUDA" = 1 ] && CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
is_cuda_lib() {  # name, resolved path
  [[ $1 =~ $CUDA_RE ]] && return 0
  [ -n "$CUDA_ROOT" ] && [[ $(readlink -f "$2") == "$CUDA_ROOT"/* ]]
}
# The direct dependencies (DT_NEEDED) of a file, and where ldd resolves one of them ("not" when it cannot).
needed_of() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }
ldd_of() { env -u LD_LIBRARY_PATH -u LD_PRELOAD ldd "$1" 2>&1 || true; }
path_in() { awk -v n="$2" '$1 == n && $2 == "=>" { print $3; exit }' <<<"$1"; }

# Walk the dependency tree from bin/*: a bundled library's own dependencies are walked in turn; those of a library
# left to the host are the host's business.
declare -A seen=()
bundled=() left_to_host=()
queue=("$OUT"/bin/*)
while [ ${#queue[@]} -gt 0 ]; do
  next=()
  for obj in "${queue[@]}"; do
    lddout=$(ldd_of "$obj")
    for name in $(needed_of "$obj"); do
      [ -n "${seen[$name]:-}" ] && continue
      seen[$name]=1
      [[ $name =~ $SYSTEM_RE ]] && continue
      path=$(path_in "$lddout" "$name")
      [ -n "$path" ] || die "ldd does not list $name, which $(basename "$obj") needs"
      [ "$path" != not ] || die "$name (needed by $(basename "$obj")) is not found on this host"
      if [ -n "$EXCLUDE" ] && [[ $name =~ $EXCLUDE ]]; then left_to_host+=("$name"); continue; fi
      if [ "$CUDA_LIBS" != 1 ] && is_cuda_lib "$name" "$path"; then left_to_host+=("$name"); continue; fi
      cp -L "$path" "$OUT/lib/$name"
      chmod u+w "$OUT/lib/$name"
      bundled+=("$name")
      next+=("$OUT/lib/$name")
    done
  done
  queue=("${next[@]}")
done

# Left to the host, the CUDA runtime libraries are found through the loader's cache or, failing that, in
# /usr/local/cuda/lib64 (CUDA installs and NVIDIA's images keep them there); a missing RUNPATH entry is harmless.
# shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell
bin_rpath='$ORIGIN/../lib'
[ "$CUDA" = 1 ] && [ "$CUDA_LIBS" != 1 ] && bin_rpath+=:/usr/local/cuda/lib64
for f in "$OUT"/bin/*; do patchelf --set-rpath "$bin_rpath" "$f"; done
# shellcheck disable=SC2016
for f in "$OUT"/lib/*; do if [ -f "$f" ]; then patchelf --set-rpath '$ORIGIN' "$f"; fi; done

# --- verify -------------------------------------------------------------------------------------------------------
declare -A in_bundle=()
for n in "${bundled[@]}"; do in_bundle[$n]=1; done
for obj in "$OUT"/bin/* "$OUT"/lib/*; do
  lddout=$(ldd_of "$obj")
  missing=$(grep 'not found' <<<"$lddout" | grep -v -E '^\s*(libcuda|libnvidia-[^ ]*)\.so[^ ]* => not found' || true)
  [ -z "$missing" ] || { echo "$missing" >&2; die "ldd $obj reports missing libraries or symbol versions"; }
  for name in $(needed_of "$obj"); do
    [ -n "${in_bundle[$name]:-}" ] || continue
    path=$(path_in "$lddout" "$name")
    [ "$(readlink -f "$path")" = "$OUT/lib/$name" ] || die "$(basename "$obj") finds $name at '$path', not in lib/"
  done
done
version_out=$(env -i LD_BIND_NOW=1 "$OUT/bin/m3" --version 2>&1) || die "env -i bin/m3 --version failed: $version_out"
grep -q "$VERSION" <<<"$version_out" || echo "warning: 'm3 --version' says '$version_out', CMakeLists.txt says $VERSION" >&2
GLIBC_MIN=$(objdump -T "$OUT"/bin/* "$OUT"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)

# --- README, tarball ------------------------------------------------------------------------------------------
if [ "$CUDA" = 1 ]; then
  if [ "$CUDA_LIBS" = 1 ]; then where="are in lib/"; else where="(${left_to_host[*]:-none}) must come from the host"; fi
  needs="For --device cuda (H100/H200): an NVIDIA driver for CUDA $CUDA_MAJOR (R580 or newer); the CUDA runtime
libraries $where."
else
  needs="This build has the CPU backend only."
fi
mpi_note=
if [[ " ${bundled[*]} ${left_to_host[*]} " == *" libmpi.so"* ]]; then
  mpi_note="
Multi-rank runs (--tensor-parallel-size > 1) also need Open MPI 4.1 on the host: mpirun and the plugins that
MPI_Init loads (lib/ has only the libraries bin/m3 links).
"
fi
cat >"$OUT/share/m3serve/README.md" <<EOF
# m3serve $VERSION ($ARCH${CUDA_MAJOR:+, CUDA $CUDA_MAJOR})

A relocatable build of m3serve, the MiniMax-M3 inference server: unpack it anywhere and run \`bin/m3\`; it finds
its libraries in \`lib/\` by itself (RUNPATH \`\$ORIGIN/../lib\`, no LD_LIBRARY_PATH needed).

Host requirements: Linux $ARCH with glibc >= $GLIBC_MIN.
$needs
$mpi_note
    bin/m3 --help                      # every command
    bin/m3 serve --help                # every serve flag
    bin/m3 serve MODEL                 # MODEL: a Hugging Face checkpoint directory; OpenAI / Anthropic API on :8000
    bin/m3 serve /models/MiniMax-M3 --served-model-name minimax-m3
    curl -s localhost:8000/v1/models

Docker, Slurm and multi-node launches: docs/deployment.md in the m3serve source tree.
EOF
echo "bundled: ${bundled[*]:-nothing}"
[ ${#left_to_host[@]} -gt 0 ] && echo "left to the host: ${left_to_host[*]}"
echo "$version_out; needs glibc >= $GLIBC_MIN"
if [ "${M3_DIST_TARBALL:-1}" = 1 ]; then
  gz=gzip; command -v pigz >/dev/null && gz=pigz
  tar -C "$(dirname "$OUT")" --owner=0 --group=0 --numeric-owner --sort=name -cf - "$(basename "$OUT")" |
    $gz -6 >"$OUT.tar.gz"
  echo "$OUT.tar.gz: $(du -h "$OUT.tar.gz" | cut -f1)"
fi
echo "$OUT: $(du -sh "$OUT" | cut -f1)"
