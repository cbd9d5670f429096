// Launchers of the vision tower's kernels (model/cuda_vision.h): LayerNorm with bias, bias (+ exact GELU),
// the 3D RoPE of q and k, and the row softmax of attention scores. fp32 in; bf16 out where a GEMM reads next.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace m3::cuda {

// out[r] = (x[r] - mean) / sqrt(var + eps) * w + b over rows of `dim` (biased variance): as bf16 into `out`
// and, when out_f32 is set, as fp32 too (in place is allowed: out_f32 == x).
void layer_norm_bias(const float* x, const float* w, const float* b, int rows, int dim, float eps,
                     __nv_bfloat16* out, float* out_f32, cudaStream_t s);
// y[r][c] += bias[c]; with gelu, out_bf16[r][c] = gelu(y[r][c]) (exact erf) and y is left as it was plus
// bias. Either output may be null: y_out (fp32, y + bias, in place when y_out == y), out_bf16 (bf16 of the
// result, after the GELU when gelu).
void bias_act(const float* y, const float* bias, int64_t rows, int cols, bool gelu, float* y_out,
              __nv_bfloat16* out_bf16, cudaStream_t s);
// q, k: [n][heads][head_dim] fp32 rows of width ld (q and k may share one buffer with different offsets),
// RoPE'd in place: dims i and i + R/2 (i < R/2 = angles) rotate by cos / sin[row][i] ([n][angles]); then
// written as bf16 to q_out / k_out ([n][heads * head_dim]).
void vision_rope(const float* q, const float* k, int64_t ld, const float* cos, const float* sin, int n,
                 int heads, int head_dim, int angles, __nv_bfloat16* q_out, __nv_bfloat16* k_out,
                 cudaStream_t s);
// Rows of `cols` scores (already scaled): p = softmax(row), as bf16.
void softmax_rows(const float* scores, int64_t rows, int cols, __nv_bfloat16* p, cudaStream_t s);
// out = bf16(x)
void to_bf16(const float* x, int64_t n, __nv_bfloat16* out, cudaStream_t s);

}  // namespace m3::cuda
