// Warpgroup (wgmma, sm_90a) versions of the attention tile kernel's per-stage MMAs (attention.cu): a
// warpgroup of 4 warps owns 64 query rows (each warp its 16, Q fragments in registers as for mma.sync) and
// multiplies them with a whole 64-key K/V stage read once from shared memory by the tensor cores, instead of
// every warp re-reading the stage through ldmatrix. The stage is stored in the unswizzled core-matrix layout
// (wgmma.cuh): key r, 8-column chunk c of a [64][D] K or V tile at byte
//   (r / 8) * (D / 8) * 128 + c * 128 + (r % 8) * 16,
// which serves K as a K-major B (S = Q . K^T: N = keys, K = head_dim) and V as an N-major B (O += P . V:
// N = head_dim, K = keys). The softmax between them is attention_stage.cuh's, on the same fragments.
#pragma once

#include "kernels/attention_stage.cuh"
#include "kernels/wgmma.cuh"

namespace m3::cuda {

// Byte offset of key row r, 16-byte column chunk c within a K or V stage tile of head_dim D.
template <int D>
__device__ __forceinline__ int wg_tile_offset(int r, int c) {
  return (r >> 3) * (D / 8) * 128 + c * 128 + (r & 7) * 16;
}

// Issues s = Q . K^T for the warpgroup's 64 rows x 64 keys (this warp: its 16 rows, 8 tiles of 8 keys) as
// one wgmma group; s is ready after the matching wgmma_wait (then wgmma_pin it).
template <int D>
__device__ __forceinline__ void qk_issue_wg(float (&s)[8][4], QFrags<D>& q, const bf16* ks) {
  static_assert(QFrags<D>::kInRegs);
  const char* base = reinterpret_cast<const char*>(ks);
  wgmma_pin(s);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)  // head_dim 16 kk.. = chunks 2 kk, 2 kk + 1
    wgmma_m64n64k16_rs<0>(s, q.f[kk], wgmma_desc(base + kk * 256, 128, D * 16), kk > 0);
  wgmma_commit();
}

// O += P . V for the warpgroup's 64 rows over the stage's 64 keys (p: softmax_step's probabilities); waits
// for every wgmma group of the warpgroup, earlier ones included.
template <int D>
__device__ __forceinline__ void pv_wg(const float (&p)[8][4], float (&o)[D / 8][4], const bf16* vs) {
  static_assert(D == 64 || D == 128);
  uint32_t a[4][4];
#pragma unroll
  for (int k = 0; k < 4; ++k) p_fragment(a[k], p, k);
  const char* base = reinterpret_cast<const char*>(vs);
  wgmma_pin(o);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k)  // keys 16 k.. = row groups 2 k, 2 k + 1
#pragma unroll
    for (int n = 0; n < D / 64; ++n)  // head_dim 64 n.. = chunks 8 n.. of each key row
      wgmma_m64n64k16_rs<1>(*reinterpret_cast<float(*)[8][4]>(&o[8 * n]), a[k],
                            wgmma_desc(base + k * 2 * D * 16 + n * 8 * 128, D * 16, 128), true);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_pin(o);
  wgmma_pin(a);
}

}  // namespace m3::cuda
