// Paged GQA attention on tensor cores, prefill and decode, dense and MSA block-sparse. Two kernels share the
// per-stage math (S = Q.K^T and O += P.V on mma.sync m16n8k16 bf16 with ldmatrix fragments, fp32 online
// softmax in base 2 with the scale folded into one FMA per score) and the split-K epilogue:
//  - tile kernel (prefill, mixed batches): a CTA = (tile, KV head [x head chunk], split); its M rows pack the
//    tile's tokens x the group's query heads (e.g. 8 tokens x 16 heads = 128 rows), so every K/V row loaded
//    into shared memory serves all of them. Keys are walked in a "virtual" order: dense = positions
//    0..max_pos of the tile; sparse = the union of the tile's tokens' selected blocks (deduplicated through a
//    bitmap in shared memory, ascending), each block contributing page_size slots. Warps split M (8 warps x
//    16 rows) or the keys of a stage (merged in shared memory at the end); at 128 rows and head_dim 128 the
//    two warpgroups of 64 rows run each stage's MMAs on wgmma (attention_wgmma.cuh) and a third warpgroup
//    only copies the stages (a warpgroup's wgmma fence would otherwise wait for its own copies in flight).
//    64-key stages go through a 3-stage cp.async ring (2 for head_dim 256) with one barrier per stage.
//    FP8 pages: the ring carries e4m3 rows and their scales, widened to bf16 stages (times each row's scale)
//    for the same MMAs: on wgmma the producer warpgroup widens stage i + 1 into the second of two bf16 stages
//    while the others compute stage i (still one barrier per stage); elsewhere every thread widens the landed
//    stage into one bf16 stage and a second barrier hands it to the MMAs.
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
#include "kernels/attention_common.cuh"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_wgmma.cuh"
#include "kernels/device_info.h"
#include "kernels/fp8_widen.cuh"
#include "kernels/kernels.h"
#include "kernels/mma.cuh"

namespace m3::cuda {
namespace {

template <int D, int WM, int WN, bool kSparse, bool kFp8>
__global__ void __launch_bounds__(32 * tile_warps(D, WM, WN)) tile_kernel(const Params p) {
  constexpr bool kWg = tile_uses_wgmma(D, WM, WN);
  constexpr int kWarps = tile_warps(D, WM, WN), kThreads = 32 * kWarps, kRows = 16 * WM, kStride = D + 8;
  constexpr int kWarpKeys = kKeys / WN, kSTiles = kWarpKeys / 8, kStages = stages_for<D>();
  constexpr int kRowChunks = D / 8;  // 16-byte chunks per K/V row
  constexpr int kRowsPerPass = kThreads / kRowChunks;
  static_assert(kWarpKeys % 16 == 0 && (kWg || (kThreads % kRowChunks == 0 && kKeys % kRowsPerPass == 0)));
  static_assert(kWarps <= kMiscInts - 8, "misc[8..) holds the per-warp scan totals");

  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* kvs = reinterpret_cast<bf16*>(smem + p.off_kv);
  int* tok_pos = reinterpret_cast<int*>(smem + p.off_int);
  int* misc = tok_pos + p.tokens_cap;  // [0] max position, [1] min position, [2] flag, [8 + w] scan totals
  uint32_t* bitmap = reinterpret_cast<uint32_t*>(misc + kMiscInts);
  int* prefix = reinterpret_cast<int*>(bitmap + p.bitmap_words);
  int* list = prefix + p.bitmap_words;
  uint32_t* memb = reinterpret_cast<uint32_t*>(list + p.union_cap);
  int* list_page = reinterpret_cast<int*>(memb + p.union_cap * p.token_words);  // page id of each union block

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
    // The union's page ids, so that the stage copies read no page table.
    const int32_t* seq_table = p.meta.block_table + int64_t(seq) * p.meta.max_blocks;
    for (int u = tid; u < n_union; u += kThreads) list_page[u] = seq_table[list[u]];
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

  // K/V stage loader. mma.sync layout (row stride kStride): each thread copies one 16-byte column chunk of
  // every kRowsPerPass-th key row. wgmma layout (wg_tile_offset): the producer warps copy the whole stage,
  // 16 rows each, each instruction 8 rows x 4 chunks landing as 512 contiguous bytes.
  const int ld_c = kWg ? lane >> 3 : tid % kRowChunks;
  const int ld_r = kWg ? lane & 7 : tid / kRowChunks;
  const int32_t* table = p.meta.block_table + int64_t(seq) * p.meta.max_blocks;
  const int64_t slot_stride = int64_t(p.kv_heads) * D, head_off = int64_t(kvh) * D;
  auto key_offset = [&](int v, bool& ok) {  // element offset of virtual key v's row in the cache
    int blk, slot;
    if constexpr (kSparse) {
      const int u = v / P;
      slot = v - u * P;
      blk = u < n_union ? list[u] : 0;
      ok = v < n_keys && blk * P + slot <= max_pos;
      return ok ? (int64_t(list_page[u]) * P + slot) * slot_stride + head_off : int64_t(0);
    } else {
      blk = v / P;
      slot = v - blk * P;
      ok = v < n_keys && blk * P + slot <= max_pos;
      return ok ? (int64_t(table[blk]) * P + slot) * slot_stride + head_off : int64_t(0);
    }
  };
  constexpr int kWidened = kWg ? 2 : 1;  // FP8: bf16 stages the e4m3 stages are widened into
  auto stage_k = [&](int st) -> bf16* {
    return kvs + ((st - sb) % (kFp8 ? kWidened : kStages)) * (2 * kKeys * kStride);
  };
  // FP8 ring slot of a stage (fp8_stage_bytes): K then V rows of e4m3, padded, then their scales.
  auto stage8 = [&](int st) -> unsigned char* {
    return reinterpret_cast<unsigned char*>(kvs + kWidened * 2 * kKeys * kStride) +
           ((st - sb) % kStages) * Fp8Stage<D>::kBytes;
  };
  // Threads [t0, t0 + n) widen FP8 stage st into its bf16 stage, in the layout the MMAs read.
  // Consecutive threads take consecutive rows of one 16-byte column: conflict-free reads (padded rows) and
  // writes (both bf16 layouts).
  constexpr int kRow8 = Fp8Stage<D>::kRow;
  auto widen_stage = [&](int st, int t0, int n) {
    constexpr int kCh8 = D / 16;
    const unsigned char* s8 = stage8(st);
    const float* scales = reinterpret_cast<const float*>(s8 + 2 * kKeys * kRow8);
    bf16* ks = stage_k(st);
    for (int i = tid - t0; i < 2 * kKeys * kCh8; i += n) {
      const int c = i / (2 * kKeys), r2 = i - c * 2 * kKeys, r = r2 % kKeys;  // r2: K rows, then V rows
      uint4 a, b;
      widen_e4m3x16_scaled(*reinterpret_cast<const uint4*>(s8 + r2 * kRow8 + c * 16), scales[r2], a, b);
      bf16* tile = ks + (r2 / kKeys) * kKeys * kStride;
      const int o0 = kWg ? wg_tile_offset<D>(r, 2 * c) / 2 : r * kStride + c * 16;
      const int o1 = kWg ? wg_tile_offset<D>(r, 2 * c + 1) / 2 : o0 + 8;
      *reinterpret_cast<uint4*>(tile + o0) = a;
      *reinterpret_cast<uint4*>(tile + o1) = b;
    }
  };
  auto load_stage = [&](int stage_idx) {
    if constexpr (kFp8) {  // the loading threads copy 16-byte chunks of e4m3 rows; chunk 0's also the scales
      constexpr int kCh8 = D / 16, kLoaders = kWg ? 32 * kProducerWarps : kThreads;
      static_assert(kLoaders % kCh8 == 0, "a thread keeps one chunk column");
      const int lt = kWg ? tid - 32 * (kWarps - kProducerWarps) : tid, c = lt % kCh8;
      unsigned char* s8 = stage8(stage_idx);
      float* scales = reinterpret_cast<float*>(s8 + 2 * kKeys * kRow8);
      for (int r = lt / kCh8; r < kKeys; r += kLoaders / kCh8) {
        bool ok;
        const int64_t row = key_offset(stage_idx * kKeys + r, ok);
        cp_async_16_zfill(s8 + r * kRow8 + c * 16, p.k8 + (ok ? row + c * 16 : 0), ok);
        cp_async_16_zfill(s8 + (kKeys + r) * kRow8 + c * 16, p.v8 + (ok ? row + c * 16 : 0), ok);
        if (c == 0) {
          cp_async_4_zfill(scales + r, p.k_scale + (ok ? row / D : 0), ok);
          cp_async_4_zfill(scales + kKeys + r, p.v_scale + (ok ? row / D : 0), ok);
        }
      }
      return;
    }
    bf16* ks = stage_k(stage_idx);
    bf16* vs = ks + kKeys * kStride;
    if constexpr (kWg) {
      // A producer warp's 16 rows: both page-table lookups first (in flight together), then the copies.
      constexpr int kProdRows = kKeys / 8 / kProducerWarps;
      const int rg0 = (warp - (kWarps - kProducerWarps)) * kProdRows;
      int64_t off[kProdRows];
      bool ok[kProdRows];
#pragma unroll
      for (int i = 0; i < kProdRows; ++i)
        off[i] = key_offset(stage_idx * kKeys + (rg0 + i) * 8 + ld_r, ok[i]);
#pragma unroll
      for (int i = 0; i < kProdRows; ++i) {
        const int r = (rg0 + i) * 8 + ld_r;
#pragma unroll
        for (int c = ld_c; c < kRowChunks; c += 4) {
          const int dst = wg_tile_offset<D>(r, c) / 2, src = ok[i] ? c * 8 : 0;
          cp_async_16_zfill(ks + dst, p.k + off[i] + src, ok[i]);
          cp_async_16_zfill(vs + dst, p.v + off[i] + src, ok[i]);
        }
      }
    } else {
#pragma unroll
      for (int pass = 0; pass < kKeys / kRowsPerPass; ++pass) {
        const int r = ld_r + pass * kRowsPerPass;
        bool ok;
        int64_t off = key_offset(stage_idx * kKeys + r, ok);
        if (ok) off += ld_c * 8;
        cp_async_16_zfill(ks + r * kStride + ld_c * 8, p.k + off, ok);
        cp_async_16_zfill(vs + r * kStride + ld_c * 8, p.v + off, ok);
      }
    }
  };

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float scale = p.scale_log2;
  const int key0 = wn * kWarpKeys;
  // Which scores of stage `it` need masking: the stage's scalars (block, position, membership) are looked up
  // before its S MMAs finish, the mask is applied after.
  struct StageMask {
    int v0, base_pos;  // virtual key of the warp's first column; its position (dense, or within one block)
    bool need, single, member[2];
  };
  auto stage_mask = [&](int it) {
    StageMask mk;
    mk.v0 = it * kKeys + key0;
    mk.base_pos = mk.v0;
    mk.single = true;
    mk.member[0] = mk.member[1] = true;
    if constexpr (kSparse) {
      const int u0 = mk.v0 / P;
      mk.single = u0 == (mk.v0 + kWarpKeys - 1) / P && u0 < n_union;
      mk.need = true;
      if (mk.single) {
        mk.base_pos = list[u0] * P + (mk.v0 - u0 * P);
        const uint32_t* mw = memb + u0 * p.token_words;
        bool all = true;
        for (int w = 0; w < p.token_words; ++w) {
          const int left = count - 32 * w;
          all &= mw[w] == (left >= 32 ? 0xffffffffu : left > 0 ? (1u << left) - 1 : 0u);
        }
        mk.member[0] = token_bit(mw, row_tok[0]);
        mk.member[1] = token_bit(mw, row_tok[1]);
        mk.need = !all || mk.base_pos + kWarpKeys - 1 > min_pos;
      }
    } else {
      mk.need = mk.v0 + kWarpKeys - 1 > min_pos;
    }
    return mk;
  };
  // Mask, only where some key of the warp's range may be invisible to some row.
  auto apply_mask = [&](float(&s)[kSTiles][4], const StageMask& mk) {
    if (!mk.need) return;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j * 8 + c2 + (e & 1), i = e >> 1;
        bool ok;
        if (!kSparse || mk.single) {
          ok = mk.member[i] && mk.base_pos + col <= row_pos[i];
        } else {
          const int v = mk.v0 + col, u = v / P;
          ok = u < n_union && list[u] * P + (v - u * P) <= row_pos[i] &&
               token_bit(memb + u * p.token_words, row_tok[i]);
        }
        if (!ok) s[j][e] = -INFINITY;
      }
  };

  // With wgmma, the last warpgroup produces: it alone copies the stages, so that no consumer warpgroup's
  // wgmma fence waits for copies still in flight.
  const bool loads = !kWg || warp >= kWarps - kProducerWarps;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (loads && sb + st < se) load_stage(sb + st);
    cp_async_commit();
  }
  constexpr int kProducer0 = 32 * (kWarps - kProducerWarps), kProducerThreads = 32 * kProducerWarps;
  // Producers widen rows that other producers copied: after its own wait, each waits for the others
  // (barrier 1, the producer warpgroup only).
  if constexpr (kFp8 && kWg) {  // the producers widen the first stage before the loop
    if (loads) {
      cp_async_wait<kStages - 2>();
      named_barrier(1, kProducerThreads);
      if (sb < se) widen_stage(sb, kProducer0, kProducerThreads);
      fence_proxy_async_smem();
    }
  }
  for (int it = sb; it < se; ++it) {
    if constexpr (kFp8 && kWg) {
      __syncthreads();  // stage it is widened; the consumers are done with the other bf16 stage
      if (loads) {      // refill the ring, then widen stage it + 1 while the consumers compute stage it
        if (it + kStages - 1 < se) load_stage(it + kStages - 1);
        cp_async_commit();
        cp_async_wait<kStages - 2>();
        named_barrier(1, kProducerThreads);
        if (it + 1 < se) widen_stage(it + 1, kProducer0, kProducerThreads);
        fence_proxy_async_smem();
        continue;
      }
    } else {
      ring_advance<kStages>(it, se, kWg && loads, [&](int st) {
        if (loads) load_stage(st);
      });
      if constexpr (kFp8) {  // every thread widens its share of the landed stage
        widen_stage(it, 0, kThreads);
        __syncthreads();
      }
      if (kWg && loads) continue;
    }
    const bf16* ks = stage_k(it);
    const bf16* vs = ks + kKeys * kStride;
    float s[kSTiles][4];
    StageMask mk;
    if constexpr (kWg) {
      qk_issue_wg<D>(s, qf, ks);
      mk = stage_mask(it);
      wgmma_wait<0>();
      wgmma_pin(s);
    } else {
      qk_scores<D, kSTiles>(s, qf, ks + key0 * kStride, lane);
      mk = stage_mask(it);
    }
    apply_mask(s, mk);
    if constexpr (kWg) {
      softmax_step<D, kSTiles>(s, o, m, l, scale);
      pv_wg<D>(s, o, vs);
    } else {
      softmax_pv<D, kSTiles>(s, o, m, l, scale, vs + key0 * kStride, lane);
    }
  }
  cp_async_wait<0>();

  float* red = reinterpret_cast<float*>(kvs);
  merge_key_warps<D, WM, WN>(o, m, l, red, wm, wn, lane);
  __syncthreads();  // the K/V buffers become the epilogue's staging area
  finish<D, kRows, kThreads>(p, o, m, l, wn == 0, row_out, split, counter, seen, count, t0, kvh, chunk,
                             reinterpret_cast<float*>(smem + p.off_w), red, (p.off_w - p.off_kv) / 4,
                             misc + 2);
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

template <int D, int WM, int WN, bool kFp8>
void launch_tile(Params p, bool sparse, dim3 grid, cudaStream_t s) {
  const SmemLayout lay =
      smem_layout(16 * WM, D, stages_for<D>(), p, sparse, kFp8, tile_uses_wgmma(D, WM, WN) ? 2 : 1);
  p.off_kv = lay.off_kv;
  p.off_w = lay.off_w;
  p.off_int = lay.off_int;
  launch_smem(sparse ? tile_kernel<D, WM, WN, true, kFp8> : tile_kernel<D, WM, WN, false, kFp8>, p, lay.bytes,
              grid, 32 * tile_warps(D, WM, WN), s);
}

template <int D, bool kFp8>
void launch_dim(const Params& p, const Shape& sh, bool sparse, dim3 grid, cudaStream_t s) {
  if (sh.decode) {
    launch_smem(sparse ? decode_kernel<D, true, kFp8> : decode_kernel<D, false, kFp8>, p,
                attention_decode_smem_bytes(D, kFp8), grid, 32 * attention_decode_warps(D), s);
  } else if (sh.rows <= 16) {
    launch_tile<D, 1, 4, kFp8>(p, sparse, grid, s);  // one token x <= 16 heads; warps split the keys
  } else if (sh.rows <= 32) {
    launch_tile<D, 2, 2, kFp8>(p, sparse, grid, s);
  } else if (sh.rows <= 64) {
    launch_tile<D, 4, 1, kFp8>(p, sparse, grid, s);
  } else if constexpr (D <= 128) {
    launch_tile<D, 8, 1, kFp8>(p, sparse, grid, s);  // prefill: 8 warps x 16 rows
  }
}

template <int D>
void launch_pages(const Params& p, const Shape& sh, bool sparse, bool fp8, dim3 grid, cudaStream_t s) {
  if (fp8)
    launch_dim<D, true>(p, sh, sparse, grid, s);
  else
    launch_dim<D, false>(p, sh, sparse, grid, s);
}

}  // namespace

int paged_attention_splits(const AttentionTiles& tiles, int heads, int kv_heads, int dim, int page_size,
                           bool sparse, int topk, int max_kv_len, bool fp8) {
  const Shape sh = shape_of(tiles, heads, kv_heads, dim);
  const int64_t ctas = int64_t(tiles.count) * kv_heads * sh.chunks;
  const int64_t keys = max_keys(sh, sparse, topk, page_size, max_kv_len);
  return sh.decode ? attention_decode_splits(ctas, keys, dim, current_sm_count(), fp8)
                   : attention_splits(ctas, keys, current_sm_count());
}

size_t paged_attention_workspace_floats(const AttentionTiles& tiles, int T, int heads, int kv_heads, int dim,
                                        int page_size, bool sparse, int topk, int max_kv_len, bool fp8) {
  return attention_workspace_floats(
      T, heads, dim,
      paged_attention_splits(tiles, heads, kv_heads, dim, page_size, sparse, topk, max_kv_len, fp8));
}

void paged_attention(const float* q, const KvPages& kv, TokenMeta meta, const int32_t* selection, int topk,
                     const AttentionTiles& tiles, int T, int heads, int kv_heads, int dim, int page_size,
                     int max_kv_len, float scale, float* workspace, bf16* out, cudaStream_t s) {
  if (T <= 0 || tiles.count <= 0) return;
  const int splits = workspace == nullptr
                         ? 1
                         : paged_attention_splits(tiles, heads, kv_heads, dim, page_size,
                                                  selection != nullptr, topk, max_kv_len, kv.fp8());
  paged_attention_with_splits(q, kv, meta, selection, topk, tiles, T, heads, kv_heads, dim, page_size, splits,
                              scale, workspace, out, s);
}

void paged_attention_with_splits(const float* q, const KvPages& kv, TokenMeta meta, const int32_t* selection,
                                 int topk, const AttentionTiles& tiles, int T, int heads, int kv_heads,
                                 int dim, int page_size, int splits, float scale, float* workspace, bf16* out,
                                 cudaStream_t s) {
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

  if (kv.fp8() ? !kv.v8 || !kv.k_scale || !kv.v_scale : !kv.k || !kv.v)
    fail(ErrorKind::kInvalidArgument,
         "paged_attention: K/V pages missing (FP8 pages need values and scales)");

  Params p{};
  p.q = q, p.k = kv.k, p.v = kv.v, p.k8 = kv.k8, p.v8 = kv.v8, p.k_scale = kv.k_scale, p.v_scale = kv.v_scale;
  p.meta = meta, p.sel = selection, p.topk = sparse ? topk : 0;
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
      launch_pages<32>(p, sh, sparse, kv.fp8(), grid, s);
      break;
    case 64:
      launch_pages<64>(p, sh, sparse, kv.fp8(), grid, s);
      break;
    case 128:
      launch_pages<128>(p, sh, sparse, kv.fp8(), grid, s);
      break;
    default:
      launch_pages<256>(p, sh, sparse, kv.fp8(), grid, s);
      break;
  }
}

}  // namespace m3::cuda
