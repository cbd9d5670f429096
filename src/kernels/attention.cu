// Paged GQA attention on tensor cores, prefill and decode, dense and MSA block-sparse. Two kernels share the
// per-stage math (S = Q.K^T and O += P.V on mma.sync m16n8k16 bf16 with ldmatrix fragments, fp32 online
// softmax in base 2 with the scale folded into one FMA per score) and the split-K epilogue:
//  - tile kernel (prefill, mixed batches): a CTA = (tile, KV head [x head chunk], split); its M rows pack the
//    tile's tokens x the group's query heads (e.g. 8 tokens x 16 heads = 128 rows), so every K/V row loaded
//    into shared memory serves all of them. Keys are walked in a "virtual" order: dense = positions
//    0..max_pos of the tile; sparse = the union of the tile's tokens' selected blocks (deduplicated through a
//    bitmap in shared memory, ascending), each block contributing page_size slots. Warps split M (8 warps x
//    16 rows) or the keys of a stage (merged in shared memory at the end). 64-key stages go through a 3-stage
//    cp.async ring (2 for head_dim 256) with one barrier per stage.
//  - decode kernel (every tile one token, group <= 16): 16 rows; each warp streams its own 16-key units
//    through a private cp.async ring (no CTA barrier in the key loop), page ids come from a per-warp register
//    window; the warps' states are merged in shared memory at the end.
// Rows of keys that do not exist are zero filled, so stale or NaN cache bytes never reach an MMA; a row's
// mask (key position <= the row's position, block selected by the row's token) is applied only where needed.
// Split-K: each CTA writes a normalised partial O and its log-sum-exp to the workspace, bumps a tagged
// counter of its (tile, KV head, chunk) with one atomicAdd, and the last-arriving CTA merges the partials
// into the bf16 output and resets the counter (no second launch; graph replays find the counters at zero).
#include <climits>
#include <cmath>
#include <string>

#include "common/error.h"
#include "kernels/attention_stage.cuh"
#include "kernels/device_info.h"
#include "kernels/kernels.h"
#include "kernels/mma.cuh"

namespace m3::cuda {
namespace {

constexpr int kKeys = 64;  // keys per pipeline stage (attention_plan.cc's key tile)
constexpr int kMaxLaunchSplits = 64;
constexpr float kLog2e = 1.4426950408889634f;
// High word of a split-K counter that this code wrote; any other value is an uninitialised workspace.
constexpr uint32_t kCounterTag = 0x4D33A770u;

struct Params {
  const float* q;
  const bf16* k;
  const bf16* v;
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

// Tile kernel shared memory: Q [rows][dim + 8] bf16 | stages x (K, V) [64][dim + 8] bf16 (reused by the
// epilogue) | split-K weights [rows][splits] fp32 | ints: token positions [tokens_cap], 16 scalars, then
// (sparse) block bitmap, its word prefix, the union's block list and, per union block, a bitmask of the tile
// tokens that selected it. The 8-element row pad makes ldmatrix conflict-free. (The decode kernel's layout is
// attention_decode_smem_bytes, attention_plan.h.)
struct SmemLayout {
  int off_kv, off_w, off_int, bytes;
};
SmemLayout smem_layout(int rows, int dim, int stages, const Params& p, bool sparse) {
  const int stride_bytes = (dim + 8) * 2;
  const int kv = rows * stride_bytes;
  const int w = kv + stages * 2 * kKeys * stride_bytes;
  const int ints = w + (p.splits > 1 ? 4 * rows * p.splits : 0);
  int n = 16 + p.tokens_cap;
  if (sparse) n += 2 * p.bitmap_words + p.union_cap + p.union_cap * p.token_words;
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

// Q rows (fp32) -> bf16 rows of shared memory; padding rows are zeros.
template <int D, int kRows, int kThreads>
__device__ __forceinline__ void load_q(const Params& p, bf16* qs, int count, int t0, int kvh, int chunk) {
  for (int i = threadIdx.x; i < kRows * (D / 4); i += kThreads) {
    const int r = i / (D / 4), c = (i - r * (D / 4)) * 4;
    const int64_t row = out_row(p, r, count, t0, kvh, chunk);
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row >= 0) x = *reinterpret_cast<const float4*>(p.q + row * D + c);
    *reinterpret_cast<uint2*>(qs + r * (D + 8) + c) =
        make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
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
  __threadfence();
  __syncthreads();
  if (tid == 0) *flag = arrive_last(p.counters + counter, seen, p.splits);
  __syncthreads();
  if (!*flag) return;
  __threadfence();
  merge_splits<D, kRows, kThreads>(p, count, t0, kvh, chunk, w, stage, stage_floats);
}

// Stage ring: waits for stage `it`, then refills the buffer the previous stage used. One barrier per stage.
template <int kStages, typename Load>
__device__ __forceinline__ void ring_advance(int it, int se, Load&& load) {
  cp_async_wait<kStages - 2>();
  __syncthreads();
  if (it + kStages - 1 < se) load(it + kStages - 1);
  cp_async_commit();
}

template <int D>
__host__ __device__ constexpr int stages_for() {
  return D <= 128 ? 3 : 2;
}

template <int D, int WM, int WN, bool kSparse>
__global__ void __launch_bounds__(32 * WM * WN) tile_kernel(const Params p) {
  constexpr int kWarps = WM * WN, kThreads = 32 * kWarps, kRows = 16 * WM, kStride = D + 8;
  constexpr int kWarpKeys = kKeys / WN, kSTiles = kWarpKeys / 8, kStages = stages_for<D>();
  constexpr int kRowChunks = D / 8;  // 16-byte chunks per K/V row
  constexpr int kRowsPerPass = kThreads / kRowChunks;
  static_assert(kWarpKeys % 16 == 0 && kThreads % kRowChunks == 0 && kKeys % kRowsPerPass == 0);
  static_assert(kWarps <= 8, "misc[8..16) holds the per-warp scan totals");

  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* kvs = reinterpret_cast<bf16*>(smem + p.off_kv);
  int* tok_pos = reinterpret_cast<int*>(smem + p.off_int);
  int* misc = tok_pos + p.tokens_cap;  // [0] max position, [1] min position, [2] flag, [8 + w] scan totals
  uint32_t* bitmap = reinterpret_cast<uint32_t*>(misc + 16);
  int* prefix = reinterpret_cast<int*>(bitmap + p.bitmap_words);
  int* list = prefix + p.bitmap_words;
  uint32_t* memb = reinterpret_cast<uint32_t*>(list + p.union_cap);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % WM, wn = warp / WM;
  const int tile_idx = p.num_tiles - 1 - blockIdx.x;  // later tiles (more keys) first
  const AttentionTile tile = p.tiles[tile_idx];
  const int count = min(tile.count, p.tokens_cap), t0 = tile.first;
  if (count <= 0) return;
  const int kvh = blockIdx.y / p.chunks, chunk = blockIdx.y - kvh * p.chunks, split = blockIdx.z;
  const int P = p.page_size;
  const int seq = p.meta.seq[t0];
  const int counter = tile_idx * gridDim.y + blockIdx.y;
  const unsigned long long seen = counter_peek(p, counter);

  // Phase 1: token positions, Q -> bf16 rows, cleared bookkeeping.
  if (warp == 0) {
    int mx = -1, mn = INT_MAX;
    for (int i = lane; i < count; i += 32) {
      const int pos = p.meta.pos[t0 + i];
      tok_pos[i] = pos;
      mx = max(mx, pos);
      mn = min(mn, pos);
    }
    mx = warp_max_int(mx);
    mn = warp_min_int(mn);
    if (lane == 0) misc[0] = mx, misc[1] = mn;
  }
  load_q<D, kRows, kThreads>(p, qs, count, t0, kvh, chunk);
  if constexpr (kSparse) {
    for (int i = tid; i < p.bitmap_words; i += kThreads) bitmap[i] = 0;
    for (int i = tid; i < p.union_cap * p.token_words; i += kThreads) memb[i] = 0;
  }
  __syncthreads();
  const int max_pos = misc[0], min_pos = misc[1];

  // Phase 2 (sparse): the union of the tile's selected blocks, ascending, and who selected each.
  int n_union = 0;
  if constexpr (kSparse) {
    const int nblk = min(max_pos / P + 1, p.meta.max_blocks);  // blocks a tile token can see
    const int nw = (nblk + 31) >> 5;
    const int entries = count * p.topk;
    const int32_t* sel = p.sel + (int64_t(t0) * p.kv_heads + kvh) * p.topk;
    const int64_t sel_stride = int64_t(p.kv_heads) * p.topk;
    for (int e = tid; e < entries; e += kThreads) {
      const int tt = e / p.topk;
      const int b = sel[tt * sel_stride + (e - tt * p.topk)];
      if (b >= 0 && b < nblk) atomicOr(&bitmap[b >> 5], 1u << (b & 31));
    }
    __syncthreads();
    // Exclusive scan of the words' popcounts (each thread owns a run of words), then the block list.
    const int per = (nw + kThreads - 1) / kThreads;
    const int wb = min(tid * per, nw), we = min(wb + per, nw);
    int local = 0;
    for (int w = wb; w < we; ++w) local += __popc(bitmap[w]);
    int incl = local;
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffff, incl, o);
      if (lane >= o) incl += n;
    }
    if (lane == 31) misc[8 + warp] = incl;
    __syncthreads();
    int off = incl - local;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) off += misc[8 + w];
      n_union += misc[8 + w];
    }
    n_union = min(n_union, p.union_cap);
    for (int w = wb; w < we; ++w) {
      prefix[w] = off;
      for (uint32_t bits = bitmap[w]; bits != 0; bits &= bits - 1, ++off)
        if (off < p.union_cap) list[off] = (w << 5) + __ffs(bits) - 1;
    }
    __syncthreads();
    for (int e = tid; e < entries; e += kThreads) {
      const int tt = e / p.topk;
      const int b = sel[tt * sel_stride + (e - tt * p.topk)];
      if (b < 0 || b >= nblk) continue;
      const int u = prefix[b >> 5] + __popc(bitmap[b >> 5] & ((1u << (b & 31)) - 1));
      if (u < p.union_cap) atomicOr(&memb[u * p.token_words + (tt >> 5)], 1u << (tt & 31));
    }
    __syncthreads();
  }

  // Virtual keys and this split's range of 64-key stages.
  int n_keys = max_pos + 1;
  if constexpr (kSparse) {
    n_keys = 0;
    if (n_union > 0) {
      const int last = list[n_union - 1];
      n_keys = (n_union - 1) * P + min(P, max_pos - last * P + 1);
    }
  }
  const int n_stages = (n_keys + kKeys - 1) / kKeys;
  const int sb = int(int64_t(n_stages) * split / p.splits),
            se = int(int64_t(n_stages) * (split + 1) / p.splits);

  // This thread's two accumulator rows (g and g + 8 of the warp's 16).
  const int g = lane >> 2, c2 = (lane & 3) * 2;
  int row_tok[2], row_pos[2];
  int64_t row_out[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = wm * 16 + g + 8 * i;
    row_out[i] = out_row(p, r, count, t0, kvh, chunk);
    const int tt = r / p.hc;
    row_tok[i] = row_out[i] >= 0 ? tt : 0;
    row_pos[i] = row_out[i] >= 0 ? tok_pos[tt] : -1;
  }
  QFrags<D> qf;
  qf.init(qs, wm, lane);

  // K/V stage loader: each thread copies one 16-byte column chunk of every kRowsPerPass-th key row.
  const int ld_c = (tid % kRowChunks) * 8, ld_r = tid / kRowChunks;
  const int32_t* table = p.meta.block_table + int64_t(seq) * p.meta.max_blocks;
  const int64_t slot_stride = int64_t(p.kv_heads) * D, head_off = int64_t(kvh) * D + ld_c;
  auto load_stage = [&](int stage_idx) {
    bf16* ks = kvs + ((stage_idx - sb) % kStages) * (2 * kKeys * kStride);
    bf16* vs = ks + kKeys * kStride;
#pragma unroll
    for (int pass = 0; pass < kKeys / kRowsPerPass; ++pass) {
      const int r = ld_r + pass * kRowsPerPass, v = stage_idx * kKeys + r;
      int blk, slot;
      if constexpr (kSparse) {
        const int u = v / P;
        slot = v - u * P;
        blk = u < n_union ? list[u] : 0;
      } else {
        blk = v / P;
        slot = v - blk * P;
      }
      const bool ok = v < n_keys && blk * P + slot <= max_pos;
      const int64_t off = ok ? (int64_t(table[blk]) * P + slot) * slot_stride + head_off : 0;
      cp_async_16_zfill(ks + r * kStride + ld_c, p.k + off, ok);
      cp_async_16_zfill(vs + r * kStride + ld_c, p.v + off, ok);
    }
  };

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (sb + st < se) load_stage(sb + st);
    cp_async_commit();
  }
  const float scale = p.scale_log2;
  for (int it = sb; it < se; ++it) {
    ring_advance<kStages>(it, se, load_stage);
    const bf16* ks = kvs + ((it - sb) % kStages) * (2 * kKeys * kStride);
    const bf16* vs = ks + kKeys * kStride;
    const int key0 = wn * kWarpKeys;
    float s[kSTiles][4];
    qk_scores<D, kSTiles>(s, qf, ks + key0 * kStride, lane);

    // Mask, only where some key of the warp's range may be invisible to some row.
    const int v0 = it * kKeys + key0;
    bool need_mask, single = true;
    int base_pos = v0;  // position of key v0 (dense, or sparse within one block)
    bool member[2] = {true, true};
    if constexpr (kSparse) {
      const int u0 = v0 / P;
      single = u0 == (v0 + kWarpKeys - 1) / P && u0 < n_union;
      need_mask = true;
      if (single) {
        base_pos = list[u0] * P + (v0 - u0 * P);
        const uint32_t* mw = memb + u0 * p.token_words;
        bool all = true;
        for (int w = 0; w < p.token_words; ++w) {
          const int left = count - 32 * w;
          all &= mw[w] == (left >= 32 ? 0xffffffffu : left > 0 ? (1u << left) - 1 : 0u);
        }
        member[0] = token_bit(mw, row_tok[0]);
        member[1] = token_bit(mw, row_tok[1]);
        need_mask = !all || base_pos + kWarpKeys - 1 > min_pos;
      }
    } else {
      need_mask = v0 + kWarpKeys - 1 > min_pos;
    }
    if (need_mask) {
#pragma unroll
      for (int j = 0; j < kSTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = j * 8 + c2 + (e & 1), i = e >> 1;
          bool ok;
          if (!kSparse || single) {
            ok = member[i] && base_pos + col <= row_pos[i];
          } else {
            const int v = v0 + col, u = v / P;
            ok = u < n_union && list[u] * P + (v - u * P) <= row_pos[i] &&
                 token_bit(memb + u * p.token_words, row_tok[i]);
          }
          if (!ok) s[j][e] = -INFINITY;
        }
    }
    softmax_pv<D, kSTiles>(s, o, m, l, scale, vs + key0 * kStride, lane);
  }
  cp_async_wait<0>();

  float* red = reinterpret_cast<float*>(kvs);
  merge_key_warps<D, WM, WN>(o, m, l, red, wm, wn, lane);
  __syncthreads();  // the K/V buffers become the epilogue's staging area
  finish<D, kRows, kThreads>(p, o, m, l, wn == 0, row_out, split, counter, seen, count, t0, kvh, chunk,
                             reinterpret_cast<float*>(smem + p.off_w), red, (p.off_w - p.off_kv) / 4,
                             misc + 2);
}

// Decode: one token per tile, <= 16 query heads per CTA (16 rows). Unit i (16 consecutive virtual keys) of
// the split belongs to warp i mod kWarps, which streams its units through its own kRing-unit cp.async ring
// (kRing - 1 in flight while one is computed; __syncwarp only, no CTA barrier in the key loop). Virtual keys:
// positions 0..pos (dense), or the topk x page_size slots of the selection row in order (sparse: entries that
// are -1 or out of range and slots past pos are masked and never read; no compaction pass). A warp keeps a
// window of 32 consecutive blocks in registers (lane i: page id of block win + i, and for sparse the block's
// first position), so a unit's addresses are shuffles; the first window of the token is loaded together with
// the tile. The warps' (O, m, l) are merged in shared memory by all threads, then written (bf16 or a split's
// partial), and the last-arriving split merges the partials.
template <int D>
struct DecodeShape {  // attention_plan.h's host constexprs, evaluated outside device code
  static constexpr int kWarps = attention_decode_warps(D), kBytes = attention_decode_smem_bytes(D);
};
template <int D, bool kSparse>
__global__ void __launch_bounds__(32 * DecodeShape<D>::kWarps, 1) decode_kernel(const Params p) {
  constexpr int kWarps = DecodeShape<D>::kWarps, kThreads = 32 * kWarps, kRing = kAttentionDecodeRing;
  constexpr int kStride = D + 8, kUnit = 2 * 16 * kStride;  // K then V rows of one unit, bf16
  constexpr int kCh = D / 8, kKp = 32 / kCh;                // 16-byte chunks per row; rows per warp-wide copy
  constexpr int kOffRing = 16 * kStride * 2, kRingBytes = kWarps * kRing * kUnit * 2;
  constexpr int kOffW = kOffRing + kRingBytes, kOffMisc = kOffW + 16 * kMaxLaunchSplits * 4;
  constexpr int kRed = D + 4;  // fp32 row stride of the warp merge (in the rings)
  static_assert(kOffMisc + 16 * 4 == DecodeShape<D>::kBytes, "attention_plan.h's layout");
  static_assert(kWarps * 16 * (kRed + 2) * 4 <= kRingBytes && kRing >= 2 && kRing <= 4 && kCh <= 32);

  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ring = reinterpret_cast<bf16*>(smem + kOffRing) + warp * kRing * kUnit;
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
    const bf16* ks = ring + (j % kRing) * kUnit;
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
  int* flag = reinterpret_cast<int*>(smem + kOffMisc);
  __threadfence();
  __syncthreads();
  if (tid == 0) *flag = arrive_last(p.counters + counter, seen, p.splits);
  __syncthreads();
  if (!*flag) return;
  __threadfence();
  merge_splits<D, 16, kThreads>(p, 1, t0, kvh, chunk, reinterpret_cast<float*>(smem + kOffW), red,
                                kRingBytes / 4);
}

// Rows per CTA and head chunks for this launch, checked against the plan. Decode batches (every tile one
// token) with groups <= 16 take the decode kernel.
struct Shape {
  int group, hc, chunks, tokens_cap, rows;
  bool decode;
};
Shape shape_of(const AttentionTiles& tiles, int heads, int kv_heads, int dim) {
  if (kv_heads <= 0 || heads % kv_heads != 0)
    fail(ErrorKind::kInvalidArgument, "paged_attention: heads (" + std::to_string(heads) +
                                          ") must be a multiple of kv_heads (" + std::to_string(kv_heads) +
                                          ")");
  if (dim != 32 && dim != 64 && dim != 128 && dim != 256)
    fail(ErrorKind::kUnsupported,
         "paged_attention: head_dim must be 32, 64, 128 or 256 (got " + std::to_string(dim) + ")");
  Shape sh;
  sh.group = heads / kv_heads;
  const int cap = attention_max_rows(dim);
  sh.hc = std::min(sh.group, cap);
  sh.chunks = (sh.group + sh.hc - 1) / sh.hc;
  sh.tokens_cap = std::max(1, tiles.max_tokens);
  sh.rows = sh.tokens_cap * sh.hc;
  sh.decode = sh.tokens_cap == 1 && sh.group <= 16;
  if (sh.rows > cap)
    fail(ErrorKind::kInvalidArgument, "paged_attention: tiles of " + std::to_string(tiles.max_tokens) +
                                          " tokens do not fit " + std::to_string(cap) + " rows of " +
                                          std::to_string(sh.hc) +
                                          " heads (plan made for another group or dim?)");
  return sh;
}

int64_t max_keys(const Shape& sh, bool sparse, int topk, int page_size, int max_kv_len) {
  const int64_t dense = std::max(1, max_kv_len);
  return sparse ? std::min<int64_t>(dense, int64_t(sh.tokens_cap) * topk * page_size) : dense;
}

template <typename Kernel>
void launch_smem(Kernel kernel, const Params& p, int bytes, dim3 grid, int threads, cudaStream_t s) {
  int dev = 0, limit = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (limit > 0 && bytes > limit)
    fail(ErrorKind::kUnsupported, "paged_attention: needs " + std::to_string(bytes) +
                                      " bytes of shared memory per CTA (device limit " +
                                      std::to_string(limit) + "): too many tokens x top-k blocks per tile");
  if (bytes > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  kernel<<<grid, threads, bytes, s>>>(p);
}

template <int D, int WM, int WN>
void launch_tile(Params p, bool sparse, dim3 grid, cudaStream_t s) {
  const SmemLayout lay = smem_layout(16 * WM, D, stages_for<D>(), p, sparse);
  p.off_kv = lay.off_kv;
  p.off_w = lay.off_w;
  p.off_int = lay.off_int;
  launch_smem(sparse ? tile_kernel<D, WM, WN, true> : tile_kernel<D, WM, WN, false>, p, lay.bytes, grid,
              32 * WM * WN, s);
}

template <int D>
void launch_dim(const Params& p, const Shape& sh, bool sparse, dim3 grid, cudaStream_t s) {
  if (sh.decode) {
    launch_smem(sparse ? decode_kernel<D, true> : decode_kernel<D, false>, p, attention_decode_smem_bytes(D),
                grid, 32 * attention_decode_warps(D), s);
  } else if (sh.rows <= 16) {
    launch_tile<D, 1, 4>(p, sparse, grid, s);  // one token x <= 16 heads; warps split the keys
  } else if (sh.rows <= 32) {
    launch_tile<D, 2, 2>(p, sparse, grid, s);
  } else if (sh.rows <= 64) {
    launch_tile<D, 4, 1>(p, sparse, grid, s);
  } else if constexpr (D <= 128) {
    launch_tile<D, 8, 1>(p, sparse, grid, s);  // prefill: 8 warps x 16 rows
  }
}

}  // namespace

int paged_attention_splits(const AttentionTiles& tiles, int heads, int kv_heads, int dim, int page_size,
                           bool sparse, int topk, int max_kv_len) {
  const Shape sh = shape_of(tiles, heads, kv_heads, dim);
  const int64_t ctas = int64_t(tiles.count) * kv_heads * sh.chunks;
  const int64_t keys = max_keys(sh, sparse, topk, page_size, max_kv_len);
  return sh.decode ? attention_decode_splits(ctas, keys, dim, current_sm_count())
                   : attention_splits(ctas, keys, current_sm_count());
}

size_t paged_attention_workspace_floats(const AttentionTiles& tiles, int T, int heads, int kv_heads, int dim,
                                        int page_size, bool sparse, int topk, int max_kv_len) {
  return attention_workspace_floats(
      T, heads, dim,
      paged_attention_splits(tiles, heads, kv_heads, dim, page_size, sparse, topk, max_kv_len));
}

void paged_attention(const float* q, const bf16* k_cache, const bf16* v_cache, TokenMeta meta,
                     const int32_t* selection, int topk, const AttentionTiles& tiles, int T, int heads,
                     int kv_heads, int dim, int page_size, int max_kv_len, float scale, float* workspace,
                     bf16* out, cudaStream_t s) {
  if (T <= 0 || tiles.count <= 0) return;
  const int splits = workspace == nullptr ? 1
                                          : paged_attention_splits(tiles, heads, kv_heads, dim, page_size,
                                                                   selection != nullptr, topk, max_kv_len);
  paged_attention_with_splits(q, k_cache, v_cache, meta, selection, topk, tiles, T, heads, kv_heads, dim,
                              page_size, splits, scale, workspace, out, s);
}

void paged_attention_with_splits(const float* q, const bf16* k_cache, const bf16* v_cache, TokenMeta meta,
                                 const int32_t* selection, int topk, const AttentionTiles& tiles, int T,
                                 int heads, int kv_heads, int dim, int page_size, int splits, float scale,
                                 float* workspace, bf16* out, cudaStream_t s) {
  if (T <= 0 || tiles.count <= 0) return;
  const Shape sh = shape_of(tiles, heads, kv_heads, dim);
  if (page_size <= 0) fail(ErrorKind::kInvalidArgument, "paged_attention: page_size must be positive");
  if (!(scale > 0.f) || !std::isfinite(scale))
    fail(ErrorKind::kInvalidArgument, "paged_attention: scale must be positive and finite");
  if (selection != nullptr && topk <= 0)
    fail(ErrorKind::kInvalidArgument, "paged_attention: topk must be positive");
  if (splits < 1 || splits > kMaxLaunchSplits)
    fail(ErrorKind::kInvalidArgument, "paged_attention: split count must be 1.." +
                                          std::to_string(kMaxLaunchSplits) + " (got " +
                                          std::to_string(splits) + ")");
  if (splits > 1 && workspace == nullptr)
    fail(ErrorKind::kInvalidArgument, "paged_attention: split-K needs a workspace");
  const bool sparse = selection != nullptr;

  Params p{};
  p.q = q, p.k = k_cache, p.v = v_cache, p.meta = meta, p.sel = selection, p.topk = sparse ? topk : 0;
  p.tiles = tiles.tiles, p.num_tiles = tiles.count, p.tokens_cap = sh.tokens_cap;
  p.T = T, p.heads = heads, p.kv_heads = kv_heads, p.group = sh.group, p.hc = sh.hc, p.chunks = sh.chunks;
  p.page_size = page_size, p.splits = splits, p.scale_log2 = scale * kLog2e;
  if (splits > 1) {
    const AttentionWorkspace ws = attention_workspace_layout(T, heads, dim, splits);
    p.counters = reinterpret_cast<unsigned long long*>(workspace + ws.counters);
    p.ws_o = workspace + ws.partials;
    p.ws_lse = workspace + ws.lse;
  }
  p.out = out;
  p.token_words = (sh.tokens_cap + 31) / 32;
  if (sparse) {
    p.bitmap_words = (std::max(1, meta.max_blocks) + 31) / 32;
    p.union_cap = int(std::min<int64_t>(int64_t(sh.tokens_cap) * topk, std::max(1, meta.max_blocks)));
  }
  const dim3 grid(tiles.count, kv_heads * sh.chunks, splits);
  switch (dim) {
    case 32:
      launch_dim<32>(p, sh, sparse, grid, s);
      break;
    case 64:
      launch_dim<64>(p, sh, sparse, grid, s);
      break;
    case 128:
      launch_dim<128>(p, sh, sparse, grid, s);
      break;
    default:
      launch_dim<256>(p, sh, sparse, grid, s);
      break;
  }
}

}  // namespace m3::cuda
