// The sampling kernel: a cluster of C CTAs of 512 threads per row (C = 8, 4, 2 or 1 by row count), in place
// on the row's logits, no sort. A row is cut into 8 fixed slices; a CTA owns 8 / C consecutive ones and the
// CTAs combine their parts through distributed shared memory (an exchange: every CTA writes its part into
// every CTA's inbox, then one cluster barrier).
//  - adjustments: each entry's id gets adjust_logit (the CPU's function), by the CTA owning the id.
//  - greedy: argmax of (sort key, lowest id), per CTA, then over the cluster.
//  - top-k and the top-p threshold: radix refinement over the sort keys. Each pass histograms the keys of the
//    current range into 2048 bins (counts; for top-p also masses in 2^-45 fixed point, so the histogram is
//    exact and deterministic whatever the atomic or merge order): each CTA its part, then CTA r merges bin
//    block r of all the histograms and finds the bins of its block where the boundary can lie, until the bins
//    are single keys. The boundary key is then settled with deterministic double sums (the mass above it plus
//    whole tie groups, all ties of a key sharing one probability; every CTA computes the same), and ties at
//    it go to the lowest ids, found by counting ids in ascending order.
//  - the draw: the kept mass and the first kept id whose running mass exceeds r = u x mass, found
//    hierarchically in ascending id order (slices, then 16 segments of the chosen slice, then a sub-chunk per
//    thread of the chosen segment, then one thread's walk).
// Every double sum runs over the 8 slices in order, each summed in a fixed tree that does not depend on C, so
// the result is deterministic and the same whatever the batch; it differs from the CPU only when a boundary
// lies within rounding of the target. Probabilities come from token_probability, bit-identical to the CPU.
#include <cooperative_groups.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "kernels/device_info.h"
#include "kernels/sampling.h"

namespace m3::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;  // 11 key bits per refinement pass
constexpr int kBinsPerThread = kBins / kThreads;
constexpr int kSlices = 8;                    // of a row; also the largest cluster
constexpr int kUnroll = 16;                   // loads in flight per thread while scanning
constexpr double kFixedScale = 0x1.0p45;      // p <= 1 and vocab <= 2^18 keep a bin's sum below 2^63
constexpr double kMassTolerance = 0x1.0p-36;  // x row mass: bounds the gap between rounded and exact sums
constexpr int kElsewhere = -2;                // first_exceeding: another CTA of the cluster has the id
static_assert(kWarps <= 32 && kBins % kThreads == 0, "the reductions below assume these shapes");
static_assert(kBins / kSlices >= 4 * 32, "a warp's bins lie in one bin block");

// Members of a cut of the order (descending key, ascending id): key > t, or key == t and id <= c.
struct Cut {
  uint32_t t = 0;  // 0 is below every key: the cut of everything
  int32_t c = INT_MAX;
  __device__ bool has(uint32_t key, int id) const { return key > t || (key == t && id <= c); }
};

// One CTA's part of an exchange, as it lands in every CTA's inbox.
struct Slot {
  unsigned long long q[kSlices], n[kSlices];  // histogram mass / count per bin block
  double d[kSlices];                          // per slice of the sender, in order
  unsigned long long aq, an;
  int i0, i1;
  uint32_t key;
  float x;
};

struct Shared {
  unsigned long long mass[kBins];  // this CTA's histogram
  unsigned int count[kBins];
  unsigned long long block_mass[kBins / 2];  // bin block `rank` of the cluster's histogram (C >= 2)
  unsigned int block_count[kBins / 2];
  Slot inbox[2][kSlices];        // consecutive exchanges alternate between the two
  double part[kSlices][kWarps];  // per slice of this CTA and warp
  int part_last[kSlices][kWarps];
  unsigned long long warp_q[kWarps], warp_n[kWarps];
  double warp_d[kWarps];
  uint32_t warp_key[kWarps];
  int warp_id[kWarps];
  // Values one thread computes for the block.
  unsigned long long u0, u1;
  int i0, i1, i2, i3;
  uint32_t k0;
  long long l0, l1;
};

// Where this CTA stands in its row's cluster. Identical in all threads, and its phase in all CTAs.
struct Ctx {
  int C, rank, nv;  // CTAs per row, this CTA's rank, slices per CTA (8 / C)
  int V, slice;     // row length, slice length (a multiple of 32)
  int phase;        // inbox buffer of the next exchange
  __device__ int begin(int k) const { return min(V, (rank * nv + k) * slice); }  // of this CTA's slice k
  __device__ int end(int k) const { return min(V, begin(k) + slice); }
};

// The slot this CTA writes in CTA `dst`'s inbox in the current exchange.
__device__ Slot* slot_in(const Ctx& cx, Shared& sh, int dst) {
  return cg::this_cluster().map_shared_rank(&sh.inbox[cx.phase][cx.rank], dst);
}

// Ends an exchange: after the cluster barrier this CTA's inbox holds every CTA's slot, by rank. Read it
// before the next exchange's barrier: the one after writes the same buffer, and only once this CTA has passed
// the next barrier, so one barrier per exchange is enough.
__device__ const Slot* gather(Ctx& cx, Shared& sh) {
  cg::this_cluster().sync();
  const Slot* in = sh.inbox[cx.phase];
  cx.phase ^= 1;
  return in;
}

// A sum every lane gets bit for bit (each butterfly step adds the same two values in either lane).
template <class T>
__device__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Calls f(i, l[i], true) for i in [s0, s1) as thread t of nt (ids t, t + nt, ... in ascending order) with
// kUnroll loads in flight. Calls are uniform over the threads (f(.., false) pads the last round), so f may
// use warp collectives.
template <class F>
__device__ __forceinline__ void scan_range(const float* l, int s0, int s1, int t, int nt, F&& f) {
  for (int base = s0; base < s1; base += nt * kUnroll) {
    float x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * nt + t;
      x[u] = i < s1 ? l[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) f(base + u * nt + t, x[u], base + u * nt + t < s1);
  }
}

// Warp 0: writes the slices' sums of sh.part (over the warps, in a fixed tree) to every CTA's slot.
__device__ void push_slice_sums(const Ctx& cx, Shared& sh) {
  const int lane = threadIdx.x & 31;
  for (int k = 0; k < cx.nv; ++k) {
    const double s = warp_sum(lane < kWarps ? sh.part[k][lane] : 0.0);
    if (lane < cx.C) slot_in(cx, sh, lane)->d[k] = s;
  }
}

// The row's sum from an inbox of slice sums: the slices in order.
__device__ double slices_total(const Ctx& cx, const Slot* in) {
  double total = 0;
  for (int g = 0; g < kSlices; ++g) total += in[g / cx.nv].d[g % cx.nv];
  return total;
}

// The sum of term(i, l[i]) >= 0 over the row: per thread, then a fixed tree per slice, then the slices in
// order. Every CTA gets the total.
template <class Term>
__device__ double row_sum(const float* l, Ctx& cx, Term term, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int k = 0; k < cx.nv; ++k) {
    double v = 0;
    scan_range(l, cx.begin(k), cx.end(k), threadIdx.x, kThreads, [&](int i, float x, bool ok) {
      if (ok) v += term(i, x);
    });
    v = warp_sum(v);
    if (lane == 0) sh.part[k][warp] = v;
  }
  __syncthreads();
  if (warp == 0) push_slice_sums(cx, sh);
  return slices_total(cx, gather(cx, sh));
}

// Exclusive prefix over threads in a fixed order (deterministic for doubles too).
template <class T>
__device__ T block_exclusive_scan(T v, T* warp_total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  T excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0;
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    T w = lane < kWarps ? warp_total[lane] : T(0);
    for (int o = 1; o < 32; o <<= 1) {
      const T n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    T before = __shfl_up_sync(0xffffffffu, w, 1);
    if (lane == 0) before = 0;
    if (lane < kWarps) warp_total[lane] = before;
  }
  __syncthreads();
  const T offset = warp_total[warp];
  __syncthreads();
  return lane == 0 ? offset : offset + excl;
}

struct Best {
  uint32_t key = 0;
  int id = INT_MAX;
  float x = 0.0f;  // l[id]
};

// The greedy id of the row: largest sort key, lowest id among equals. The kernel's first exchange: it waits
// for the cluster arrival made at the kernel's start (every CTA running) before writing to other CTAs.
__device__ Best row_argmax(const float* l, Ctx& cx, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t bk = 0;
  int bi = INT_MAX;
  scan_range(l, cx.begin(0), cx.end(cx.nv - 1), threadIdx.x, kThreads, [&](int i, float x, bool ok) {
    const uint32_t k = sort_key(x);
    if (ok && k > bk) bk = k, bi = i;
  });
  auto merge = [&](uint32_t ok, int oi) {
    if (ok > bk || (ok == bk && oi < bi)) bk = ok, bi = oi;
  };
  for (int o = 16; o > 0; o >>= 1)
    merge(__shfl_xor_sync(0xffffffffu, bk, o), __shfl_xor_sync(0xffffffffu, bi, o));
  if (lane == 0) sh.warp_key[warp] = bk, sh.warp_id[warp] = bi;
  __syncthreads();
  cg::this_cluster().barrier_wait();
  if (warp == 0) {
    bk = lane < kWarps ? sh.warp_key[lane] : 0u;
    bi = lane < kWarps ? sh.warp_id[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1)
      merge(__shfl_xor_sync(0xffffffffu, bk, o), __shfl_xor_sync(0xffffffffu, bi, o));
    if (lane < cx.C) {
      Slot* s = slot_in(cx, sh, lane);
      s->key = bk, s->i0 = bi, s->x = bi == INT_MAX ? 0.0f : l[bi];
    }
  }
  const Slot* in = gather(cx, sh);
  Best best;
  for (int r = 0; r < cx.C; ++r)
    if (in[r].key > best.key || (in[r].key == best.key && in[r].i0 < best.id))
      best.key = in[r].key, best.id = in[r].i0, best.x = in[r].x;
  return best;
}

// first_exceeding's end in the chosen slice k of this CTA, `run` being the weight of the slices before it:
// its segment (one per warp), then a sub-chunk per thread of that segment, then one thread's walk.
template <class Weight>
__device__ int finish_walk(const float* l, const Ctx& cx, int k, double run, double r, Weight& weight,
                           Shared& sh) {
  const int tid = threadIdx.x;
  const int b0 = cx.begin(k), b1 = cx.end(k), seg = (b1 - b0 + kWarps - 1) / kWarps;
  int chosen = -1, slice_last = -1;
  for (int w = 0; w < kWarps; ++w) {
    if (sh.part_last[k][w] >= 0) slice_last = sh.part_last[k][w];
    if (chosen < 0) {
      if (sh.part[k][w] > 0 && run + sh.part[k][w] > r)
        chosen = w;
      else
        run += sh.part[k][w];
    }
  }
  if (chosen < 0) return slice_last;  // rounding: the slice's last id of positive weight

  const int s0 = b0 + chosen * seg, s1 = min(b1, s0 + seg);
  const int sub = (s1 - s0 + kThreads - 1) / kThreads;
  const int a0 = min(s1, s0 + tid * sub), a1 = min(s1, a0 + sub);
  double v = 0;
  int last = -1;
  for (int i = a0; i < a1; ++i) {
    const double w = weight(i, l[i]);
    if (w > 0) v += w, last = i;
  }
  if (tid == 0) sh.i2 = INT_MAX, sh.i3 = -1;
  const double before = run + block_exclusive_scan(v, sh.warp_d);
  if (v > 0 && before + v > r) atomicMin(&sh.i2, tid);
  atomicMax(&sh.i3, last);
  __syncthreads();
  const int walker = sh.i2;
  if (walker == INT_MAX) {
    const int seg_last = sh.i3;
    __syncthreads();
    return seg_last;
  }
  if (tid == walker) {
    double acc = before;
    int found = last;
    for (int i = a0; i < a1; ++i) {
      const double w = weight(i, l[i]);
      if (w <= 0) continue;
      acc += w;
      if (acc > r) {
        found = i;
        break;
      }
    }
    sh.i0 = found;
  }
  __syncthreads();
  const int found = sh.i0;
  __syncthreads();
  return found;
}

// The first id, in ascending order, at which the running sum of weight(i, l[i]) >= 0 exceeds
// threshold(total), or the last id of positive weight when rounding leaves none; -1 if every weight is 0. The
// running sum is taken over the slices, then segments of the chosen slice (one per warp), then sub-chunks of
// the chosen segment (one per thread), then one thread's walk. Every CTA gets the id when `everywhere`;
// otherwise the CTA of the chosen slice (rank 0 when none is chosen) gets it and the others kElsewhere.
template <class Weight, class Threshold>
__device__ int first_exceeding(const float* l, Ctx& cx, Weight weight, Threshold threshold, bool everywhere,
                               Shared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int k = 0; k < cx.nv; ++k) {
    const int b0 = cx.begin(k), b1 = cx.end(k), seg = (b1 - b0 + kWarps - 1) / kWarps;
    double sum = 0;
    int last = -1;
    scan_range(l, min(b1, b0 + warp * seg), min(b1, b0 + warp * seg + seg), lane, 32,
               [&](int i, float x, bool ok) {
                 const double w = ok ? weight(i, x) : 0.0;
                 if (w > 0) sum += w, last = i;
               });
    sum = warp_sum(sum);
    for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    if (lane == 0) sh.part[k][warp] = sum, sh.part_last[k][warp] = last;
  }
  __syncthreads();
  if (warp == 0) {
    int last = -1;
    for (int k = 0; k < cx.nv; ++k) {
      double s = 0;  // the slice's segments in order
      for (int w = 0; w < kWarps; ++w) {
        s += sh.part[k][w];
        last = max(last, sh.part_last[k][w]);
      }
      if (lane < cx.C) slot_in(cx, sh, lane)->d[k] = s;
    }
    if (lane < cx.C) slot_in(cx, sh, lane)->i1 = last;
  }
  const Slot* in = gather(cx, sh);
  int last = -1;
  for (int s = 0; s < cx.C; ++s) last = max(last, in[s].i1);
  const double r = threshold(slices_total(cx, in));
  double run = 0;
  int chosen = -1;
  for (int g = 0; g < kSlices; ++g) {
    const double d = in[g / cx.nv].d[g % cx.nv];
    if (d > 0 && run + d > r) {
      chosen = g;
      break;
    }
    run += d;
  }
  if (chosen < 0) return everywhere || cx.rank == 0 ? last : kElsewhere;
  const bool mine = chosen / cx.nv == cx.rank;
  int found = mine ? finish_walk(l, cx, chosen % cx.nv, run, r, weight, sh) : kElsewhere;
  if (everywhere) {
    if (mine && tid < cx.C) slot_in(cx, sh, tid)->i0 = found;
    found = gather(cx, sh)[chosen / cx.nv].i0;
  }
  return found;
}

// The cut of the shortest prefix of the order, over ids in `in_set`, whose weight reaches the target: weight
// 1 per id (top-k: the target is `goal`) or its probability (top-p, kMass: the target is goal x the set's
// mass, summed in the first pass). The prefix's last key must lie in [lo, hi] and nothing in the set lies
// above hi.
template <bool kMass, class InSet, class Prob>
__device__ Cut find_cut(const float* l, Ctx& cx, Prob prob, InSet in_set, double goal, uint32_t lo,
                        uint32_t hi, Shared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, C = cx.C;
  const int K = kBins / C, per = max(1, K / kThreads);  // bins per block, a thread's share of its block
  const cg::cluster_group cluster = cg::this_cluster();
  // This CTA's block of the cluster's histogram: bins [rank K, rank K + K).
  const unsigned long long* block_mass = C == 1 ? sh.mass : sh.block_mass;
  const unsigned int* block_count = C == 1 ? sh.count : sh.block_count;
  unsigned long long above_q = 0, above_n = 0;  // fixed-point mass and count of the set above the range
  int lo_b = 0, hi_b = 0;
  double target = goal, tol = 0;  // `tol` bounds how far the deterministic double sums may stray from exact
  for (bool first = true;; first = false) {
    const unsigned long long width = static_cast<unsigned long long>(hi) - lo;
    int shift = 0;
    while ((width >> shift) >= static_cast<unsigned long long>(kBins)) ++shift;
    const int nbins = static_cast<int>(width >> shift) + 1;
    // Other CTAs read this CTA's histogram only between the previous pass's two barriers.
    for (int b = tid; b < kBins; b += kThreads) sh.mass[b] = 0, sh.count[b] = 0;
    __syncthreads();
    for (int k = 0; k < cx.nv; ++k) {
      double v = 0;  // first top-p pass: the set's mass
      scan_range(l, cx.begin(k), cx.end(k), tid, kThreads, [&](int i, float x, bool ok) {
        int bin = -1;
        double p = 0;
        if (ok) {
          const uint32_t key = sort_key(x);
          if (in_set(i, key)) {
            const bool in_range = key >= lo && key <= hi;
            if constexpr (kMass) {
              if (first || in_range) p = prob(x);
              if (first) v += p;
            }
            if (in_range) bin = static_cast<int>((key - lo) >> shift);
          }
        }
        if (__any_sync(0xffffffffu, bin >= 0)) {
          const unsigned peers = __match_any_sync(0xffffffffu, bin);
          if (bin >= 0) {
            if (lane == __ffs(peers) - 1) atomicAdd(&sh.count[bin], static_cast<unsigned>(__popc(peers)));
            if constexpr (kMass) atomicAdd(&sh.mass[bin], static_cast<unsigned long long>(p * kFixedScale));
          }
        }
      });
      if (kMass && first) {
        v = warp_sum(v);
        if (lane == 0) sh.part[k][warp] = v;
      }
    }
    __syncthreads();
    // Exchange 1: this histogram's sums per bin block (a warp's bins lie in one block), the slices' masses.
    unsigned long long tq = 0, tn = 0;
    for (int j = 0; j < kBinsPerThread; ++j)
      tq += sh.mass[kBinsPerThread * tid + j], tn += sh.count[kBinsPerThread * tid + j];
    tq = warp_sum(tq), tn = warp_sum(tn);
    if (lane == 0) sh.warp_q[warp] = tq, sh.warp_n[warp] = tn;
    __syncthreads();
    if (warp == 0) {
      if (lane < C) {
        const int wpb = kWarps / C;
        unsigned long long q = 0, n = 0;
        for (int w = lane * wpb; w < lane * wpb + wpb; ++w) q += sh.warp_q[w], n += sh.warp_n[w];
        for (int dst = 0; dst < C; ++dst) {
          Slot* s = slot_in(cx, sh, dst);
          s->q[lane] = q, s->n[lane] = n;
        }
      }
      if (kMass && first) push_slice_sums(cx, sh);
    }
    const Slot* in = gather(cx, sh);
    unsigned long long up_q = above_q, up_n = above_n;  // the set above this CTA's block
    for (int b = cx.rank + 1; b < C; ++b)
      for (int s = 0; s < C; ++s) up_q += in[s].q[b], up_n += in[s].n[b];
    if (kMass && first) {
      const double mass = slices_total(cx, in);
      target = goal * mass, tol = kMassTolerance * mass;
    }
    if (C > 1)  // merge this CTA's block of every histogram (integers: exact in any order)
      for (int j = tid; j < K; j += kThreads) {
        const int b = cx.rank * K + j;
        unsigned long long q = 0;
        unsigned n = 0;
        for (int s = 0; s < C && b < nbins; ++s)
          q += cluster.map_shared_rank(sh.mass, s)[b], n += cluster.map_shared_rank(sh.count, s)[b];
        sh.block_mass[j] = q, sh.block_count[j] = n;
      }
    if (tid == 0) sh.i0 = INT_MAX, sh.i1 = -1;
    __syncthreads();
    // The block's bins from the top down: thread t owns `per` consecutive reversed positions.
    unsigned long long q[kBinsPerThread], n[kBinsPerThread], q_sum = 0, n_sum = 0;
    int bins[kBinsPerThread];
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int li = K - 1 - (per * tid + j);
      bins[j] = j < per && li >= 0 && cx.rank * K + li < nbins ? cx.rank * K + li : -1;
      q[j] = bins[j] >= 0 ? block_mass[li] : 0;
      n[j] = bins[j] >= 0 ? block_count[li] : 0;
      q_sum += q[j], n_sum += n[j];
    }
    const unsigned long long q_before = up_q + block_exclusive_scan(q_sum, sh.warp_q);
    const unsigned long long n_before = up_n + block_exclusive_scan(n_sum, sh.warp_q);
    unsigned long long qa = q_before, na = n_before;  // the set above bins[j]
    for (int j = 0; j < kBinsPerThread; ++j) {
      if (bins[j] >= 0) {
        // Could the prefix end in this bin or below (the set above it falls short) / here or above?
        double above_low, through_high;
        if constexpr (kMass) {
          above_low = static_cast<double>(qa) / kFixedScale - tol;
          through_high = static_cast<double>(qa + q[j] + na + n[j]) / kFixedScale + tol;
        } else {
          above_low = static_cast<double>(na);
          through_high = static_cast<double>(na + n[j]);
        }
        if (above_low < target) atomicMin(&sh.i0, bins[j]);
        if (through_high >= target) atomicMax(&sh.i1, bins[j]);
      }
      qa += q[j], na += n[j];
    }
    __syncthreads();
    // Exchange 2: each block's candidates. No bin at all: the target is beyond the range (rounding only),
    // take its bottom, bin 0 of rank 0's block.
    const int block_hi = sh.i1 >= 0 ? sh.i1 : (cx.rank == 0 ? 0 : -1);
    qa = q_before, na = n_before;
    for (int j = 0; j < kBinsPerThread; ++j) {
      if (bins[j] >= 0 && bins[j] == block_hi) sh.u0 = qa, sh.u1 = na;
      qa += q[j], na += n[j];
    }
    __syncthreads();
    if (warp == 0 && lane < C) {
      Slot* s = slot_in(cx, sh, lane);
      s->i0 = sh.i0, s->i1 = block_hi, s->aq = sh.u0, s->an = sh.u1;
    }
    in = gather(cx, sh);
    int lo_any = INT_MAX, src = 0;
    hi_b = -1;
    for (int s = 0; s < C; ++s) {
      lo_any = min(lo_any, in[s].i0);
      if (in[s].i1 > hi_b) hi_b = in[s].i1, src = s;
    }
    above_q = in[src].aq, above_n = in[src].an;
    lo_b = min(lo_any, hi_b);
    if (shift == 0) break;  // the bins are single keys lo + b; the blocks keep their exact counts
    const unsigned long long top =
        static_cast<unsigned long long>(lo) + ((static_cast<unsigned long long>(hi_b) + 1) << shift) - 1;
    lo += static_cast<uint32_t>(lo_b) << shift;
    hi = static_cast<uint32_t>(min(top, static_cast<unsigned long long>(hi)));
  }

  // Settle the key: the candidate keys from the top down, each a tie group of one probability; every CTA
  // computes the same from the merged counts, read from the blocks' owners.
  const uint32_t top_key = lo + static_cast<uint32_t>(hi_b);
  double above = static_cast<double>(above_n);
  if constexpr (kMass)
    above = row_sum(
        l, cx,
        [&](int i, float x) {
          const uint32_t key = sort_key(x);
          return key > top_key && in_set(i, key) ? prob(x) : 0.0;
        },
        sh);
  const int nb = hi_b - lo_b + 1;
  if (tid == 0) sh.i0 = INT_MAX, sh.i1 = -1;
  long long cnt[kBinsPerThread];
  double w[kBinsPerThread], g[kBinsPerThread], s = 0;
  for (int j = 0; j < kBinsPerThread; ++j) {
    const int pos = kBinsPerThread * tid + j, b = hi_b - pos;
    cnt[j] = pos >= nb ? 0 : C == 1 ? sh.count[b] : cluster.map_shared_rank(sh.block_count, b / K)[b % K];
    w[j] = cnt[j] == 0 ? 0.0 : kMass ? prob(key_logit(lo + static_cast<uint32_t>(b))) : 1.0;
    s += static_cast<double>(cnt[j]) * w[j];
  }
  double run = above + block_exclusive_scan(s, sh.warp_d);
  for (int j = 0; j < kBinsPerThread; ++j) {
    g[j] = run;  // the set above this key
    const double c = static_cast<double>(cnt[j]) * w[j];
    if (cnt[j] > 0) {
      if (run + c >= target) atomicMin(&sh.i0, kBinsPerThread * tid + j);
      atomicMax(&sh.i1, kBinsPerThread * tid + j);
    }
    run += c;
  }
  __syncthreads();
  // The first key whose group reaches the target; none (rounding): the last key, whole.
  const int hit = sh.i0, at = hit != INT_MAX ? hit : sh.i1;
  if (at < 0 && tid == 0) sh.k0 = lo + static_cast<uint32_t>(lo_b), sh.l0 = 0, sh.l1 = 0;
  for (int j = 0; j < kBinsPerThread; ++j) {
    if (at != kBinsPerThread * tid + j) continue;
    const long long ties = cnt[j];
    long long m = ties;
    if (hit != INT_MAX) {
      // The fewest ties (lowest ids first) that reach the target.
      m = static_cast<long long>(ceil((target - g[j]) / w[j]));
      m = m < 1 ? 1 : (m > ties ? ties : m);
      while (m > 1 && g[j] + static_cast<double>(m - 1) * w[j] >= target) --m;
      while (m < ties && g[j] + static_cast<double>(m) * w[j] < target) ++m;
    }
    sh.k0 = lo + static_cast<uint32_t>(hi_b - at), sh.l0 = m, sh.l1 = ties;
  }
  __syncthreads();
  Cut cut;
  cut.t = sh.k0;
  const long long m = sh.l0, ties = sh.l1;
  __syncthreads();
  if (m < ties) {
    const uint32_t t = cut.t;
    cut.c = first_exceeding(
        l, cx,
        [&](int i, float x) {
          const uint32_t key = sort_key(x);
          return key == t && in_set(i, key) ? 1.0 : 0.0;
        },
        [m](double) { return static_cast<double>(m) - 0.5; }, true, sh);
  }
  return cut;
}

// Lowest key the last id of a top-p prefix can have. The ids from it on hold more than (1 - top_p) of the
// mass S >= 1 and each at most its p, so its p > (1 - top_p) / V; one nat of margin covers rounding.
__device__ uint32_t top_p_floor_key(float max_logit, float temperature, float top_p, int V) {
  const double x = log((1.0 - static_cast<double>(top_p)) / V) - 1.0;
  const double floor_logit = static_cast<double>(max_logit) + static_cast<double>(temperature) * x;
  if (!(floor_logit > -static_cast<double>(FLT_MAX))) return 0;
  return sort_key(__double2float_rd(floor_logit));
}

__global__ void __launch_bounds__(kThreads, 1)
    sample_kernel(float* logits, int V, const SamplingRow* rows, const LogitAdjustment* adjustments,
                  const uint32_t* token_masks, int32_t* out) {
  __shared__ Shared sh;
  __cluster_barrier_arrive_relaxed();  // row_argmax waits for it before touching other CTAs
  Ctx cx;
  cx.C = static_cast<int>(cg::this_cluster().num_blocks());
  cx.rank = static_cast<int>(cg::this_cluster().block_rank());
  cx.nv = kSlices / cx.C;
  cx.V = V;
  cx.slice = ((V + kSlices - 1) / kSlices + 31) & ~31;
  cx.phase = 0;
  const int row_id = blockIdx.x / cx.C;
  const SamplingRow row = rows[row_id];
  float* l = logits + static_cast<int64_t>(row_id) * V;
  const int own0 = cx.begin(0), own1 = cx.end(cx.nv - 1);
  for (int e = row.adj_begin + threadIdx.x; e < row.adj_end; e += kThreads) {
    const LogitAdjustment a = adjustments[e];
    if (a.id >= own0 && a.id < own1) l[a.id] = adjust_logit(l[a.id], a, row.penalties);
  }
  if (token_masks != nullptr && row.mask_row >= 0) {  // after the adjustments: a masked id stays -inf
    __syncthreads();
    const uint32_t* mask = token_masks + static_cast<int64_t>(row.mask_row) * token_mask_words(V);
    for (int i = own0 + threadIdx.x; i < min(own1, V); i += kThreads)
      if (!token_mask_allows(mask, i)) l[i] = -INFINITY;
  }
  __syncthreads();
  const Best best = row_argmax(l, cx, sh);
  const float max_logit = best.x;
  // Top-k 1 keeps only the greedy id (p = 1 passes every later filter): the same answer without the passes.
  if (!(row.temperature > 0.0f) || !isfinite(max_logit) || row.top_k == 1) {
    if (cx.rank == 0 && threadIdx.x == 0) out[row_id] = best.id;
    return;
  }
  const float temperature = row.temperature;
  auto prob = [=](float x) { return token_probability(x, max_logit, temperature); };
  const uint32_t max_key = best.key;

  Cut top_k;
  if (row.top_k > 0 && row.top_k < V)
    top_k = find_cut<false>(
        l, cx, prob, [](int, uint32_t) { return true; }, static_cast<double>(row.top_k), 0u, max_key, sh);
  auto in_top_k = [=](int i, uint32_t key) { return top_k.has(key, i); };
  Cut top_p;
  if (row.top_p < 1.0f) {
    const uint32_t lo = max(top_k.t, top_p_floor_key(max_logit, temperature, row.top_p, V));
    top_p =
        find_cut<true>(l, cx, prob, in_top_k, static_cast<double>(row.top_p), min(lo, max_key), max_key, sh);
  }
  const double min_p = row.min_p;
  const int id = first_exceeding(
      l, cx,
      [&](int i, float x) {
        const uint32_t key = sort_key(x);
        if (!top_k.has(key, i) || !top_p.has(key, i)) return 0.0;
        const double p = prob(x);
        return p >= min_p ? p : 0.0;
      },
      [u = row.u](double total) { return u * total; }, false, sh);
  if (id != kElsewhere && threadIdx.x == 0) out[row_id] = id >= 0 ? id : best.id;
}

}  // namespace

void sample_rows(float* logits, int rows, int vocab, const SamplingRow* params,
                 const LogitAdjustment* adjustments, int32_t* out, cudaStream_t stream,
                 const uint32_t* token_masks) {
  if (rows <= 0) return;
  if (vocab <= 0 || vocab > (1 << 18))
    fail(ErrorKind::kInternal, "sample_rows: vocab " + std::to_string(vocab) + " outside [1, 262144]");
  // CTAs per row: as many as one wave of one CTA per SM allows (a few rows: many SMs per row).
  const int64_t sms = current_sm_count();
  unsigned cluster = kSlices;
  while (cluster > 1 && static_cast<int64_t>(rows) * cluster > sms) cluster /= 2;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(rows) * cluster);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // The passes re-read the CTA's part of the row: all of the SM's L1 / shared split that the kernel's shared
  // memory leaves goes to the L1 cache.
  cudaFuncSetAttribute(sample_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                       cudaSharedmemCarveoutMaxL1);
  cudaLaunchKernelEx(&cfg, sample_kernel, logits, vocab, params, adjustments, token_masks, out);
}

}  // namespace m3::cuda
