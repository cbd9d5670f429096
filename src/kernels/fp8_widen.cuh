// Widening of FP8 to bf16 in registers: MXFP8 weights (kernels/fp8.h) exactly, FP8 KV rows with their scale.
// MXFP8 weights: for an e4m3 byte b, the bf16 whose
// bits are ((b & 0x80) << 8) | ((b & 0x7f) << 4) is e4m3(b) x 2^-120, subnormals included (both formats'
// subnormals sit 2^-120 apart once e4m3's exponent field lands in bf16's low exponent bits); multiplying by
// the bf16 power of two 2^(s - 7) then gives e4m3(b) x 2^(s - 127), exactly (a power-of-two product; bf16
// keeps e4m3's 3 mantissa bits). Valid for scale bytes s <= kMaxFp8Scale (fp8.h; the loaders check).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/fp8.h"

namespace m3::cuda {

// bf16x2 register holding 2^(s - 7) in both halves.
__device__ __forceinline__ uint32_t fp8_scale_bf16x2(uint32_t s) {
  const uint32_t h = (s + 120u) << 7;
  return h | (h << 16);
}

// The four e4m3 bytes of w (lowest byte = lowest column) as two bf16x2 registers (lo: bytes 0, 1; hi: bytes
// 2, 3), each value times 2^(s - 127) given scale2 = fp8_scale_bf16x2(s).
__device__ __forceinline__ void widen_e4m3x4(uint32_t w, uint32_t scale2, uint32_t& lo, uint32_t& hi) {
  const uint32_t a = __byte_perm(w, 0u, 0x4140u), b = __byte_perm(w, 0u, 0x4342u);
  const uint32_t ua = ((a & 0x00800080u) << 8) | ((a & 0x007f007fu) << 4);
  const uint32_t ub = ((b & 0x00800080u) << 8) | ((b & 0x007f007fu) << 4);
  __nv_bfloat162 va = *reinterpret_cast<const __nv_bfloat162*>(&ua);
  __nv_bfloat162 vb = *reinterpret_cast<const __nv_bfloat162*>(&ub);
  const __nv_bfloat162 sc = *reinterpret_cast<const __nv_bfloat162*>(&scale2);
  va = __hmul2(va, sc);
  vb = __hmul2(vb, sc);
  lo = *reinterpret_cast<const uint32_t*>(&va);
  hi = *reinterpret_cast<const uint32_t*>(&vb);
}

// 16 e4m3 bytes as 16 bf16 (two uint4 of 8 columns each, in column order).
__device__ __forceinline__ void widen_e4m3x16(uint4 w, uint32_t scale2, uint4& first, uint4& second) {
  widen_e4m3x4(w.x, scale2, first.x, first.y);
  widen_e4m3x4(w.y, scale2, first.z, first.w);
  widen_e4m3x4(w.z, scale2, second.x, second.y);
  widen_e4m3x4(w.w, scale2, second.z, second.w);
}

// FP8 KV rows (kernels.h KvPages): 16 e4m3 bytes times an fp32 scale, rounded to bf16 (nearest even), as two
// uint4 of 8 columns each. e4m3 -> f16 is exact (cvt.rn.f16x2.e4m3x2), so the only rounding is the bf16 of
// the scaled value (2^-9 relative, small beside e4m3's own 2^-4).
__device__ __forceinline__ uint32_t e4m3x2_scaled_bf16x2(uint32_t two, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
  return *reinterpret_cast<const uint32_t*>(&b);
}
__device__ __forceinline__ void widen_e4m3x16_scaled(uint4 w, float scale, uint4& first, uint4& second) {
  first.x = e4m3x2_scaled_bf16x2(w.x & 0xffffu, scale), first.y = e4m3x2_scaled_bf16x2(w.x >> 16, scale);
  first.z = e4m3x2_scaled_bf16x2(w.y & 0xffffu, scale), first.w = e4m3x2_scaled_bf16x2(w.y >> 16, scale);
  second.x = e4m3x2_scaled_bf16x2(w.z & 0xffffu, scale), second.y = e4m3x2_scaled_bf16x2(w.z >> 16, scale);
  second.z = e4m3x2_scaled_bf16x2(w.w & 0xffffu, scale), second.w = e4m3x2_scaled_bf16x2(w.w >> 16, scale);
}

}  // namespace m3::cuda
