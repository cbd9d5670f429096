// Warp-level flash-attention pieces shared by the attention kernels (attention.cu): a warp owns 16 query rows
// (bf16 in shared memory, row stride D + 8) and a run of key rows of a K/V stage in shared memory (same
// stride); S = Q . K^T and O += P . V on mma.sync (sm_80+, used on sm_90a), the online softmax in base 2 with
// the scale folded into one FMA per score, and the merge of warps that split a stage's keys. Accumulator
// layout: mma.cuh's C fragment (a thread holds rows g = lane / 4 and g + 8).
#pragma once

#include <cmath>

#include "kernels/mma.cuh"

namespace m3::cuda {

using bf16 = __nv_bfloat16;

// Max / sum over the 4 lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffff, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffff, v, 1);
  return v + __shfl_xor_sync(0xffffffff, v, 2);
}

// Q fragments of this warp's 16 rows (kept in registers for head_dim <= 128).
template <int D>
struct QFrags {
  static constexpr bool kInRegs = D <= 128;
  uint32_t f[kInRegs ? D / 16 : 1][4];
  const bf16* lane_row;
  __device__ __forceinline__ void init(const bf16* qs, int wm, int lane) {
    lane_row = qs + (wm * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * (D + 8) + (lane >> 4) * 8;
    if constexpr (kInRegs) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(f[kk], lane_row + kk * 16);
    }
  }
};

// s = Q . K^T for 16 rows x kSTiles x 8 keys; ks points at the warp's first key row. kChains > 1 spreads the
// head_dim steps over independent accumulators (shorter MMA dependency chains for few keys per warp).
template <int D, int kSTiles, int kChains = 1>
__device__ __forceinline__ void qk_scores(float (&s)[kSTiles][4], const QFrags<D>& q, const bf16* ks,
                                          int lane) {
  constexpr int kStride = D + 8;
  static_assert((D / 16) % kChains == 0);
  float acc[kChains][kSTiles][4];
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) acc[c][j][0] = acc[c][j][1] = acc[c][j][2] = acc[c][j][3] = 0.f;
  const bf16* k_lane = ks + ((lane & 7) + (lane >> 4) * 8) * kStride + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    if constexpr (QFrags<D>::kInRegs) {
#pragma unroll
      for (int x = 0; x < 4; ++x) a[x] = q.f[kk][x];
    } else {
      ldmatrix_x4(a, q.lane_row + kk * 16);
    }
#pragma unroll
    for (int j = 0; j < kSTiles / 2; ++j) {
      uint32_t b[4];
      ldmatrix_x4(b, k_lane + j * 16 * kStride + kk * 16);
      const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
      mma_bf16_16816(acc[kk % kChains][2 * j], a, b_lo);
      mma_bf16_16816(acc[kk % kChains][2 * j + 1], a, b_hi);
    }
  }
#pragma unroll
  for (int j = 0; j < kSTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = acc[0][j][e];
#pragma unroll
      for (int c = 1; c < kChains; ++c) s[j][e] += acc[c][j][e];
    }
}

// Online softmax over raw (unscaled, masked = -inf) scores: s becomes p = 2^(s x scale - m), and l and o
// are rescaled to the new running max. m is kept in scaled base-2 units (one FMA + ex2 per score). Rows
// whose keys are all masked so far keep m = -inf and contribute nothing.
template <int D, int kSTiles>
__device__ __forceinline__ void softmax_step(float (&s)[kSTiles][4], float (&o)[D / 8][4], float (&m)[2],
                                             float (&l)[2], float scale) {
  float mu[2], alpha[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * i], s[j][2 * i + 1]));
    const float mn = fmaxf(m[i], quad_max(mx) * scale);
    mu[i] = mn == -INFINITY ? 0.f : mn;
    alpha[i] = fast_exp2(m[i] - mu[i]);
    m[i] = mn;
  }
  // Rescale only when some row of the warp has a new max (once the running max settles, most stages don't).
  if (!__all_sync(0xffffffff, alpha[0] == 1.f && alpha[1] == 1.f)) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      l[i] *= alpha[i];
#pragma unroll
      for (int dj = 0; dj < D / 8; ++dj) o[dj][2 * i] *= alpha[i], o[dj][2 * i + 1] *= alpha[i];
    }
  }
#pragma unroll
  for (int j = 0; j < kSTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = fast_exp2(fmaf(s[j][e], scale, -mu[e >> 1]));
      l[e >> 1] += s[j][e];
    }
}

// The probabilities of keys 16 k .. 16 k + 15 as a bf16 A fragment: the accumulators of two adjacent 8-key
// tiles are the A fragment of one k16 step.
template <int kSTiles>
__device__ __forceinline__ void p_fragment(uint32_t (&a)[4], const float (&s)[kSTiles][4], int k) {
  a[0] = pack_bf16x2(s[2 * k][0], s[2 * k][1]);
  a[1] = pack_bf16x2(s[2 * k][2], s[2 * k][3]);
  a[2] = pack_bf16x2(s[2 * k + 1][0], s[2 * k + 1][1]);
  a[3] = pack_bf16x2(s[2 * k + 1][2], s[2 * k + 1][3]);
}

// O += P . V on mma.sync; vs points at the warp's first value row.
template <int D, int kSTiles>
__device__ __forceinline__ void pv_mma(const float (&s)[kSTiles][4], float (&o)[D / 8][4], const bf16* vs,
                                       int lane) {
  constexpr int kStride = D + 8;
  const bf16* v_lane = vs + ((lane & 7) + ((lane >> 3) & 1) * 8) * kStride + (lane >> 4) * 8;
#pragma unroll
  for (int ks2 = 0; ks2 < kSTiles / 2; ++ks2) {
    uint32_t a[4];
    p_fragment(a, s, ks2);
#pragma unroll
    for (int dj = 0; dj < D / 16; ++dj) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, v_lane + ks2 * 16 * kStride + dj * 16);
      const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
      mma_bf16_16816(o[2 * dj], a, b_lo);
      mma_bf16_16816(o[2 * dj + 1], a, b_hi);
    }
  }
}

// One stage's softmax and O += P . V on mma.sync.
template <int D, int kSTiles>
__device__ __forceinline__ void softmax_pv(float (&s)[kSTiles][4], float (&o)[D / 8][4], float (&m)[2],
                                           float (&l)[2], float scale, const bf16* vs, int lane) {
  softmax_step<D, kSTiles>(s, o, m, l, scale);
  pv_mma<D, kSTiles>(s, o, vs, lane);
}

// Warps that split the keys of a stage (wn > 0) hand their state to warp wn = 0 of their rows through `red`
// (the K/V buffers, free after the main loop). Every thread calls this.
template <int D, int WM, int WN>
__device__ __forceinline__ void merge_key_warps(float (&o)[D / 8][4], float (&m)[2], float (&l)[2],
                                                float* red, int wm, int wn, int lane) {
  if constexpr (WN > 1) {
    constexpr int kPer = D / 2 + 4;  // floats per lane: O fragment, m[2], l[2]
    __syncthreads();
    if (wn > 0) {
      float* dst = red + ((wn - 1) * WM + wm) * kPer * 32 + lane;
#pragma unroll
      for (int dj = 0; dj < D / 8; ++dj)
#pragma unroll
        for (int e = 0; e < 4; ++e) dst[(dj * 4 + e) * 32] = o[dj][e];
      dst[(D / 2) * 32] = m[0], dst[(D / 2 + 1) * 32] = m[1];
      dst[(D / 2 + 2) * 32] = l[0], dst[(D / 2 + 3) * 32] = l[1];
    }
    __syncthreads();
    if (wn > 0) return;
    for (int w = 1; w < WN; ++w) {
      const float* src = red + ((w - 1) * WM + wm) * kPer * 32 + lane;
      float fa[2], fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float mw = src[(D / 2 + i) * 32], lw = src[(D / 2 + 2 + i) * 32];
        const float mn = fmaxf(m[i], mw), mu_i = mn == -INFINITY ? 0.f : mn;
        fa[i] = fast_exp2(m[i] - mu_i);
        fb[i] = fast_exp2(mw - mu_i);
        l[i] = l[i] * fa[i] + lw * fb[i];
        m[i] = mn;
      }
#pragma unroll
      for (int dj = 0; dj < D / 8; ++dj)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dj][e] = o[dj][e] * fa[e >> 1] + src[(dj * 4 + e) * 32] * fb[e >> 1];
    }
  }
}

}  // namespace m3::cuda
