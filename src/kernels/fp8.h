// MXFP8 weights on the device and the kernels that convert them (the GEMVs that read them are in kernels.h).
// A weight matrix [N, K] is kept as the MXFP8 checkpoint stores it: N x K fp8-e4m3 bytes (row-major, OCP
// "fn") and N x K/32 e8m0 scale bytes, element (n, k) = e4m3(w[n K + k]) x 2^(s[n (K/32) + k/32] - 127). A
// product of an e4m3 value and a power of two is exact in bf16, so the kernels widen weights to bf16 and
// multiply on bf16 tensor cores with fp32 accumulation: the same products as a BF16 model whose weights are
// the dequantised values.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace m3::cuda {

constexpr int kFp8Block = 32;  // inputs per e8m0 scale
// The largest scale byte the kernels take (2^7: weights up to 57344 in magnitude); the loaders check it.
constexpr int kMaxFp8Scale = 134;

struct Fp8Matrix {
  const uint8_t* w = nullptr;  // [N, K] e4m3
  const uint8_t* s = nullptr;  // [N, K / 32] e8m0
};

// w, s = MXFP8 of bf16 rows [rows, K] (K % 32 == 0): per block of 32 the smallest power-of-two scale that
// keeps every value within 448, values rounded to nearest even. Bit-identical to loader/mxfp8.h.
void quantize_mxfp8(const __nv_bfloat16* src, int64_t rows, int K, uint8_t* w, uint8_t* s, cudaStream_t st);
// out [rows, K] bf16 = the dequantised values (exact; scale bytes <= kMaxFp8Scale; 16-byte aligned): how
// prefill-sized batches run FP8 linear layers (then a bf16 GEMM).
void dequantize_mxfp8(Fp8Matrix m, int64_t rows, int K, __nv_bfloat16* out, cudaStream_t st);

}  // namespace m3::cuda
