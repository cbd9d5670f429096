// The decode kernel of attention.cu (included only there): one token per tile, <= 16 query heads per CTA.
#pragma once

#include "kernels/attention_common.cuh"
#include "kernels/attention_plan.h"
#include "kernels/fp8_widen.cuh"

namespace m3::cuda {
namespace {

// Decode: one token per tile, <= 16 query heads per CTA (16 rows). Unit i (16 consecutive virtual keys) of
// the split belongs to warp i mod kWarps, which streams its units through its own kRing-unit cp.async ring
// (kRing - 1 in flight while one is computed; __syncwarp only, no CTA barrier in the key loop). Virtual keys:
// positions 0..pos (dense), or the topk x page_size slots of the selection row in order (sparse: entries that
// are -1 or out of range and slots past pos are masked and never read; no compaction pass). A warp keeps a
// window of 32 consecutive blocks in registers (lane i: page id of block win + i, and for sparse the block's
// first position), so a unit's addresses are shuffles; the first window of the token is loaded together with
// the tile. The warps' (O, m, l) are merged in shared memory by all threads, then written (bf16 or a split's
// partial), and the last-arriving split merges the partials. FP8 pages (kFp8): the ring holds each unit's
// e4m3 rows and scales; once a unit has landed the warp widens it into its one bf16 unit, then computes.
template <int D, bool kFp8>
struct DecodeShape {  // attention_plan.h's host constexprs, evaluated outside device code
  static constexpr int kWarps = attention_decode_warps(D), kBytes = attention_decode_smem_bytes(D, kFp8);
  static constexpr int kWarpBytes = attention_decode_warp_bytes(D, kFp8);
  static constexpr int kUnitBytes = attention_decode_unit_bytes(D, kFp8);
};
template <int D, bool kSparse, bool kFp8>
__global__ void __launch_bounds__(32 * DecodeShape<D, kFp8>::kWarps, 1) decode_kernel(const Params p) {
  using Shape = DecodeShape<D, kFp8>;
  constexpr int kWarps = Shape::kWarps, kThreads = 32 * kWarps, kRing = kAttentionDecodeRing;
  constexpr int kStride = D + 8, kUnit = 2 * 16 * kStride;  // K then V rows of one bf16 unit
  constexpr int kCh = D / 8, kKp = 32 / kCh;                // 16-byte chunks per row; rows per warp-wide copy
  constexpr int kCh8 = D / 16, kKp8 = 32 / kCh8;            // the same for e4m3 rows
  constexpr int kRow8 = Fp8Stage<D>::kRow;                  // e4m3 row stride in the ring (padded)
  constexpr int kOffRing = 16 * kStride * 2, kRingBytes = kWarps * Shape::kWarpBytes;
  constexpr int kOffW = kOffRing + kRingBytes, kOffMisc = kOffW + 16 * kMaxLaunchSplits * 4;
  constexpr int kRed = D + 4;  // fp32 row stride of the warp merge (in the rings)
  static_assert(kOffMisc + 16 * 4 == Shape::kBytes, "attention_plan.h's layout");
  static_assert(kWarps * 16 * (kRed + 2) * 4 <= kRingBytes && kRing >= 2 && kRing <= 4 && kCh <= 32);

  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  bf16* qs = reinterpret_cast<bf16*>(smem);
  unsigned char* ring_bytes = smem + kOffRing + warp * Shape::kWarpBytes;
  bf16* ring = reinterpret_cast<bf16*>(ring_bytes);  // bf16 pages: the ring; FP8: the widened unit after it
  if constexpr (kFp8) ring = reinterpret_cast<bf16*>(ring_bytes + kRing * Shape::kUnitBytes);
  const int kvh = blockIdx.y / p.chunks, chunk = blockIdx.y - kvh * p.chunks, split = blockIdx.z;
  const int P = p.page_size, counter = blockIdx.x * gridDim.y + blockIdx.y;
  const unsigned long long seen = counter_peek(p, counter);

  // plan_attention's decode tiles are tile i = token i: the token's meta and (sparse) its first 32 selection
  // entries are read at that guess together with the tile (one dependent round trip fewer), again if wrong.
  const int guess = min(int(blockIdx.x), p.T - 1);
  const int64_t sel_head = int64_t(kvh) * p.topk;
  int t0 = guess, pos = p.meta.pos[guess], seq = p.meta.seq[guess];
  const int32_t* sel_row = kSparse ? p.sel + int64_t(guess) * p.kv_heads * p.topk + sel_head : nullptr;
  int sel0 = -1;
  if constexpr (kSparse) sel0 = lane < p.topk ? sel_row[lane] : -1;
  const AttentionTile tile = p.tiles[blockIdx.x];
  if (tile.count <= 0) return;
  if (tile.first != guess) {
    t0 = tile.first, pos = p.meta.pos[t0], seq = p.meta.seq[t0];
    if constexpr (kSparse) {
      sel_row = p.sel + int64_t(t0) * p.kv_heads * p.topk + sel_head;
      sel0 = lane < p.topk ? sel_row[lane] : -1;
    }
  }

  const int n_keys = kSparse ? p.topk * P : pos + 1, n_units = (n_keys + 15) / 16;
  const int ub = int(int64_t(n_units) * split / p.splits),
            ue = int(int64_t(n_units) * (split + 1) / p.splits);
  const int n_mine = ue - ub > warp ? (ue - ub - warp + kWarps - 1) / kWarps : 0;

  // Block window: lane i holds the page id of block win + i (-1: not readable) and its first position.
  const int32_t* table = p.meta.block_table + int64_t(seq) * p.meta.max_blocks;
  int win = 0, w_page = -1, w_base = 0;
  auto fill = [&](int u0, int b) {  // b: (sparse) selection entry u0 + lane, -1 past topk
    win = u0;
    if constexpr (!kSparse) b = u0 + lane;
    const bool ok = b >= 0 && b < p.meta.max_blocks;
    w_page = ok ? table[b] : -1;
    w_base = b * P;
  };
  if (n_mine > 0) {
    if constexpr (kSparse) {
      fill(0, sel0);
    } else {
      fill((ub + warp) * 16 / P, 0);
    }
  }

  uint64_t masks = 0;  // valid keys of unit j in bits [16 (j & 3), +16)
  const int64_t slot_stride = int64_t(p.kv_heads) * D, head_off = int64_t(kvh) * D + (lane % kCh) * 8;
  auto issue = [&](int j) {
    const int v0 = (ub + warp + kWarps * j) * 16, u_first = v0 / P;
    if (u_first < win || (v0 + 15) / P >= win + 32) {  // warp-uniform
      int b = 0;
      if constexpr (kSparse) b = u_first + lane < p.topk ? sel_row[u_first + lane] : -1;
      fill(u_first, b);
    }
    // Lanes k and k + 16 resolve key v0 + k.
    const int v = v0 + (lane & 15), u = v / P, slot = v - u * P;
    const int page = __shfl_sync(0xffffffffu, w_page, u - win);
    int kpos = v;
    if constexpr (kSparse) kpos = __shfl_sync(0xffffffffu, w_base, u - win) + slot;
    const bool ok = page >= 0 && v < n_keys && kpos <= pos;
    const int sh = 16 * (j & 3);
    masks = (masks & ~(0xffffull << sh)) | (uint64_t(__ballot_sync(0xffffffffu, ok) & 0xffffu) << sh);
    const int pg = ok ? page : -1;
    if constexpr (kFp8) {  // unit: K rows [16], V rows [16] at stride kRow8, then K and V scales [16]
      unsigned char* u8 = ring_bytes + (j % kRing) * Shape::kUnitBytes;
      const int64_t head_off8 = int64_t(kvh) * D + (lane % kCh8) * 16;
#pragma unroll
      for (int pass = 0; pass < 16 / kKp8; ++pass) {
        const int key = pass * kKp8 + lane / kCh8;
        const int kp = __shfl_sync(0xffffffffu, pg, key), ks = __shfl_sync(0xffffffffu, slot, key);
        const int64_t off = kp >= 0 ? (int64_t(kp) * P + ks) * slot_stride + head_off8 : 0;
        unsigned char* dst = u8 + key * kRow8 + (lane % kCh8) * 16;
        cp_async_16_zfill(dst, p.k8 + off, kp >= 0);
        cp_async_16_zfill(dst + 16 * kRow8, p.v8 + off, kp >= 0);
      }
      // Lane k < 16: key k's K scale; lane k + 16: its V scale.
      const int64_t soff = pg >= 0 ? (int64_t(pg) * P + slot) * p.kv_heads + kvh : 0;
      cp_async_4_zfill(u8 + 32 * kRow8 + lane * 4, (lane < 16 ? p.k_scale : p.v_scale) + soff, pg >= 0);
      return;
    }
    bf16* kd = ring + (j % kRing) * kUnit;
#pragma unroll
    for (int pass = 0; pass < 16 / kKp; ++pass) {
      const int key = pass * kKp + lane / kCh;
      const int kp = __shfl_sync(0xffffffffu, pg, key), ks = __shfl_sync(0xffffffffu, slot, key);
      const int64_t off = kp >= 0 ? (int64_t(kp) * P + ks) * slot_stride + head_off : head_off;
      bf16* dst = kd + key * kStride + (lane % kCh) * 8;
      cp_async_16_zfill(dst, p.k + off, kp >= 0);
      cp_async_16_zfill(dst + 16 * kStride, p.v + off, kp >= 0);
    }
  };
#pragma unroll
  for (int j = 0; j < kRing - 1; ++j) {
    if (j < n_mine) issue(j);
    cp_async_commit();
  }
  load_q<D, 16, kThreads>(p, qs, 1, t0, kvh, chunk);  // overlaps the K/V round trip
  __syncthreads();
  QFrags<D> qf;
  qf.init(qs, 0, lane);

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int g = lane >> 2, c2 = (lane & 3) * 2;
  for (int j = 0; j < n_mine; ++j) {
    cp_async_wait<kRing - 2>();
    __syncwarp();  // unit j landed for every lane; unit j - 1's buffer is free
    if (j + kRing - 1 < n_mine) issue(j + kRing - 1);
    cp_async_commit();
    const bf16* ks = ring + (kFp8 ? 0 : (j % kRing) * kUnit);
    if constexpr (kFp8) {  // lane r widens row r (K rows 0-15, V rows 16-31) into the bf16 unit
      const unsigned char* u8 = ring_bytes + (j % kRing) * Shape::kUnitBytes;
      const float scale = reinterpret_cast<const float*>(u8 + 32 * kRow8)[lane];
#pragma unroll
      for (int c = 0; c < kCh8; ++c) {
        uint4 a, b;
        widen_e4m3x16_scaled(*reinterpret_cast<const uint4*>(u8 + lane * kRow8 + c * 16), scale, a, b);
        bf16* dst = ring + lane * kStride + c * 16;
        *reinterpret_cast<uint4*>(dst) = a;
        *reinterpret_cast<uint4*>(dst + 8) = b;
      }
      __syncwarp();
    }
    float s[2][4];
    qk_scores<D, 2, 2>(s, qf, ks, lane);
    const uint32_t valid = uint32_t(masks >> (16 * (j & 3))) & 0xffffu;
    if (valid != 0xffffu) {
#pragma unroll
      for (int jj = 0; jj < 2; ++jj)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!((valid >> (jj * 8 + c2 + (e & 1))) & 1u)) s[jj][e] = -INFINITY;
    }
    softmax_pv<D, 2>(s, o, m, l, p.scale_log2, ks + 16 * kStride, lane);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the rings

  // The warps' states -> shared memory: O [warp][16][kRed] fp32 (unnormalised), then (m, l) [warp][16].
  float* red = reinterpret_cast<float*>(smem + kOffRing);
  float* ml = red + kWarps * 16 * kRed;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float* dst = red + (warp * 16 + g + 8 * i) * kRed + c2;
#pragma unroll
    for (int dj = 0; dj < D / 8; ++dj)
      *reinterpret_cast<float2*>(dst + dj * 8) = make_float2(o[dj][2 * i], o[dj][2 * i + 1]);
    const float li = quad_sum(l[i]);
    if ((lane & 3) == 0) ml[(warp * 16 + g + 8 * i) * 2] = m[i], ml[(warp * 16 + g + 8 * i) * 2 + 1] = li;
  }
  __syncthreads();
  const int64_t Th = int64_t(p.T) * p.heads;
  for (int idx = tid; idx < 16 * (D / 4); idx += kThreads) {
    const int r = idx / (D / 4), c = (idx - r * (D / 4)) * 4;
    const int64_t row = out_row(p, r, 1, t0, kvh, chunk);
    if (row < 0) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, ml[(w * 16 + r) * 2]);
    const float mu = mx == -INFINITY ? 0.f : mx;
    float sum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float a = fast_exp2(ml[(w * 16 + r) * 2] - mu);  // 0 for a warp without keys (m = -inf)
      sum += a * ml[(w * 16 + r) * 2 + 1];
      const float4 x = *reinterpret_cast<const float4*>(red + (w * 16 + r) * kRed + c);
      acc.x += a * x.x, acc.y += a * x.y, acc.z += a * x.z, acc.w += a * x.w;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    if (p.splits == 1) {
      *reinterpret_cast<uint2*>(p.out + row * D + c) =
          make_uint2(pack_bf16x2(acc.x * inv, acc.y * inv), pack_bf16x2(acc.z * inv, acc.w * inv));
    } else {
      const int64_t prow = int64_t(split) * Th + row;
      *reinterpret_cast<float4*>(p.ws_o + prow * D + c) =
          make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      if (c == 0) p.ws_lse[prow] = sum > 0.f ? mx + __log2f(sum) : -INFINITY;
    }
  }
  if (p.splits == 1) return;
  arrive_and_merge<D, 16, kThreads>(p, counter, seen, reinterpret_cast<int*>(smem + kOffMisc), 1, t0, kvh,
                                    chunk, reinterpret_cast<float*>(smem + kOffW), red, kRingBytes / 4);
}

}  // namespace
}  // namespace m3::cuda
