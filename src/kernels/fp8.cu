// MXFP8 weight kernels (fp8.h): the device quantiser and dequantiser. The quantiser works on bf16 bit
// patterns with integer exponent arithmetic, so it is bit-identical to loader/mxfp8.h whatever the float mode
// (no fp32 subnormal is ever produced or read); the dequantiser widens 16 weights per thread with
// fp8_widen.cuh.
#include "kernels/fp8.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "kernels/fp8_widen.cuh"

namespace m3::cuda {
namespace {

using bf16 = __nv_bfloat16;

// ---- quantisation

// The e8m0 byte of a block whose largest magnitude has the bf16 bits `a` (sign cleared, finite): 127 + the
// smallest X with amax <= 448 x 2^X, clamped to [0, 254] (loader/mxfp8.cc's mxfp8_scale_for, where frexp
// gives amax = m 2^e with m in [0.5, 1); for a normal bf16, e = E - 126 and m = (128 + mantissa) / 256, so
// m <= 0.875 exactly when mantissa <= 96). A subnormal amax needs X < -127: byte 0.
__device__ __forceinline__ int mxfp8_scale_bits(uint32_t a) {
  if (a == 0) return 127;
  const int E = int(a >> 7), mant = int(a & 0x7f);
  if (E == 0) return 0;
  const int e = E - 126;
  const int x = mant <= 96 ? e - 9 : e - 8;
  return min(max(x + 127, 0), 254);
}

// e4m3 of the bf16 `b` times 2^-X, round to nearest even. The scaled value is built exactly from the bits;
// one below 2^-126 (an fp32 subnormal) lies far under e4m3's smallest subnormal 2^-9 and rounds to a signed
// zero, as the host's ldexp + rounding gives.
__device__ __forceinline__ uint8_t quantize_e4m3(uint32_t b, int X) {
  const uint8_t sign = (b & 0x8000u) ? 0x80 : 0x00;
  int E = int((b >> 7) & 0xff);
  uint32_t mant = b & 0x7f;
  if (E == 0) {  // bf16 subnormal mant x 2^-133: normalise to 1.f x 2^(p - 133), biased exponent p - 6
    if (mant == 0) return sign;
    const int p = 31 - __clz(mant);
    mant = (mant << (7 - p)) & 0x7f;
    E = p - 6;
  }
  const int Eq = E - X;
  if (Eq <= 0) return sign;
  const float q = __uint_as_float(uint32_t(sign) << 24 | uint32_t(Eq) << 23 | mant << 16);
  return __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
}

// One warp per block of 32 consecutive inputs (K % 32 == 0, so blocks never straddle rows), lane = element.
__global__ void quantize_kernel(const uint16_t* __restrict__ src, int64_t blocks, uint8_t* __restrict__ w,
                                uint8_t* __restrict__ s) {
  const int64_t blk = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (blk >= blocks) return;  // whole warps
  const int lane = threadIdx.x & 31;
  const uint32_t b = src[blk * 32 + lane];
  const uint32_t amax = __reduce_max_sync(0xffffffffu, b & 0x7fffu);  // magnitudes order as their bits
  const int scale = mxfp8_scale_bits(amax);
  w[blk * 32 + lane] = quantize_e4m3(b, scale - 127);
  if (lane == 0) s[blk] = uint8_t(scale);
}

// One thread per 16 consecutive weights (one 16-byte load, inside one scale block): widened exactly in
// registers (fp8_widen.cuh, scale bytes <= kMaxFp8Scale) and stored as two 16-byte bf16 chunks.
__global__ void dequantize_kernel(const uint4* __restrict__ w, const uint8_t* __restrict__ s, int64_t chunks,
                                  uint4* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < chunks;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint4 first, second;
    widen_e4m3x16(__ldg(w + i), fp8_scale_bf16x2(__ldg(s + i / 2)), first, second);
    out[2 * i] = first;
    out[2 * i + 1] = second;
  }
}

}  // namespace

void quantize_mxfp8(const bf16* src, int64_t rows, int K, uint8_t* w, uint8_t* s, cudaStream_t st) {
  if (K % kFp8Block != 0) fail(ErrorKind::kInvalidArgument, "quantize_mxfp8: K % 32 != 0");
  const int64_t blocks = rows * (K / kFp8Block);
  if (blocks <= 0) return;
  const int threads = 256;
  quantize_kernel<<<unsigned((blocks * 32 + threads - 1) / threads), threads, 0, st>>>(
      reinterpret_cast<const uint16_t*>(src), blocks, w, s);
}

void dequantize_mxfp8(Fp8Matrix m, int64_t rows, int K, bf16* out, cudaStream_t st) {
  if (K % kFp8Block != 0) fail(ErrorKind::kInvalidArgument, "dequantize_mxfp8: K % 32 != 0");
  if (reinterpret_cast<uintptr_t>(m.w) % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 16 != 0)
    fail(ErrorKind::kInvalidArgument, "dequantize_mxfp8: weights and output must be 16-byte aligned");
  const int64_t chunks = rows * K / 16;
  if (chunks <= 0) return;
  const int threads = 256;
  const int64_t grid = std::min<int64_t>((chunks + threads - 1) / threads, 132 * 16);
  dequantize_kernel<<<unsigned(grid), threads, 0, st>>>(reinterpret_cast<const uint4*>(m.w), m.s, chunks,
                                                        reinterpret_cast<uint4*>(out));
}

}  // namespace m3::cuda
