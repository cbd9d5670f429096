// The vision tower's attention as one fused kernel (FlashAttention's online softmax): per (64 query rows,
// head), key/value tiles of 64 rows stream through shared memory, the scores of each tile stay on chip (WMMA
// bf16 MMAs with fp32 accumulators), and only the output is written. Bidirectional, no mask; head_dim a
// multiple of 16.
#include <mma.h>

#include <cmath>

#include "kernels/vision.h"

namespace m3::cuda {
namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kRows = 64;  // query rows per block, key rows per tile
constexpr int kWarps = 4;  // 16 query rows each
constexpr int kMaxHeadDim = 128;

__host__ __device__ int scratch_width(int d) {
  return d > kRows ? d : kRows;
}

size_t smem_bytes(int d) {
  return size_t(3) * kRows * d * sizeof(bf16)                      // Q, K, V tiles
         + size_t(kWarps) * 16 * scratch_width(d) * sizeof(float)  // per warp: scores, then P V
         + size_t(kWarps) * 16 * kRows * sizeof(bf16)              // per warp: probabilities
         + size_t(kWarps) * 16 * d * sizeof(float);                // per warp: the output accumulator
}

// Rows [row0, row0 + 64) of a [len][ld] bf16 matrix, columns [col, col + d), into tile[64][d] (zeros past
// len).
__device__ void load_tile(bf16* tile, const bf16* src, int64_t ld, int col, int row0, int len, int d) {
  const int vectors = d / 8;  // 16-byte pieces of a row
  for (int i = threadIdx.x; i < kRows * vectors; i += blockDim.x) {
    const int r = i / vectors, c = i % vectors;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < len) v = *reinterpret_cast<const uint4*>(src + int64_t(row0 + r) * ld + col + c * 8);
    *reinterpret_cast<uint4*>(tile + r * d + c * 8) = v;
  }
}

__global__ void __launch_bounds__(kWarps * 32)
    vision_flash_kernel(const bf16* q, const bf16* k, int64_t ldqk, const bf16* v, int64_t ldv, int len,
                        int d, float scale_log2, float* out, int64_t ldo) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int head = blockIdx.y, q0 = blockIdx.x * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sw = scratch_width(d);
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = Qs + kRows * d;
  bf16* Vs = Ks + kRows * d;
  float* scratch_all = reinterpret_cast<float*>(Vs + kRows * d);
  bf16* probs_all = reinterpret_cast<bf16*>(scratch_all + kWarps * 16 * sw);
  float* acc_all = reinterpret_cast<float*>(probs_all + kWarps * 16 * kRows);
  float* W = scratch_all + warp * 16 * sw;  // [16][sw]
  bf16* P = probs_all + warp * 16 * kRows;  // [16][64]
  float* O = acc_all + warp * 16 * d;       // [16][d]

  load_tile(Qs, q, ldqk, head * d, q0, len, d);
  for (int i = lane; i < 16 * d; i += 32) O[i] = 0.0f;
  // Two lanes per query row: lane / 2 is the row, lane % 2 the half of its columns.
  const int r = lane >> 1, half = lane & 1;
  float m = -INFINITY, l = 0.0f;
  for (int k0 = 0; k0 < len; k0 += kRows) {
    __syncthreads();  // every warp is done with the previous tiles
    load_tile(Ks, k, ldqk, head * d, k0, len, d);
    load_tile(Vs, v, ldv, head * d, k0, len, d);
    __syncthreads();
    // Scores of this warp's 16 rows against the 64 keys.
    for (int j = 0; j < kRows / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < d / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
        wmma::load_matrix_sync(a, Qs + warp * 16 * d + kk * 16, d);
        wmma::load_matrix_sync(b, Ks + j * 16 * d + kk * 16, d);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(W + j * 16, acc, sw, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax over the tile (base 2, the scale folded in).
    const int valid = min(kRows, len - k0);
    float* srow = W + r * sw + half * 32;
    float mx = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      const float s = half * 32 + c < valid ? srow[c] * scale_log2 : -INFINITY;
      srow[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);  // finite: every tile holds a valid key
    const float alpha = exp2f(m - m_new);
    float sum = 0.0f;
    bf16* prow = P + r * kRows + half * 32;
    for (int c = 0; c < 32; ++c) {
      const float p = exp2f(srow[c] - m_new);
      prow[c] = __float2bfloat16(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    __syncwarp();
    // P V for this tile into the scratch, then O = alpha O + P V.
    for (int j = 0; j < d / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < kRows / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
        wmma::load_matrix_sync(a, P + kk * 16, kRows);
        wmma::load_matrix_sync(b, Vs + kk * 16 * d + j * 16, d);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(W + j * 16, acc, sw, wmma::mem_row_major);
    }
    __syncwarp();
    float* orow = O + r * d;
    const float* trow = W + r * sw;
    for (int c = half * (d / 2); c < (half + 1) * (d / 2); ++c) orow[c] = orow[c] * alpha + trow[c];
    __syncwarp();
  }
  const int row = q0 + warp * 16 + r;
  if (row < len) {
    const float inv = 1.0f / l;
    const float* orow = O + r * d;
    for (int c = half * (d / 2); c < (half + 1) * (d / 2); ++c)
      out[int64_t(row) * ldo + head * d + c] = orow[c] * inv;
  }
}

}  // namespace

bool vision_flash_attention_supported(int head_dim, int64_t ldqk, int64_t ldv, int64_t ldo) {
  return head_dim % 16 == 0 && head_dim <= kMaxHeadDim && ldqk % 8 == 0 && ldv % 8 == 0 && ldo > 0;
}

void vision_flash_attention(const __nv_bfloat16* q, const __nv_bfloat16* k, int64_t ldqk,
                            const __nv_bfloat16* v, int64_t ldv, int64_t len, int heads, int head_dim,
                            float* out, int64_t ldo, cudaStream_t s) {
  if (len <= 0) return;
  static const bool attr = [] {
    return cudaFuncSetAttribute(vision_flash_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                int(smem_bytes(kMaxHeadDim))) == cudaSuccess;
  }();
  (void)attr;  // a failure shows as the launch's error
  const float scale_log2 = 1.4426950408889634f / std::sqrt(float(head_dim));
  const dim3 grid(unsigned((len + kRows - 1) / kRows), unsigned(heads));
  vision_flash_kernel<<<grid, kWarps * 32, smem_bytes(head_dim), s>>>(q, k, ldqk, v, ldv, int(len), head_dim,
                                                                      scale_log2, out, ldo);
}

}  // namespace m3::cuda
