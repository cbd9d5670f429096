// MoE and MLP kernels: sigmoid routing with the correction bias, stable grouping of (token, expert) pairs by
// expert on the device (for small batches fused with the router logits in one launch), a grouped tensor-core
// GEMV for small batches (each expert's weight slab is read once for all its tokens; graph-safe: empty
// experts exit), SwiGLU-OAI on the 8-row interleaved gate/up layout, the gather of each expert's rows for
// per-expert GEMMs, and the routed combine (experts summed in ascending id order like the reference).
#include <algorithm>
#include <cfloat>
#include <string>
#include <type_traits>

#include "common/error.h"
#include "kernels/fp8.h"
#include "kernels/fp8_widen.cuh"
#include "kernels/kernels.h"
#include "kernels/mma.cuh"

namespace m3::cuda {
namespace {

// One token's routing by one warp, lanes over experts (E <= 256: 8 per lane): sigmoid, biased choice, k
// rounds of a warp argmax (ties to the lower id; NaN choices rank last), weights renormalised over the
// unbiased scores.
__device__ void route_token(const float* __restrict__ l, const float* __restrict__ bias, int E, int k,
                            int32_t* __restrict__ ids, float* __restrict__ w) {
  const int lane = threadIdx.x & 31;
  float score[8], choice[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int e = lane + 32 * j;
    score[j] = e < E ? 1.0f / (1.0f + expf(-__ldcg(l + e))) : 0.0f;
    const float c = score[j] + (bias && e < E ? bias[e] : 0.0f);
    choice[j] = e < E && c == c ? c : -INFINITY;
  }
  unsigned taken = 0;  // bit j: this lane's expert lane + 32 j is chosen
  float total = 0, chosen_w[16];
  int chosen[16];
  for (int r = 0; r < k; ++r) {
    float best = -INFINITY;
    int best_e = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int e = lane + 32 * j;
      if (e < E && !(taken >> j & 1u) && (choice[j] > best || best_e == 0x7fffffff))
        best = choice[j], best_e = e;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffff, best, o);
      const int oe = __shfl_xor_sync(0xffffffff, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) best = ob, best_e = oe;
    }
    const int owner = best_e & 31, slot = best_e >> 5;
    float s_best = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j == slot) s_best = score[j];
    s_best = __shfl_sync(0xffffffff, s_best, owner);
    if (lane == owner) taken |= 1u << slot;
    chosen[r] = best_e;
    chosen_w[r] = s_best;
    total += s_best;
  }
  if (lane == 0)
    for (int r = 0; r < k; ++r) ids[r] = chosen[r], w[r] = chosen_w[r] / total;
}

__global__ void route_kernel(const float* __restrict__ logits, const float* __restrict__ bias, int T, int E,
                             int k, int32_t* __restrict__ ids, float* __restrict__ w) {
  const int t = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (t < T)
    route_token(logits + static_cast<int64_t>(t) * E, bias, E, k, ids + static_cast<int64_t>(t) * k,
                w + static_cast<int64_t>(t) * k);
}

constexpr int kGroupThreads = 1024;

// The local group of global expert e, -1 when another rank holds it.
__device__ __forceinline__ int local_group(int e, ExpertRange local) {
  const int g = e - local.first;
  return g >= 0 && g < local.count ? g : -1;
}

// A stable counting sort of the local pairs by expert by one CTA of kGroupThreads, 1024 pairs at a time. Per
// chunk each warp counts its lanes per expert (match_any), the per-(warp, expert) counts become exclusive
// bases, and a pair's rank is its warp's base plus its rank among equal lanes (-1 for a pair of another
// rank's expert). smem: base[32][E] + total[E] ints, E = local.count.
__device__ void group_pairs(const int32_t* ids, int pairs, int k, ExpertRange local, int T, bool shared,
                            int32_t* counts, int32_t* offsets, int32_t* rank, int32_t* slot_token,
                            int32_t* active, int32_t* smem) {
  const int E = local.count;
  int32_t* base = smem;            // [32][E]
  int32_t* total = smem + 32 * E;  // [E]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  for (int i = tid; i < 33 * E; i += kGroupThreads) smem[i] = 0;
  __syncthreads();
  const unsigned lt = (1u << lane) - 1;
  for (int first = 0; first < pairs; first += kGroupThreads) {
    const int p = first + tid;
    const int e = p < pairs ? local_group(ids[p], local) : -1;
    const unsigned same = __match_any_sync(0xffffffff, e);
    const int lane_rank = __popc(same & lt);
    if (e >= 0 && lane_rank == 0) base[warp * E + e] = __popc(same);
    __syncthreads();
    for (int x = tid; x < E; x += kGroupThreads) {
      int run = total[x];
      for (int w = 0; w < 32; ++w) {
        const int c = base[w * E + x];
        base[w * E + x] = run;
        run += c;
      }
      total[x] = run;
    }
    __syncthreads();
    if (e >= 0)
      rank[p] = base[warp * E + e] + lane_rank;
    else if (p < pairs)
      rank[p] = -1;
    __syncthreads();
    for (int i = tid; i < 32 * E; i += kGroupThreads) base[i] = 0;
    __syncthreads();
  }
  const int G = E + (shared ? 1 : 0);
  if (tid == 0) {
    int run = 0, n = 0;
    for (int x = 0; x < G; ++x) {
      const int c = x < E ? total[x] : T;
      counts[x] = c;
      offsets[x] = run;
      run += c;
      if (c > 0) active[n++] = x;
    }
    offsets[G] = run;
    for (int x = n; x < G; ++x) active[x] = -1;
  }
  __syncthreads();
  for (int p = tid; p < pairs; p += kGroupThreads) {
    const int g = local_group(ids[p], local);
    if (g >= 0) slot_token[offsets[g] + rank[p]] = p / k;
  }
  if (shared)
    for (int t = tid; t < T; t += kGroupThreads) slot_token[offsets[E] + t] = t;
}

__global__ void __launch_bounds__(kGroupThreads)
    group_kernel(const int32_t* ids, int pairs, int k, ExpertRange local, int T, bool shared, int32_t* counts,
                 int32_t* offsets, int32_t* rank, int32_t* slot_token, int32_t* active) {
  extern __shared__ int32_t smem[];
  group_pairs(ids, pairs, k, local, T, shared, counts, offsets, rank, slot_token, active, smem);
}

constexpr int kRouterExpertsPerCta = 4;
constexpr int kRouterWarpsPerExpert = kGroupThreads / 32 / kRouterExpertsPerCta;

// Router logits, routing and grouping of a small batch in one launch. CTA b computes the fp32 logits of
// experts 4b..4b+3 for every token (8 warps per expert over slices of H, summed in warp order); the last CTA
// to finish (a ticket, reset by that CTA for the next launch) routes one token per warp and groups the pairs.
// smem: max(33 E ints, partial sums [32 warps][T] floats).
__global__ void __launch_bounds__(kGroupThreads)
    route_group_kernel(const float* __restrict__ x, const float* __restrict__ router, const float* bias,
                       int T, int H, int E, int k, ExpertRange local, bool shared, float* logits,
                       int32_t* ids, float* w, int32_t* counts, int32_t* offsets, int32_t* rank,
                       int32_t* slot_token, int32_t* active, unsigned* ticket) {
  extern __shared__ int32_t smem[];
  float* part = reinterpret_cast<float*>(smem);  // [32 warps][T]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int e = blockIdx.x * kRouterExpertsPerCta + warp / kRouterWarpsPerExpert;
  const int slice = warp % kRouterWarpsPerExpert, len = H / kRouterWarpsPerExpert;  // H % 256 == 0
  float acc[kRouteGroupMaxTokens];
#pragma unroll
  for (int t = 0; t < kRouteGroupMaxTokens; ++t) acc[t] = 0.0f;
  if (e < E) {
    const float* wr = router + static_cast<int64_t>(e) * H + slice * len;
    for (int i = lane * 4; i < len; i += 128) {
      const float4 wv = *reinterpret_cast<const float4*>(wr + i);
#pragma unroll
      for (int t = 0; t < kRouteGroupMaxTokens; ++t) {
        if (t >= T) break;
        const float4 xv = *reinterpret_cast<const float4*>(x + static_cast<int64_t>(t) * H + slice * len + i);
        acc[t] += wv.x * xv.x + wv.y * xv.y + wv.z * xv.z + wv.w * xv.w;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kRouteGroupMaxTokens; ++t) {
    if (t >= T) break;
    float v = acc[t];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (lane == 0) part[warp * T + t] = v;
  }
  __syncthreads();
  for (int i = tid; i < kRouterExpertsPerCta * T; i += kGroupThreads) {
    const int le = i / T, t = i % T, ee = blockIdx.x * kRouterExpertsPerCta + le;
    if (ee >= E) continue;
    float v = 0;
    for (int sl = 0; sl < kRouterWarpsPerExpert; ++sl) v += part[(le * kRouterWarpsPerExpert + sl) * T + t];
    logits[static_cast<int64_t>(t) * E + ee] = v;
  }
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (tid == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int t = warp; t < T; t += kGroupThreads / 32)
    route_token(logits + static_cast<int64_t>(t) * E, bias, E, k, ids + static_cast<int64_t>(t) * k,
                w + static_cast<int64_t>(t) * k);
  __syncthreads();
  group_pairs(ids, T * k, k, local, T, shared, counts, offsets, rank, slot_token, active, smem);
  if (tid == 0) *ticket = 0;
}

__device__ __forceinline__ float swiglu_oai(float gate, float up, float alpha, float limit) {
  const float g = fminf(gate, limit);
  const float u = fmaxf(-limit, fminf(up, limit));
  return (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
}

constexpr int kGemvWarps = 4;  // 64 weight rows per CTA

// Y[slot] = W[e] . X[row(slot)] for the count[e] slots of group e (dense: one group of `dense_count` rows
// when counts is null). Swap-AB MMA: weight rows are M (16 per warp), tokens are N (8 per group). Each lane
// loads 16 B of its two weight rows per chunk and the same columns of its token's row; every 8 columns are
// used as two k16 steps under one consistent column permutation (the dot product does not depend on the order
// of k). bf16 weights: 8 columns per 16 B, chunks of 32 columns; fp8 (kernels/fp8.h): 16 columns per 16 B,
// widened in registers with the row's block scale (fp8_widen.cuh), chunks of 64 columns, so a pass reads half
// the bytes. kSwiglu: W rows are gate/up interleaved in blocks of 8 (rows 16j..16j+7 = gate units 8j..,
// rows 16j+8.. = up units 8j..), output act bf16 [slots, N/2]; else fp32 [slots, N]. kGemvGroups x 8 tokens
// per pass over the weights (1, 2 or 4: fewer registers, more warps per SM). kSplit warps share 16 rows and
// take every kSplit-th step of K (a CTA holds 64 / kSplit rows); their partial sums meet in shared memory
// in warp order (deterministic), so a layer with few rows still has warps enough to keep loads in flight.
template <bool kSwiglu, int kGemvGroups, bool kFp8, int kSplit>
__global__ void __launch_bounds__(kGemvWarps * 32)
    grouped_gemv_kernel(const void* __restrict__ Wv, const uint8_t* __restrict__ S, int64_t w_stride, int N,
                        int K, const bf16* __restrict__ X, int ldx, const int32_t* __restrict__ slot_token,
                        const int32_t* __restrict__ counts, const int32_t* __restrict__ offsets,
                        const int32_t* __restrict__ active, int dense_count, void* __restrict__ Y,
                        float alpha, float limit) {
  constexpr int kCols = kFp8 ? 16 : 8;  // columns per 16-byte load
  constexpr int kChunk = 4 * kCols;     // columns per chunk (the four lanes of a row)
  constexpr int kStep = 4 * kChunk;     // columns per iteration: 4 chunks, 8 loads in flight per lane
  const int e = active ? active[blockIdx.y] : blockIdx.y;
  if (e < 0) return;
  const int count = counts ? counts[e] : dense_count;
  if (count == 0) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int slice = warp % kSplit;  // this warp's steps of K: slice, slice + kSplit, ...
  const int row0 = (blockIdx.x * (kGemvWarps / kSplit) + warp / kSplit) * 16;
  if (kSplit == 1 && row0 >= N) return;  // with kSplit > 1 every warp reaches the reductions' barriers
  const bool rows_ok = row0 < N;
  __shared__ float partial[kSplit > 1 ? kGemvWarps : 1][kGemvGroups][4][32];
  const int first = offsets ? offsets[e] : 0;
  using WeightT = std::conditional_t<kFp8, uint8_t, bf16>;  // one element per weight
  const int64_t lo_off = e * w_stride + static_cast<int64_t>(rows_ok ? row0 + g : 0) * K;
  const WeightT* w_lo = static_cast<const WeightT*>(Wv) + lo_off;
  const WeightT* w_hi = w_lo + 8 * static_cast<int64_t>(K);
  const uint8_t* s_lo = kFp8 ? S + lo_off / kFp8Block : nullptr;
  const uint8_t* s_hi = kFp8 ? s_lo + 8 * (K / kFp8Block) : nullptr;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int pass = 0; pass < count; pass += kGemvGroups * 8) {
    const bf16* xrow[kGemvGroups];
#pragma unroll
    for (int q = 0; q < kGemvGroups; ++q) {
      const int i = pass + q * 8 + g;
      const int row = i < count ? (slot_token ? slot_token[first + i] : first + i) : -1;
      xrow[q] = row >= 0 ? X + static_cast<int64_t>(row) * ldx : nullptr;
    }
    bool more[kGemvGroups];
#pragma unroll
    for (int q = 0; q < kGemvGroups; ++q) more[q] = pass + 8 * q < count;
    float acc[kGemvGroups][4] = {};
    // kStep columns per iteration, register double-buffered: the next iteration's eight 16-byte weight loads
    // are in flight while this iteration's MMAs run.
    uint4 lo[4], hi[4];
    uint32_t slo[4], shi[4];  // fp8: the chunks' block scales as bf16x2 powers of two
    auto load = [&](int k0, uint4(&l)[4], uint4(&h)[4], uint32_t(&sl)[4], uint32_t(&sh)[4]) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = k0 + kChunk * j + kCols * t;
        l[j] = col < K ? ld_stream_16(w_lo + col) : zero;
        h[j] = col < K ? ld_stream_16(w_hi + col) : zero;
        if constexpr (kFp8) {
          sl[j] = col < K ? fp8_scale_bf16x2(__ldg(s_lo + col / kFp8Block)) : 0u;
          sh[j] = col < K ? fp8_scale_bf16x2(__ldg(s_hi + col / kFp8Block)) : 0u;
        }
      }
    };
    // Eight columns (one uint4 of bf16 per row and per token) as two k16 MMA steps.
    auto mma8 = [&](float(&a)[4], uint4 l, uint4 h, uint4 xv) {
      const uint32_t a0[4] = {l.x, h.x, l.y, h.y}, a1[4] = {l.z, h.z, l.w, h.w};
      const uint32_t b0[2] = {xv.x, xv.y}, b1[2] = {xv.z, xv.w};
      mma_bf16_16816(a, a0, b0);
      mma_bf16_16816(a, a1, b1);
    };
    const int k_begin = kSplit == 1 ? 0 : rows_ok ? slice * kStep : K;
    if (k_begin < K) load(k_begin, lo, hi, slo, shi);
    for (int k0 = k_begin; k0 < K; k0 += kSplit * kStep) {
      uint4 nlo[4], nhi[4];
      uint32_t nslo[4], nshi[4];
      if (k0 + kSplit * kStep < K) load(k0 + kSplit * kStep, nlo, nhi, nslo, nshi);
      // The tokens' columns of this iteration, all loads issued before the first MMA (they come from L2).
      constexpr int kHalves = kFp8 ? 2 : 1;
      uint4 xv[kGemvGroups][4][kHalves];
#pragma unroll
      for (int q = 0; q < kGemvGroups; ++q)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int col = k0 + kChunk * j + kCols * t;
          const bool ok = more[q] && xrow[q] != nullptr && col < K;
#pragma unroll
          for (int h = 0; h < kHalves; ++h) xv[q][j][h] = ok ? ld_16(xrow[q] + col + 8 * h) : zero;
        }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if constexpr (kFp8) {
          uint4 l0, l1, h0, h1;
          widen_e4m3x16(lo[j], slo[j], l0, l1);
          widen_e4m3x16(hi[j], shi[j], h0, h1);
#pragma unroll
          for (int q = 0; q < kGemvGroups; ++q) {
            if (!more[q]) continue;
            mma8(acc[q], l0, h0, xv[q][j][0]);
            mma8(acc[q], l1, h1, xv[q][j][kHalves - 1]);
          }
        } else {
#pragma unroll
          for (int q = 0; q < kGemvGroups; ++q) {
            if (!more[q]) continue;
            mma8(acc[q], lo[j], hi[j], xv[q][j][0]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        lo[j] = nlo[j], hi[j] = nhi[j];
        if constexpr (kFp8) slo[j] = nslo[j], shi[j] = nshi[j];
      }
    }
    if constexpr (kSplit > 1) {  // slices 1.. hand their sums to slice 0, which adds them in order
      if (slice > 0)
#pragma unroll
        for (int q = 0; q < kGemvGroups; ++q)
#pragma unroll
          for (int r = 0; r < 4; ++r) partial[warp][q][r][lane] = acc[q][r];
      __syncthreads();
      if (slice == 0)
        for (int w = warp + 1; w < warp + kSplit; ++w)
#pragma unroll
          for (int q = 0; q < kGemvGroups; ++q)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[q][r] += partial[w][q][r][lane];
      __syncthreads();  // the buffer is refilled by the next pass
      if (slice > 0 || !rows_ok) continue;
    }
#pragma unroll
    for (int q = 0; q < kGemvGroups; ++q) {
      if (!more[q]) continue;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int i = pass + q * 8 + 2 * t + j;
        if (i >= count) continue;
        const int64_t slot = first + i;
        if constexpr (kSwiglu) {
          const int unit = row0 / 2 + g;
          static_cast<bf16*>(Y)[slot * (N / 2) + unit] =
              __float2bfloat16(swiglu_oai(acc[q][j], acc[q][2 + j], alpha, limit));
        } else {
          float* y = static_cast<float*>(Y) + slot * N + row0 + g;
          y[0] = acc[q][j];
          y[8] = acc[q][2 + j];
        }
      }
    }
  }
}

// act[r, u] = SwiGLU-OAI(gate, up) of row r of the interleaved [rows, 2I] GEMM output.
__global__ void swiglu_interleaved_kernel(const float* gu, int64_t rows, int I, float alpha, float limit,
                                          bf16* act) {
  const int64_t n = rows * I;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / I;
    const int u = static_cast<int>(i % I);
    const float* row = gu + r * 2 * I + (u / 8) * 16 + u % 8;
    act[i] = __float2bfloat16(swiglu_oai(row[0], row[8], alpha, limit));
  }
}

// The compact slot of pair p (moe_group's layout), -1 when another rank holds its expert.
__device__ __forceinline__ int64_t pair_slot(const int32_t* ids, const int32_t* rank, const int32_t* offsets,
                                             ExpertRange local, int p) {
  const int g = local_group(ids[p], local);
  return g >= 0 ? static_cast<int64_t>(offsets[g]) + rank[p] : -1;
}

// One CTA per pair: xs[slot(p)] = x[p / k] (bf16 rows, 16-byte copies).
__global__ void gather_kernel(const bf16* x, const int32_t* ids, const int32_t* rank, const int32_t* offsets,
                              int k, int H, ExpertRange local, bf16* xs) {
  const int p = blockIdx.x;
  const int64_t slot = pair_slot(ids, rank, offsets, local, p);
  if (slot < 0) return;
  const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(p / k) * H);
  uint4* dst = reinterpret_cast<uint4*>(xs + slot * H);
  for (int i = threadIdx.x; i < H / 8; i += blockDim.x) dst[i] = src[i];
}

// out[t] = scale * sum over the token's local experts in ascending id order of w * y[slot] + shared row.
// Grid (T, width chunks of 1024), 4 columns per thread.
__global__ void combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ ids,
                               const float* __restrict__ w, const int32_t* __restrict__ rank,
                               const int32_t* __restrict__ offsets, int k, int H, float scale,
                               const float* shared, bool shared_group, ExpertRange local, float* out,
                               unsigned long long* expert_tokens) {
  const int t = blockIdx.x;
  if (expert_tokens && blockIdx.y == 0 && threadIdx.x < k)
    atomicAdd(expert_tokens + ids[t * k + threadIdx.x], 1ull);
  int order[16];
  for (int i = 0; i < k; ++i) order[i] = i;
  for (int i = 1; i < k; ++i)
    for (int j = i; j > 0 && ids[t * k + order[j - 1]] > ids[t * k + order[j]]; --j) {
      const int x = order[j];
      order[j] = order[j - 1];
      order[j - 1] = x;
    }
  const float* rows[16];
  float wt[16];
  int n = 0;  // the token's local experts
  for (int i = 0; i < k; ++i) {
    const int p = t * k + order[i];
    const int64_t slot = pair_slot(ids, rank, offsets, local, p);
    if (slot < 0) continue;
    rows[n] = y + slot * H;
    wt[n++] = w[p];
  }
  const float* sh = shared         ? shared + static_cast<int64_t>(t) * H
                    : shared_group ? y + (static_cast<int64_t>(offsets[local.count]) + t) * H
                                   : nullptr;
  float* o = out + static_cast<int64_t>(t) * H;
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * 4;
  if (c >= H) return;
  if (H % 4 == 0) {
    float4 acc = make_float4(0, 0, 0, 0);
    for (int i = 0; i < n; ++i) {
      const float4 v = *reinterpret_cast<const float4*>(rows[i] + c);
      acc.x += v.x * wt[i], acc.y += v.y * wt[i], acc.z += v.z * wt[i], acc.w += v.w * wt[i];
    }
    const float4 s4 = sh ? *reinterpret_cast<const float4*>(sh + c) : make_float4(0, 0, 0, 0);
    *reinterpret_cast<float4*>(o + c) =
        make_float4(acc.x * scale + s4.x, acc.y * scale + s4.y, acc.z * scale + s4.z, acc.w * scale + s4.w);
    return;
  }
  for (int cc = c; cc < c + 4 && cc < H; ++cc) {
    float acc = 0;
    for (int i = 0; i < n; ++i) acc += rows[i][cc] * wt[i];
    o[cc] = acc * scale + (sh ? sh[cc] : 0.0f);
  }
}

int grid_for(int64_t n, int threads) {
  return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
}

}  // namespace

void moe_route(const float* logits, const float* bias, int T, int E, int k, int32_t* ids, float* w,
               cudaStream_t s) {
  if (E > 256 || k > 16) fail(ErrorKind::kUnsupported, "moe_route: at most 256 experts and top-16");
  if (T > 0) route_kernel<<<(T * 32 + 127) / 128, 128, 0, s>>>(logits, bias, T, E, k, ids, w);
}

void moe_group(const int32_t* ids, int T, int k, ExpertRange local, bool shared, int32_t* counts,
               int32_t* offsets, int32_t* rank, int32_t* slot_token, int32_t* active, cudaStream_t s) {
  if (local.count > 256 || local.count < 0 || local.first < 0)
    fail(ErrorKind::kUnsupported, "moe_group: at most 256 local experts");
  const size_t smem = 33 * size_t(local.count) * sizeof(int32_t);
  group_kernel<<<1, kGroupThreads, smem, s>>>(ids, T * k, k, local, T, shared, counts, offsets, rank,
                                              slot_token, active);
}

void moe_route_group(const float* x, const float* router, const float* bias, int T, int H, int E, int k,
                     ExpertRange local, bool shared, float* logits, int32_t* ids, float* w, int32_t* counts,
                     int32_t* offsets, int32_t* rank, int32_t* slot_token, int32_t* active, unsigned* ticket,
                     cudaStream_t s) {
  if (E > 256 || k > 16) fail(ErrorKind::kUnsupported, "moe_route_group: at most 256 experts and top-16");
  if (local.first < 0 || local.count < 0 || local.first + local.count > E)
    fail(ErrorKind::kInvalidArgument, "moe_route_group: local experts outside [0, E)");
  if (T > kRouteGroupMaxTokens || H % (kRouterWarpsPerExpert * 4) != 0)
    fail(ErrorKind::kUnsupported, "moe_route_group: T <= " + std::to_string(kRouteGroupMaxTokens) +
                                      " and H a multiple of " + std::to_string(kRouterWarpsPerExpert * 4));
  if (T <= 0) return;
  const size_t smem = std::max<size_t>(33 * size_t(local.count), size_t(32) * T) * sizeof(int32_t);
  route_group_kernel<<<(E + kRouterExpertsPerCta - 1) / kRouterExpertsPerCta, kGroupThreads, smem, s>>>(
      x, router, bias, T, H, E, k, local, shared, logits, ids, w, counts, offsets, rank, slot_token, active,
      ticket);
}

namespace {

// Launches grouped_gemv_kernel for bf16 (S null) or fp8 weights.
void launch_gemv(const void* W, const uint8_t* S, int64_t w_stride, int groups, int N, int K, const bf16* X,
                 int ldx, const int32_t* slot_token, const int32_t* counts, const int32_t* offsets,
                 const int32_t* active, int max_active, int max_count, bool swiglu, float alpha, float limit,
                 void* Y, cudaStream_t s) {
  const int ys = active ? std::min(groups, max_active) : groups;
  if (ys <= 0 || max_count <= 0) return;
  const int dense_count = counts ? 0 : max_count;
  // Fewer than ~16 warps per SM of 16-row tiles (a dense layer, or a few experts): split K four ways.
  const int64_t tiles = int64_t((N + 15) / 16) * ys;
  const bool split = tiles < 16 * 132;
  auto launch = [&](auto kernel, int k_split) {
    const int rows = kGemvWarps / k_split * 16;
    kernel<<<dim3((N + rows - 1) / rows, ys), kGemvWarps * 32, 0, s>>>(
        W, S, w_stride, N, K, X, ldx, slot_token, counts, offsets, active, dense_count, Y, alpha, limit);
  };
  // Tokens per pass: as few as cover the bound (registers, hence warps per SM, grow with them). Experts:
  // beyond 64 tokens one rarely holds more than 32, and extra passes re-read its weights. A dense layer holds
  // all T.
  const int groups8 = counts ? (max_count <= 8    ? 1
                                : max_count <= 64 ? 2
                                                  : 4)
                             : (max_count <= 8    ? 1
                                : max_count <= 16 ? 2
                                                  : 4);
  auto pick = [&](auto swiglu_tag, auto fp8_tag) {
    constexpr bool kSwiglu = decltype(swiglu_tag)::value, kFp8 = decltype(fp8_tag)::value;
    if (split) {
      if (groups8 == 1)
        launch(grouped_gemv_kernel<kSwiglu, 1, kFp8, 4>, 4);
      else if (groups8 == 2)
        launch(grouped_gemv_kernel<kSwiglu, 2, kFp8, 4>, 4);
      else
        launch(grouped_gemv_kernel<kSwiglu, 4, kFp8, 4>, 4);
    } else if (groups8 == 1) {
      launch(grouped_gemv_kernel<kSwiglu, 1, kFp8, 1>, 1);
    } else if (groups8 == 2) {
      launch(grouped_gemv_kernel<kSwiglu, 2, kFp8, 1>, 1);
    } else {
      launch(grouped_gemv_kernel<kSwiglu, 4, kFp8, 1>, 1);
    }
  };
  auto by_format = [&](auto swiglu_tag) {
    if (S)
      pick(swiglu_tag, std::true_type{});
    else
      pick(swiglu_tag, std::false_type{});
  };
  if (swiglu)
    by_format(std::true_type{});
  else
    by_format(std::false_type{});
}

}  // namespace

void grouped_gemv(const bf16* W, Fp8Matrix W8, int64_t w_stride, int groups, int N, int K, const bf16* X,
                  int ldx, const int32_t* slot_token, const int32_t* counts, const int32_t* offsets,
                  const int32_t* active, int max_active, int max_count, bool swiglu, float alpha, float limit,
                  void* Y, cudaStream_t s) {
  if (W8.w && (K % kFp8Block != 0 || w_stride % kFp8Block != 0))
    fail(ErrorKind::kInvalidArgument, "grouped_gemv: fp8 K and group stride must be multiples of 32");
  launch_gemv(W8.w ? static_cast<const void*>(W8.w) : W, W8.w ? W8.s : nullptr, w_stride, groups, N, K, X,
              ldx, slot_token, counts, offsets, active, max_active, max_count, swiglu, alpha, limit, Y, s);
}

void linear_gemv(const bf16* W, Fp8Matrix W8, int N, int K, const bf16* X, int T, float* Y, cudaStream_t s) {
  if (W8.w && K % kFp8Block != 0) fail(ErrorKind::kInvalidArgument, "linear_gemv: fp8 K % 32 != 0");
  launch_gemv(W8.w ? static_cast<const void*>(W8.w) : W, W8.w ? W8.s : nullptr, 0, 1, N, K, X, K, nullptr,
              nullptr, nullptr, nullptr, 1, T, false, 0, 0, Y, s);
}

void swiglu_interleaved(const float* gate_up, int64_t rows, int I, float alpha, float limit, bf16* act,
                        cudaStream_t s) {
  if (rows > 0)
    swiglu_interleaved_kernel<<<grid_for(rows * I, 256), 256, 0, s>>>(gate_up, rows, I, alpha, limit, act);
}

void moe_gather(const bf16* x, const int32_t* ids, const int32_t* rank, const int32_t* offsets, int T, int k,
                int H, ExpertRange local, bf16* xs, cudaStream_t s) {
  if (T > 0) gather_kernel<<<T * k, 128, 0, s>>>(x, ids, rank, offsets, k, H, local, xs);
}

void moe_combine(const float* y, const int32_t* ids, const float* w, const int32_t* rank,
                 const int32_t* offsets, int T, int k, int H, float scale, const float* shared,
                 bool shared_group, ExpertRange local, float* out, unsigned long long* expert_tokens,
                 cudaStream_t s) {
  if (T > 0)
    combine_kernel<<<dim3(T, (H + 1023) / 1024), 256, 0, s>>>(y, ids, w, rank, offsets, k, H, scale, shared,
                                                              shared_group, local, out, expert_tokens);
}

}  // namespace m3::cuda
