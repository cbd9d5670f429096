// Internals of attention.cu shared by its two kernels (included only there): the launch parameters, shared-
// memory layout, the query load, the split-K counters and merge, the epilogue and the cp.async ring step.
#pragma once

#include <climits>
#include <cmath>

#include "kernels/attention_stage.cuh"
#include "kernels/kernels.h"
#include "kernels/mma.cuh"
#include "kernels/wgmma.cuh"

namespace m3::cuda {
namespace {
constexpr int kKeys = 64;  // keys per pipeline stage (attention_plan.cc's key tile)
constexpr int kMaxLaunchSplits = 64;
// Tile kernel scalars in shared memory: [0] max position, [1] min, [2] flag, [8 + warp] scan totals.
constexpr int kMiscInts = 24;
constexpr float kLog2e = 1.4426950408889634f;
// High word of a split-K counter that this code wrote; any other value is an uninitialised workspace.
constexpr uint32_t kCounterTag = 0x4D33A770u;

struct Params {
  const float* q;
  const bf16* k;
  const bf16* v;
  const uint8_t *k8, *v8;          // FP8 pages (kernels.h KvPages), when the kernel is instantiated for them
  const float *k_scale, *v_scale;  // their per (slot, KV head) scales
  TokenMeta meta;
  const int32_t* sel;  // [T, kv_heads, topk]; null for dense
  int topk;
  const AttentionTile* tiles;
  int num_tiles, tokens_cap;      // tokens_cap: most tokens of a tile (sizes the shared memory)
  int T, heads, kv_heads, group;  // group = heads / kv_heads
  int hc, chunks;                 // query heads per CTA (hc <= rows) and head chunks per KV head
  int page_size, splits;
  float scale_log2;
  unsigned long long* counters;              // split-K arrival counters [tiles, kv_heads x chunks]
  float *ws_o, *ws_lse;                      // split-K partials [splits, T, heads, (dim)]
  bf16* out;                                 // [T, heads, dim]
  int off_kv, off_w, off_int;                // shared memory offsets (bytes)
  int bitmap_words, union_cap, token_words;  // sparse bookkeeping sizes (words)
};

// Tile kernel shared memory: Q [rows][dim + 8] bf16 | stages x (K, V) [64][dim + 8] bf16, or for FP8 pages
// `widened` such (K, V) stages and then stages x fp8_stage_bytes (the K/V region is reused by the epilogue) |
// split-K weights [rows][splits] fp32 | ints: token positions [tokens_cap], kMiscInts scalars, then (sparse)
// block bitmap, its word prefix, the union's block list, per union block a bitmask of the tile tokens that
// selected it, and the union blocks' page ids. The 8-element row pad makes ldmatrix conflict-free. (The
// decode kernel's layout is attention_decode_smem_bytes, attention_plan.h.)
struct SmemLayout {
  int off_kv, off_w, off_int, bytes;
};
// An FP8 stage: K then V rows of e4m3 (attention_fp8_row_bytes apart), then the K and V scales [kKeys] fp32.
constexpr int fp8_stage_bytes(int dim) {
  return 2 * kKeys * attention_fp8_row_bytes(dim) + 2 * kKeys * 4;
}
template <int D>
struct Fp8Stage {  // the host constexprs, evaluated outside device code
  static constexpr int kRow = attention_fp8_row_bytes(D), kBytes = fp8_stage_bytes(D);
};
SmemLayout smem_layout(int rows, int dim, int stages, const Params& p, bool sparse, bool fp8, int widened) {
  const int stride_bytes = (dim + 8) * 2;
  const int kv = rows * stride_bytes;
  const int w = kv + (fp8 ? widened * 2 * kKeys * stride_bytes + stages * fp8_stage_bytes(dim)
                          : stages * 2 * kKeys * stride_bytes);
  const int ints = w + (p.splits > 1 ? 4 * rows * p.splits : 0);
  int n = kMiscInts + p.tokens_cap;
  if (sparse) n += 2 * p.bitmap_words + 2 * p.union_cap + p.union_cap * p.token_words;
  return {kv, w, ints, ints + 4 * n};
}

__device__ __forceinline__ int warp_max_int(int v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}
__device__ __forceinline__ int warp_min_int(int v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}
__device__ __forceinline__ bool token_bit(const uint32_t* words, int tok) {
  return (words[tok >> 5] >> (tok & 31)) & 1u;
}

// Output row (token, head) of CTA row r, or -1 for a padding row.
__device__ __forceinline__ int64_t out_row(const Params& p, int r, int count, int t0, int kvh, int chunk) {
  const int tt = r / p.hc, h = chunk * p.hc + (r - tt * p.hc);
  return tt < count && h < p.group ? (int64_t(t0) + tt) * p.heads + kvh * p.group + h : -1;
}

// Q rows (fp32) -> bf16 rows of shared memory; padding rows are zeros. Loads go out kBatch at a time before
// their stores, so a thread waits for one round trip per batch rather than per load.
template <int D, int kRows, int kThreads>
__device__ __forceinline__ void load_q(const Params& p, bf16* qs, int count, int t0, int kvh, int chunk) {
  constexpr int kVec = kRows * (D / 4), kBatch = 4;
  for (int i0 = threadIdx.x; i0 < kVec; i0 += kBatch * kThreads) {
    float4 x[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kThreads, r = i / (D / 4), c = (i - r * (D / 4)) * 4;
      const int64_t row = i < kVec ? out_row(p, r, count, t0, kvh, chunk) : -1;
      x[b] = row >= 0 ? __ldg(reinterpret_cast<const float4*>(p.q + row * D + c))
                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kThreads, r = i / (D / 4), c = (i - r * (D / 4)) * 4;
      if (i < kVec)
        *reinterpret_cast<uint2*>(qs + r * (D + 8) + c) =
            make_uint2(pack_bf16x2(x[b].x, x[b].y), pack_bf16x2(x[b].z, x[b].w));
    }
  }
}

// Split-K arrival counter of a (tile, KV head, chunk): kCounterTag << 32 | arrivals so far. Thread 0 peeks at
// it when its CTA starts (the value is used only at arrival, so the load costs no wait). At arrival a word
// that is not a valid count (fresh or reused workspace) is first repaired to zero with one CAS: during a
// launch only this protocol writes the word and a valid word stays valid, so the CAS can succeed only before
// the group's first arrival and fails harmlessly afterwards. The arrival itself is one atomicAdd (no CAS
// loop: simultaneous arrivals do not retry); the last of the `splits` arrivals resets the word to zero.
__device__ __forceinline__ unsigned long long counter_peek(const Params& p, int counter) {
  return p.splits > 1 && threadIdx.x == 0 ? __ldcg(p.counters + counter) : 0ull;
}
__device__ bool arrive_last(unsigned long long* ctr, unsigned long long seen, int splits) {
  constexpr unsigned long long kZero = uint64_t(kCounterTag) << 32;
  if (uint32_t(seen >> 32) != kCounterTag || uint32_t(seen) >= uint32_t(splits)) atomicCAS(ctr, seen, kZero);
  const unsigned long long old = atomicAdd(ctr, 1ull);
  const bool last = uint32_t(old) + 1 == uint32_t(splits);
  if (last) atomicExch(ctr, kZero);
  return last;
}

// Split-K merge by the last-arriving CTA of a (tile, KV head, chunk): every split's partial of its kRows
// rows, weighted by 2^(lse_s - max) / sum (weights in `w` [kRows][splits]). The partials are staged through
// `stage`
// (`stage_floats` at a time) with cp.async issued before the weights are read, so both L2 round trips
// overlap.
template <int D, int kRows, int kThreads>
__device__ void merge_splits(const Params& p, int count, int t0, int kvh, int chunk, float* w, float* stage,
                             int stage_floats) {
  const int tid = threadIdx.x, S = p.splits;
  const int64_t Th = int64_t(p.T) * p.heads;
  constexpr int kVec = kRows * (D / 4), kPer = (kVec + kThreads - 1) / kThreads;
  const int per_split = kRows * D, chunk_splits = max(1, min(S, stage_floats / per_split));
  auto load = [&](int s0) {  // L1 bypassed: the partials come from other SMs
    const int ns = min(chunk_splits, S - s0);
    for (int i = tid; i < ns * kVec; i += kThreads) {
      const int sl = i / kVec, rem = i - sl * kVec, r = rem / (D / 4), c = (rem - r * (D / 4)) * 4;
      const int64_t row = out_row(p, r, count, t0, kvh, chunk);
      cp_async_16_zfill(stage + sl * per_split + r * D + c,
                        row >= 0 ? p.ws_o + ((s0 + sl) * Th + row) * D + c : p.ws_o, row >= 0);
    }
    cp_async_commit();
  };
  load(0);
  for (int i = tid; i < kRows * S; i += kThreads) {
    const int s = i / kRows, r = i - s * kRows;
    const int64_t row = out_row(p, r, count, t0, kvh, chunk);
    w[r * S + s] = row >= 0 ? __ldcg(p.ws_lse + s * Th + row) : -INFINITY;
  }
  __syncthreads();
  for (int r = tid; r < kRows; r += kThreads) {
    float* wr = w + r * S;
    float mx = -INFINITY, sum = 0.f;
    for (int s = 0; s < S; ++s) mx = fmaxf(mx, wr[s]);
    for (int s = 0; s < S; ++s) {
      const float e = wr[s] == -INFINITY ? 0.f : fast_exp2(wr[s] - mx);
      wr[s] = e;
      sum += e;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    for (int s = 0; s < S; ++s) wr[s] *= inv;
  }

  // Weighted sum; each thread owns kPer float4 column groups of the rows.
  float4 acc[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc[e] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = 0; s0 < S; s0 += chunk_splits) {
    const int ns = min(chunk_splits, S - s0);
    if (s0 > 0) {
      __syncthreads();  // the previous chunk is consumed
      load(s0);
    }
    cp_async_wait<0>();
    __syncthreads();  // the chunk and the weights are ready
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int i = tid + e * kThreads;
      if (i >= kVec) break;
      const int r = i / (D / 4), c = (i - r * (D / 4)) * 4;
      for (int sl = 0; sl < ns; ++sl) {
        const float ws = w[r * S + s0 + sl];
        const float4 x = *reinterpret_cast<const float4*>(stage + sl * per_split + r * D + c);
        acc[e].x += ws * x.x, acc[e].y += ws * x.y, acc[e].z += ws * x.z, acc[e].w += ws * x.w;
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    const int i = tid + e * kThreads;
    if (i >= kVec) break;
    const int r = i / (D / 4), c = (i - r * (D / 4)) * 4;
    const int64_t row = out_row(p, r, count, t0, kvh, chunk);
    if (row >= 0)
      *reinterpret_cast<uint2*>(p.out + row * D + c) =
          make_uint2(pack_bf16x2(acc[e].x, acc[e].y), pack_bf16x2(acc[e].z, acc[e].w));
  }
}

// After a split has written its partial: count this CTA's arrival on its group's counter; the last CTA to
// arrive merges the partials into the output (the fences order the partials before the count and after it).
template <int D, int kRows, int kThreads>
__device__ __forceinline__ void arrive_and_merge(const Params& p, int counter, unsigned long long seen,
                                                 int* flag, int count, int t0, int kvh, int chunk, float* w,
                                                 float* stage, int stage_floats) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *flag = arrive_last(p.counters + counter, seen, p.splits);
  __syncthreads();
  if (!*flag) return;
  __threadfence();
  merge_splits<D, kRows, kThreads>(p, count, t0, kvh, chunk, w, stage, stage_floats);
}

// Tile kernel epilogue: bf16 rows directly (splits == 1), or the split's normalised partial O and
// log2-sum-exp followed by the arrival (`seen`: counter_peek's value) and, in the last CTA, merge_splits.
// `writer`: this warp holds final rows (warp-uniform).
template <int D, int kRows, int kThreads>
__device__ __forceinline__ void finish(const Params& p, float (&o)[D / 8][4], float (&m)[2], float (&l)[2],
                                       bool writer, const int64_t (&row_out)[2], int split, int counter,
                                       unsigned long long seen, int count, int t0, int kvh, int chunk,
                                       float* w, float* stage, int stage_floats, int* flag) {
  const int tid = threadIdx.x, lane = tid & 31, c2 = (lane & 3) * 2;
  const int64_t Th = int64_t(p.T) * p.heads;
  if (writer) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float li = quad_sum(l[i]);
      if (row_out[i] < 0) continue;
      const float inv = li > 0.f ? 1.f / li : 0.f;
      if (p.splits == 1) {
        bf16* dst = p.out + row_out[i] * D + c2;
#pragma unroll
        for (int dj = 0; dj < D / 8; ++dj)
          *reinterpret_cast<uint32_t*>(dst + dj * 8) =
              pack_bf16x2(o[dj][2 * i] * inv, o[dj][2 * i + 1] * inv);
      } else {
        const int64_t row = int64_t(split) * Th + row_out[i];
        float* dst = p.ws_o + row * D + c2;
#pragma unroll
        for (int dj = 0; dj < D / 8; ++dj)
          *reinterpret_cast<float2*>(dst + dj * 8) = make_float2(o[dj][2 * i] * inv, o[dj][2 * i + 1] * inv);
        if ((lane & 3) == 0) p.ws_lse[row] = li > 0.f ? m[i] + __log2f(li) : -INFINITY;
      }
    }
  }
  if (p.splits == 1) return;
  arrive_and_merge<D, kRows, kThreads>(p, counter, seen, flag, count, t0, kvh, chunk, w, stage, stage_floats);
}

// Stage ring: waits for stage `it`, then refills the buffer the previous stage used. One barrier per stage.
// to_async_proxy: this thread copies stages that wgmma reads, so it makes its copies visible to the async
// proxy before the barrier.
template <int kStages, typename Load>
__device__ __forceinline__ void ring_advance(int it, int se, bool to_async_proxy, Load&& load) {
  cp_async_wait<kStages - 2>();
  if (to_async_proxy) fence_proxy_async_smem();
  __syncthreads();
  if (it + kStages - 1 < se) load(it + kStages - 1);
  cp_async_commit();
}

// The tile kernel runs its stages on wgmma (attention_wgmma.cuh) with two warpgroups of 64 rows at head_dim
// 128 (the mma.sync path everywhere else).
__host__ __device__ constexpr bool tile_uses_wgmma(int dim, int wm, int wn) {
  return wm == 8 && wn == 1 && dim == 128;
}
// Producer warps of a wgmma tile kernel CTA (one per SM sub-partition: they copy the K/V stages).
constexpr int kProducerWarps = 4;
// Warps of a tile kernel CTA: the WM x WN computing warps, and with wgmma the producer warps.
__host__ __device__ constexpr int tile_warps(int dim, int wm, int wn) {
  return wm * wn + (tile_uses_wgmma(dim, wm, wn) ? kProducerWarps : 0);
}
template <int D>
__host__ __device__ constexpr int stages_for() {
  return D <= 128 ? 3 : 2;
}

}  // namespace
}  // namespace m3::cuda
