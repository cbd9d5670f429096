// MSA index branch: block scores S[t, g, b] = max over the visible tokens j of block b of <index_q[t, g],
// index_k[j]> (bf16 operands, fp32 accumulation on tensor cores) and the per-(token, group) top-k selection.
// Prefill scores rows of (token, head) pairs of consecutive tokens against index keys staged in shared
// memory; decode streams each token's index-K pages from HBM straight into MMA fragments, split over the KV
// axis; selection keeps a register top-k per thread, then merges per warp and per CTA. Launch shapes depend
// on host arguments only (CUDA-graph safe): CTAs read positions on the device and exit when they have no
// work.
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "common/error.h"
#include "kernels/device_info.h"
#include "kernels/kernels.h"
#include "kernels/mma.cuh"
#include "kernels/paged.cuh"

namespace m3::cuda {
namespace {

// Fragment convention of both score kernels (m16n8k16, see mma.cuh). MMA k-steps 2c and 2c + 1 cover dims
// [32c, 32c + 32): the thread with tig = lane % 4 feeds them the 8 consecutive dims 32c + 8 tig .. + 7 of
// its query / key rows, taken from one 16-byte load. Elements {0,1} fill the low k pair (k = 2 tig, +1) and
// {2,3} the high k pair (k = 2 tig + 8, +9) of step 2c; {4,5} and {6,7} those of step 2c + 1. Both operands
// use the same permutation of k, so every dot product is unchanged and no shared-memory shuffle is needed.

constexpr int kPrefillWarps = 8;
constexpr int kPrefillRows = kPrefillWarps * 32;  // (token, head) rows per prefill CTA: 2 m16 tiles per warp

// Eight fp32 values (16-byte aligned) as the bf16x2 words {e0e1, e2e3, e4e5, e6e7}.
__device__ __forceinline__ void load_q8(const float* p, uint32_t (&w)[4]) {
  const float4 lo = __ldg(reinterpret_cast<const float4*>(p));
  const float4 hi = __ldg(reinterpret_cast<const float4*>(p) + 1);
  w[0] = pack_bf16x2(lo.x, lo.y);
  w[1] = pack_bf16x2(lo.z, lo.w);
  w[2] = pack_bf16x2(hi.x, hi.y);
  w[3] = pack_bf16x2(hi.z, hi.w);
}

// Decode: grid (T, splits); CTA (t, split) scores blocks [split * bps, ...) of token t. A producer warp
// streams the blocks' index keys into a ring of kStages shared-memory stages with bulk async copies (one per
// page segment, mbarrier-tracked), so up to kStages x 32 KiB per CTA are in flight whatever the registers;
// kConsumers warps score each stage's 16-key tiles on tensor cores (keys as M, heads as N: one pass serves
// every head, heads <= 8). Block b takes rows_per_block = round_up(P, 16) consecutive stage rows (rows past
// the page or the token's position are masked), so no tile straddles two blocks. A warp keeps a running max
// per block over its tiles and folds it into the CTA's per-(head, block) maxima in shared memory
// (order-preserving integer atomics); the CTA writes its scores once at the end. Only the token metadata is
// read before griddep_wait().
template <int kDim>
struct DecodeShape {
  static constexpr int kRowBytes = kDim * 2;
  static constexpr int kStageBytes = 32768;
  static constexpr int kStageRows = kStageBytes / kRowBytes;  // 128 / 256 / 512 keys
  static constexpr int kStages = 3;  // 96 KiB: two CTAs per SM, up to 192 KiB in flight per SM
  static constexpr int kConsumers = 4;
  static constexpr int kThreads = (kConsumers + 1) * 32;
  static constexpr int kMaxScoreBytes = 16384;  // the per-CTA score staging (bps x heads x 4 bytes)
  // A stage meets at most 32 blocks (one per producer lane): 16-row blocks align with the stage, larger ones
  // meet at most kStageRows / 32 + 2 <= 18.
  static_assert(kStageRows / 16 <= 32, "one bulk copy per producer lane");
};

// Order-preserving float <-> uint32 (for unsigned atomicMax on non-NaN floats).
__device__ __forceinline__ uint32_t ordered(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float unordered(uint32_t u) {
  return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

template <int kDim>
__global__ void __launch_bounds__(DecodeShape<kDim>::kThreads, 2)
    decode_scores_kernel(const float* iq, const bf16* cache, TokenMeta m, int heads, int page_size,
                         int stride, int blocks_per_split, float* out) {
  using S = DecodeShape<kDim>;
  constexpr int kChunks = kDim / 32;
  extern __shared__ __align__(128) unsigned char ring[];  // [kStages][kStageBytes], then the scores
  __shared__ uint64_t full[S::kStages], empty[S::kStages];
  griddep_launch_dependents();  // the selection may start launching: it waits for our completion itself

  const int t = blockIdx.x;
  const int pos = m.pos[t], seq = m.seq[t], last = pos / page_size;
  const int b_begin = blockIdx.y * blocks_per_split;
  const int b_end = min(min(b_begin + blocks_per_split, last + 1), stride);
  if (b_begin >= b_end) {
    griddep_wait();  // completion of this grid then implies completion of the previous one
    return;
  }
  const int nb = b_end - b_begin;
  const int rpb = (page_size + 15) & ~15;                                       // stage rows per block
  const int tail = b_end - 1 == last ? pos - last * page_size + 1 : page_size;  // keys of the final block
  const int rows = (nb - 1) * rpb + ((tail + 15) & ~15);
  const int nstages = (rows + S::kStageRows - 1) / S::kStageRows;
  uint32_t* best = reinterpret_cast<uint32_t*>(ring + S::kStages * S::kStageBytes);  // [heads][nb], ordered
  for (int i = threadIdx.x; i < nb * heads; i += blockDim.x) best[i] = ordered(-INFINITY);
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], S::kConsumers);
    }
    mbar_fence_init();
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  if (warp == S::kConsumers) {
    // Producer. Lane l copies the part of block (first block of stage st) + l that lies in stage st; its page
    // id is loaded one stage ahead.
    auto segment = [&](int st, int& bi, int& s0, int& s1) {
      const int lo = st * S::kStageRows, hi = min(rows, lo + S::kStageRows);
      bi = lo / rpb + lane;
      s0 = max(lo - bi * rpb, 0);
      s1 = min(min(hi - bi * rpb, rpb), page_size);
      return bi < nb && s1 > s0;
    };
    auto page_id = [&](int st) {
      int bi, s0, s1;
      return segment(st, bi, s0, s1) ? m.block_table[int64_t{seq} * m.max_blocks + b_begin + bi] : 0;
    };
    int next_page = page_id(0);
    griddep_wait();  // the keys (the newest one comes from the previous kernel)
    for (int st = 0; st < nstages; ++st) {
      const int slot = st % S::kStages;
      const int page = next_page;
      if (st + 1 < nstages) next_page = page_id(st + 1);
      if (st >= S::kStages) mbar_wait(&empty[slot], (st / S::kStages - 1) & 1);
      int bi, s0, s1;
      const bool copy = segment(st, bi, s0, s1);
      const uint32_t bytes = copy ? uint32_t(s1 - s0) * S::kRowBytes : 0;
      const uint32_t total = __reduce_add_sync(0xffffffff, bytes);
      if (lane == 0) mbar_arrive_expect_tx(&full[slot], total);
      __syncwarp();
      if (copy)
        bulk_copy_g2s(ring + slot * S::kStageBytes + (bi * rpb + s0 - st * S::kStageRows) * S::kRowBytes,
                      cache + (int64_t{page} * page_size + s0) * kDim, bytes, &full[slot]);
    }
  } else {
    const int g = lane >> 2, tig = lane & 3;
    griddep_wait();           // the queries may come from the previous kernel
    uint32_t qf[kChunks][4];  // B fragments of head g (zero columns past the heads)
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (g < heads) {
        load_q8(iq + (static_cast<int64_t>(t) * heads + g) * kDim + c * 32 + tig * 8, qf[c]);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) qf[c][i] = 0;
      }
    }
    for (int st = 0; st < nstages; ++st) {
      const int slot = st % S::kStages, lo = st * S::kStageRows;
      const int ntiles = (min(rows, lo + S::kStageRows) - lo + 15) / 16;
      const int per = (ntiles + S::kConsumers - 1) / S::kConsumers;  // contiguous tiles per warp
      const int t_end = min(ntiles, (warp + 1) * per);
      mbar_wait(&full[slot], (st / S::kStages) & 1);
      const unsigned char* buf = ring + slot * S::kStageBytes + tig * 16;
      float best0 = -INFINITY, best1 = -INFINITY;  // heads 2 tig, 2 tig + 1 of block cur
      int cur = -1;
      auto flush = [&]() {  // folds the warp's maxima of block cur into the CTA's
        for (int o = 4; o < 32; o <<= 1) {
          best0 = fmaxf(best0, __shfl_xor_sync(0xffffffff, best0, o));
          best1 = fmaxf(best1, __shfl_xor_sync(0xffffffff, best1, o));
        }
        if (g == 0 && 2 * tig < heads) atomicMax(&best[2 * tig * nb + cur], ordered(best0));
        if (g == 0 && 2 * tig + 1 < heads) atomicMax(&best[(2 * tig + 1) * nb + cur], ordered(best1));
        best0 = best1 = -INFINITY;
      };
      for (int tile = warp * per; tile < t_end; ++tile) {
        const int r = lo + tile * 16, bi = r / rpb, s = r - bi * rpb + g;
        if (bi != cur) {
          if (cur >= 0) flush();
          cur = bi;
        }
        uint4 k[2][kChunks];  // rows g, g + 8 of the tile
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int c = 0; c < kChunks; ++c)
            k[h][c] = *reinterpret_cast<const uint4*>(buf + (tile * 16 + h * 8 + g) * S::kRowBytes + c * 64);
        float acc[4] = {0, 0, 0, 0}, acc1[4] = {0, 0, 0, 0};  // two MMA chains, summed
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const uint32_t a0[4] = {k[0][c].x, k[1][c].x, k[0][c].y, k[1][c].y};
          const uint32_t b0[2] = {qf[c][0], qf[c][1]};
          mma_bf16_16816(acc, a0, b0);
          const uint32_t a1[4] = {k[0][c].z, k[1][c].z, k[0][c].w, k[1][c].w};
          const uint32_t b1[2] = {qf[c][2], qf[c][3]};
          mma_bf16_16816(acc1, a1, b1);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] += acc1[i];
        // Keys the token sees: slots < page_size, and <= pos in its own block. Others (unwritten slots,
        // padding rows, stale stage data) may hold anything, NaN included: select, never combine.
        const int valid = b_begin + bi == last ? tail : page_size;
        if (s < valid) {
          best0 = fmaxf(best0, acc[0]);
          best1 = fmaxf(best1, acc[1]);
        }
        if (s + 8 < valid) {
          best0 = fmaxf(best0, acc[2]);
          best1 = fmaxf(best1, acc[3]);
        }
      }
      if (cur >= 0) flush();
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
    }
  }
  __syncthreads();
  float* row = out + static_cast<int64_t>(t) * heads * stride + b_begin;
  for (int i = threadIdx.x; i < nb * heads; i += blockDim.x)
    row[static_cast<int64_t>(i / nb) * stride + i % nb] = unordered(best[i]);
}

// Prefill: grid (row tiles, splits). A CTA holds 256 consecutive (token, head) rows (row = t x heads + g) as
// A fragments in registers, 32 per warp. Its tokens are cut into runs of one sequence; for each run the CTA
// walks the keys of blocks [split * bps, ...) up to the run's last position in n8 tiles (ceil(P / 8) per
// block, so no tile straddles two blocks), staged through shared memory by cp.async in a 3-stage pipeline.
// The causal mask is applied only to tiles past the warp's smallest position (or past the page end when P % 8
// != 0).
template <int kDim>
struct PrefillShape {
  static constexpr int kChunks = kDim / 32;
  static constexpr int kPieces = kDim / 8;                                       // 16-byte pieces per key
  static constexpr int kRowBytes = kDim * 2 + ((kDim * 2) % 128 == 0 ? 64 : 0);  // conflict-free 16-B reads
  static constexpr int kStages = 3;
  static constexpr int kStageKeys = 64;                                       // 8 n8 tiles
  static constexpr int kLoads = kStageKeys * kPieces / (kPrefillWarps * 32);  // cp.async per thread and stage
  static constexpr int kSmemBytes = kStages * kStageKeys * kRowBytes;
  static_assert(kLoads >= 1 && kStageKeys * kPieces % (kPrefillWarps * 32) == 0, "stage split");
};

template <int kDim>
__global__ void __launch_bounds__(kPrefillWarps * 32, 2)
    prefill_scores_kernel(const float* iq, const bf16* cache, TokenMeta m, int T, int heads, int page_size,
                          int stride, int blocks_per_split, float* out) {
  using S = PrefillShape<kDim>;
  extern __shared__ __align__(16) unsigned char stage[];  // [kStages][kStageKeys][kRowBytes]
  __shared__ int s_seq[kPrefillRows], s_pos[kPrefillRows];

  const int64_t rows = static_cast<int64_t>(T) * heads;
  const int64_t row0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kPrefillRows;  // longest rows first
  const int t_lo = static_cast<int>(row0 / heads);
  const int ntok = static_cast<int>((min(rows, row0 + kPrefillRows) - 1) / heads) - t_lo + 1;
  for (int i = threadIdx.x; i < ntok; i += blockDim.x) {
    s_seq[i] = m.seq[t_lo + i];
    s_pos[i] = m.pos[t_lo + i];
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;

  // A fragments: rows row_of(mt, h) = row0 + 32 warp + 16 mt + 8 h + g; qa[mt][c][h] = that row's dims 32c +
  // 8 tig...
  const int64_t rbase = row0 + warp * 32 + g;
  auto row_of = [&](int mt, int h) { return rbase + mt * 16 + h * 8; };
  uint32_t qa[2][S::kChunks][2][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < S::kChunks; ++c) {
        if (row_of(mt, h) < rows) {
          load_q8(iq + row_of(mt, h) * kDim + c * 32 + tig * 8, qa[mt][c][h]);
        } else {
#pragma unroll
          for (int i = 0; i < 4; ++i) qa[mt][c][h][i] = 0;
        }
      }
    }
  __syncthreads();

  const int tpb = (page_size + 7) / 8;  // n8 tiles per block
  for (int run_lo = 0; run_lo < ntok;) {
    const int seq = s_seq[run_lo];
    int run_hi = run_lo, pmax = s_pos[run_lo];
    while (run_hi + 1 < ntok && s_seq[run_hi + 1] == seq) {
      ++run_hi;
      pmax = max(pmax, s_pos[run_hi]);
    }
    const int b_begin = blockIdx.y * blocks_per_split;
    const int b_end = min(min(b_begin + blocks_per_split, pmax / page_size + 1), stride);
    if (b_begin < b_end) {
      // This warp's rows in the run (position -1: not in the run, never written) and their position range.
      int rpos[2][2], wmin = INT_MAX, wmax = -1;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int tl = static_cast<int>(row_of(mt, h) / heads) - t_lo;
          rpos[mt][h] = row_of(mt, h) < rows && tl >= run_lo && tl <= run_hi ? s_pos[tl] : -1;
          if (rpos[mt][h] >= 0) {
            wmin = min(wmin, rpos[mt][h]);
            wmax = max(wmax, rpos[mt][h]);
          }
        }
      wmin = __reduce_min_sync(0xffffffff, wmin);
      wmax = __reduce_max_sync(0xffffffff, wmax);

      const int last_key = min(pmax, b_end * page_size - 1);
      const int ntiles = (b_end - 1 - b_begin) * tpb + (last_key - (b_end - 1) * page_size) / 8 + 1;
      const int nstages = (ntiles + 7) / 8;
      auto issue_stage =
          [&](int st) {  // keys of tiles 8 st .. 8 st + 7 -> buffer st % kStages (zeros past the end)
            unsigned char* buf = stage + (st % S::kStages) * S::kStageKeys * S::kRowBytes;
#pragma unroll
            for (int i = 0; i < S::kLoads; ++i) {
              const int idx = threadIdx.x + i * kPrefillWarps * 32, key = idx / S::kPieces,
                        piece = idx % S::kPieces;
              const int tile = st * 8 + key / 8;
              const int b = b_begin + tile / tpb, slot = (tile % tpb) * 8 + key % 8;
              const bool valid = tile < ntiles && slot < page_size && b * page_size + slot <= pmax;
              const bf16* src = cache;
              if (valid)
                src += (int64_t{page_of(m, seq, b * page_size, page_size)} * page_size + slot) * kDim +
                       piece * 8;
              cp_async_16_zfill(buf + key * S::kRowBytes + piece * 16, src, valid);
            }
          };

      float best[2][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) best[mt][0] = best[mt][1] = -INFINITY;
      int wb = b_begin, ws = 0;  // block and first slot of this warp's next n8 tile
      bool wdone = wmax < 0;
#pragma unroll
      for (int st = 0; st < S::kStages - 1; ++st) {
        if (st < nstages) issue_stage(st);
        cp_async_commit();
      }
      for (int st = 0; st < nstages; ++st) {
        cp_async_wait<S::kStages - 2>();  // this thread's part of stage st has landed
        __syncthreads();                  // everyone's has, and nobody still reads the buffer refilled next
        if (st + S::kStages - 1 < nstages) issue_stage(st + S::kStages - 1);
        cp_async_commit();
        const unsigned char* buf = stage + (st % S::kStages) * S::kStageKeys * S::kRowBytes;
        for (int u = 0; u < 8 && !wdone; ++u) {
          const int j0 = wb * page_size + ws;
          if (st * 8 + u >= ntiles || j0 > wmax) {
            wdone = true;
            break;
          }
          const unsigned char* kt = buf + (u * 8 + g) * S::kRowBytes + tig * 16;
          float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
          for (int c = 0; c < S::kChunks; ++c) {
            const uint4 kv = *reinterpret_cast<const uint4*>(kt + c * 64);
            const uint32_t b0[2] = {kv.x, kv.y}, b1[2] = {kv.z, kv.w};
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              const uint32_t a0[4] = {qa[mt][c][0][0], qa[mt][c][1][0], qa[mt][c][0][1], qa[mt][c][1][1]};
              mma_bf16_16816(acc[mt], a0, b0);
              const uint32_t a1[4] = {qa[mt][c][0][2], qa[mt][c][1][2], qa[mt][c][0][3], qa[mt][c][1][3]};
              mma_bf16_16816(acc[mt], a1, b1);
            }
          }
          // C: acc[mt][0..1] = row g, keys j0 + 2 tig + {0, 1}; acc[mt][2..3] = row g + 8, same keys.
          if (j0 + 7 > wmin || ws + 8 > page_size) {
            const int s = ws + 2 * tig, j = j0 + 2 * tig;
            const bool k0 = s < page_size, k1 = s + 1 < page_size;
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                if (!(k0 && j <= rpos[mt][h])) acc[mt][2 * h] = -INFINITY;
                if (!(k1 && j + 1 <= rpos[mt][h])) acc[mt][2 * h + 1] = -INFINITY;
              }
          }
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              best[mt][h] = fmaxf(best[mt][h], fmaxf(acc[mt][2 * h], acc[mt][2 * h + 1]));
          if (ws + 8 >= page_size || st * 8 + u + 1 >= ntiles ||
              j0 + 8 > wmax) {  // block b done for this warp
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                float v = best[mt][h];
                v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, 1));
                v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, 2));
                if (tig == 0 && wb * page_size <= rpos[mt][h]) out[row_of(mt, h) * stride + wb] = v;
                best[mt][h] = -INFINITY;
              }
          }
          ws += 8;
          if (ws >= page_size) {
            ws = 0;
            ++wb;
          }
        }
      }
      cp_async_wait<0>();
      __syncthreads();  // the next run refills the buffers
    }
    run_lo = run_hi + 1;
  }
}

// Selection rank of block b: the score (NaN as -inf, -0 as +0) in the high word, order-preserving, and the
// complement of b in the low word, so a larger key is a better block and equal scores prefer the lower id.
// Real keys are never 0, the empty-slot sentinel.
__device__ __forceinline__ unsigned long long rank_key(float s, int b) {
  const uint32_t u = ordered(isnan(s) ? -INFINITY : s == 0.0f ? 0.0f : s);
  return static_cast<unsigned long long>(u) << 32 | (0xffffffffu - static_cast<uint32_t>(b));
}

__device__ __forceinline__ int key_block(unsigned long long key) {
  return static_cast<int>(0xffffffffu - static_cast<uint32_t>(key));
}

// One CTA per (token, group) row; only the position is read before griddep_wait(). The forced blocks go
// straight to their output slots (init blocks first, local blocks last: the output is ascending). The budget
// between them is the best of the other visible blocks, found without sorting: tau, a lower bound of the
// budget-th best key, is the best over the warps of the budget-th best of their lanes' maxima (no bound where
// budget > 32); the keys >= tau (on real rows the budget best and a few more) gather in shared memory, and
// each one's rank is the count of better ones there. Should more than `cap` pass, the budget-th best of the
// gathered ones (still a lower bound, and above cap - budget of them) becomes tau and the gathering repeats.
__global__ void __launch_bounds__(1024)
    select_kernel(const float* scores, TokenMeta m, int heads, int stride, int page_size, int topk,
                  int local_blocks, int init_blocks, int cap, int32_t* sel) {
  extern __shared__ unsigned long long cand[];  // [cap]
  __shared__ unsigned long long top[64], s_tau;
  __shared__ int s_count;
  const int row = blockIdx.x, L = m.pos[row / heads] / page_size, n = L + 1;
  int32_t* out = sel + static_cast<int64_t>(row) * topk;
  const int nt = blockDim.x, tid = threadIdx.x;
  griddep_wait();  // the scores come from the previous kernel, which may also still read `sel`
  if (n <= topk) {
    for (int i = tid; i < topk; i += nt) out[i] = i < n ? i : -1;
    return;
  }
  const int local_first = L - local_blocks + 1;  // > init_blocks because n > topk >= init + local
  const int budget = topk - init_blocks - local_blocks;
  for (int i = tid; i < init_blocks; i += nt) out[i] = i;
  for (int i = tid; i < local_blocks; i += nt) out[init_blocks + budget + i] = local_first + i;
  if (budget == 0) return;
  if (tid == 0) {
    s_tau = 0;
    s_count = 0;
  }
  const float* sr = scores + static_cast<int64_t>(row) * stride;
  unsigned long long mine = 0;  // this thread's best key (0: none)
  for (int b0 = init_blocks + tid; b0 < local_first; b0 += 8 * nt) {
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = b0 + i * nt < local_first ? sr[b0 + i * nt] : 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (b0 + i * nt < local_first) mine = max(mine, rank_key(v[i], b0 + i * nt));
  }
  __syncthreads();
  if (budget <= 32) {  // keys are distinct: at most one lane ranks budget - 1
    int better = 0;
    for (int j = 0; j < 32; ++j) better += __shfl_sync(0xffffffff, mine, j) > mine;
    if (better == budget - 1 && mine != 0) atomicMax(&s_tau, mine);
  }
  __syncthreads();
  unsigned long long tau = s_tau;
  int count;
  for (;;) {
    for (int b0 = init_blocks + tid; b0 < local_first; b0 += 4 * nt) {
      float v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = b0 + i * nt < local_first ? sr[b0 + i * nt] : 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const unsigned long long key = rank_key(v[i], b0 + i * nt);
        if (b0 + i * nt < local_first && key >= tau) {
          const int slot = atomicAdd(&s_count, 1);
          if (slot < cap) cand[slot] = key;
        }
      }
    }
    __syncthreads();
    count = s_count;
    if (count <= cap) break;
    for (int i = tid; i < cap; i += nt) {
      int better = 0;
      for (int j = 0; j < cap; ++j) better += cand[j] > cand[i];
      if (better == budget - 1) s_tau = cand[i];
    }
    __syncthreads();  // every thread has read s_count and the new s_tau is set
    tau = s_tau;
    if (tid == 0) s_count = 0;
    __syncthreads();
  }
  for (int i = tid; i < count; i += nt) {
    int better = 0;
    for (int j = 0; j < count; ++j) better += cand[j] > cand[i];
    if (better < budget) top[better] = cand[i];
  }
  __syncthreads();
  for (int i = tid; i < budget; i += nt) {
    const int id = key_block(top[i]);
    int rank = 0;
    for (int j = 0; j < budget; ++j) rank += key_block(top[j]) < id;
    out[init_blocks + rank] = id;
  }
}

int ceil_div(int64_t a, int64_t b) {
  return static_cast<int>((a + b - 1) / b);
}

// Launches `kernel` with programmatic stream serialization (griddep_wait, mma.cuh), or plainly where the
// attribute is refused.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...) == cudaSuccess) return;
  (void)cudaGetLastError();  // the refused attribute, not a sticky error (a plain launch would hit that too)
  kernel<<<grid, block, smem, s>>>(static_cast<Params>(args)...);
}

template <int kDim>
void launch_scores(const float* iq, const bf16* cache, TokenMeta m, int T, int heads, int page_size,
                   int stride, bool decode, float* out, cudaStream_t s) {
  const int sms = current_sm_count();
  if (decode) {
    // One wave of 2 CTAs per SM over the batch; a CTA takes a whole number of blocks, at most what its score
    // staging holds.
    using S = DecodeShape<kDim>;
    const int max_bps = S::kMaxScoreBytes / (4 * heads);
    int splits = std::max(1, std::min(stride, 2 * sms / T));
    splits = std::max(splits, ceil_div(stride, max_bps));
    const int bps = ceil_div(stride, splits);
    const int smem = S::kStages * S::kStageBytes + ((bps * heads * 4 + 15) & ~15);
    cudaFuncSetAttribute(decode_scores_kernel<kDim>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    launch_pdl(decode_scores_kernel<kDim>, dim3(T, ceil_div(stride, bps)), dim3(S::kThreads), smem, s, iq,
               cache, m, heads, page_size, stride, bps, out);
    return;
  }
  // Splitting the keys costs only a reload of the queries (from L2). Causal rows give the row tiles very
  // different key counts, so cut the keys into units of >= 512 keys, aiming at ~8 waves of 2 CTAs per SM:
  // units are equal but for the diagonal ones, and the tail wave is a small part of the time.
  const int tiles = ceil_div(static_cast<int64_t>(T) * heads, kPrefillRows);
  const int max_splits = std::max(1, stride / ceil_div(512, page_size));
  const int splits = std::max(1, std::min(max_splits, ceil_div(16 * sms, tiles)));
  const int bps = ceil_div(stride, splits);
  constexpr int smem = PrefillShape<kDim>::kSmemBytes;
  cudaFuncSetAttribute(prefill_scores_kernel<kDim>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  prefill_scores_kernel<kDim><<<dim3(tiles, ceil_div(stride, bps)), kPrefillWarps * 32, smem, s>>>(
      iq, cache, m, T, heads, page_size, stride, bps, out);
}

}  // namespace

void msa_block_scores(const float* iq, const bf16* cache, TokenMeta m, int T, int heads, int dim,
                      int page_size, int stride, float* out, cudaStream_t s, int max_tokens_per_seq) {
  if (T <= 0) return;
  if (heads < 1 || page_size < 1 || stride < 1)
    fail(ErrorKind::kInvalidArgument, "msa_block_scores: heads " + std::to_string(heads) + ", page size " +
                                          std::to_string(page_size) + ", stride " + std::to_string(stride));
  const bool decode = max_tokens_per_seq == 1 && heads <= 8;
  switch (dim) {
    case 32:
      return launch_scores<32>(iq, cache, m, T, heads, page_size, stride, decode, out, s);
    case 64:
      return launch_scores<64>(iq, cache, m, T, heads, page_size, stride, decode, out, s);
    case 128:
      return launch_scores<128>(iq, cache, m, T, heads, page_size, stride, decode, out, s);
    default:
      fail(ErrorKind::kUnsupported,
           "msa_block_scores: index head dim " + std::to_string(dim) + " (supported: 32, 64, 128)");
  }
}

void msa_select(const float* scores, TokenMeta m, int T, int heads, int stride, int page_size, int topk,
                int local_blocks, int init_blocks, int32_t* sel, cudaStream_t s) {
  if (topk < 1 || topk > 64 || local_blocks < 1 || init_blocks < 0 || init_blocks + local_blocks > topk)
    fail(ErrorKind::kInvalidArgument,
         "msa_select: topk " + std::to_string(topk) + ", local " + std::to_string(local_blocks) + ", init " +
             std::to_string(init_blocks) + " (need 1 <= local, 0 <= init, init + local <= topk <= 64)");
  if (T <= 0) return;
  // Threads per row: ~8 blocks each where the rows fit one wave (decode: latency), ~32 otherwise (prefill:
  // throughput), a power of two in [32, 1024] ([32, 256] for many rows).
  const int rows = T * heads;
  const bool few = rows <= current_sm_count();
  int threads = 32;
  while (threads < (few ? 1024 : 256) && threads * (few ? 8 : 32) < stride) threads *= 2;
  const int cap = std::max(256, 2 * threads);  // candidate slots (> the largest budget, 63)
  launch_pdl(select_kernel, dim3(rows), dim3(threads), cap * sizeof(unsigned long long), s, scores, m, heads,
             stride, page_size, topk, local_blocks, init_blocks, cap, sel);
}

}  // namespace m3::cuda
