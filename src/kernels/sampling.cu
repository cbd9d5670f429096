// The sampling kernel: one CTA of 512 threads per row, in place on the row's logits, no sort.
//  - adjustments: each entry's id gets adjust_logit (the CPU's function).
//  - greedy: block argmax of (sort key, lowest id).
//  - top-k and the top-p threshold: radix refinement over the sort keys. Each pass histograms the keys of the
//    current range into 2048 bins (counts; for top-p also masses in 2^-45 fixed point, so the histogram is
//    exact and deterministic whatever the atomic order) and keeps the bins where the boundary can lie, until
//    the bins are single keys. The boundary key is then settled with deterministic double sums (the mass
//    above it plus whole tie groups, all ties of a key sharing one probability), and ties at it go to the
//    lowest ids, found by counting ids in ascending order.
//  - the draw: the kept mass and the first kept id whose running mass exceeds r = u x mass, found
//    hierarchically in ascending id order (a segment per warp, then a sub-chunk per thread of the chosen
//    segment, then one thread's walk).
// Every sum has a fixed order, so the result is deterministic; it differs from the CPU only when a boundary
// lies within rounding of the target. Probabilities come from token_probability, bit-identical to the CPU.
#include <cfloat>
#include <climits>
#include <string>

#include "common/error.h"
#include "kernels/sampling.h"

namespace m3::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;  // 11 key bits per refinement pass
constexpr int kBinsPerThread = kBins / kThreads;
constexpr double kFixedScale = 0x1.0p45;      // p <= 1 and vocab <= 2^18 keep a bin's sum below 2^63
constexpr double kMassTolerance = 0x1.0p-36;  // x row mass: bounds the gap between rounded and exact sums
static_assert(kWarps <= 32 && kBins % kThreads == 0, "the reductions below assume these shapes");

// Members of a cut of the order (descending key, ascending id): key > t, or key == t and id <= c.
struct Cut {
  uint32_t t = 0;  // 0 is below every key: the cut of everything
  int32_t c = INT_MAX;
  __device__ bool has(uint32_t key, int id) const { return key > t || (key == t && id <= c); }
};

struct Shared {
  unsigned long long mass[kBins];
  unsigned int count[kBins];
  double warp_d[kWarps];
  unsigned long long warp_u[kWarps];
  double seg_sum[kWarps];
  int seg_last[kWarps];
  uint32_t warp_key[kWarps];
  int warp_id[kWarps];
  // Values one thread computes for the block.
  double d0, d1;
  unsigned long long u0, u1;
  int i0, i1, i2, i3;
  uint32_t k0;
  long long l0, l1;
};

// Sum in a fixed tree: thread order, then warps. Every thread gets the total.
__device__ double block_sum(double v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (lane == 0) sh.warp_d[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? sh.warp_d[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) sh.d0 = v;
  }
  __syncthreads();
  const double total = sh.d0;
  __syncthreads();
  return total;
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

// The greedy id: largest sort key, lowest id among equals.
__device__ int block_argmax(const float* l, int V, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t bk = 0;
  int bi = INT_MAX;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const uint32_t k = sort_key(l[i]);
    if (k > bk) bk = k, bi = i;
  }
  auto merge = [&](uint32_t ok, int oi) {
    if (ok > bk || (ok == bk && oi < bi)) bk = ok, bi = oi;
  };
  for (int o = 16; o > 0; o >>= 1)
    merge(__shfl_xor_sync(0xffffffffu, bk, o), __shfl_xor_sync(0xffffffffu, bi, o));
  if (lane == 0) sh.warp_key[warp] = bk, sh.warp_id[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    bk = lane < kWarps ? sh.warp_key[lane] : 0u;
    bi = lane < kWarps ? sh.warp_id[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1)
      merge(__shfl_xor_sync(0xffffffffu, bk, o), __shfl_xor_sync(0xffffffffu, bi, o));
    if (lane == 0) sh.i0 = bi;
  }
  __syncthreads();
  const int best = sh.i0;
  __syncthreads();
  return best;
}

// The first id, in ascending order, at which the running sum of weight(i) >= 0 exceeds threshold(total), or
// the last id of positive weight when rounding leaves none; -1 if every weight is 0. The running sum is taken
// over contiguous segments (one per warp), then sub-chunks of the chosen segment (one per thread), then one
// thread's walk.
template <class Weight, class Threshold>
__device__ int first_exceeding(int V, Weight weight, Threshold threshold, Shared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seg = (V + kWarps - 1) / kWarps;
  {
    const int s0 = min(V, warp * seg), s1 = min(V, s0 + seg);
    double sum = 0;
    int last = -1;
    for (int i = s0 + lane; i < s1; i += 32) {
      const double w = weight(i);
      if (w > 0) sum += w, last = i;
    }
    for (int o = 16; o > 0; o >>= 1) {
      sum += __shfl_down_sync(0xffffffffu, sum, o);
      last = max(last, __shfl_down_sync(0xffffffffu, last, o));
    }
    if (lane == 0) sh.seg_sum[warp] = sum, sh.seg_last[warp] = last;
  }
  __syncthreads();
  if (tid == 0) {
    double total = 0;
    int last = -1;
    for (int w = 0; w < kWarps; ++w) {
      total += sh.seg_sum[w];
      if (sh.seg_last[w] >= 0) last = sh.seg_last[w];
    }
    const double r = threshold(total);
    double run = 0;
    int chosen = -1;
    for (int w = 0; w < kWarps; ++w) {
      if (sh.seg_sum[w] > 0 && run + sh.seg_sum[w] > r) {
        chosen = w;
        break;
      }
      run += sh.seg_sum[w];
    }
    sh.i0 = chosen, sh.i1 = last, sh.d0 = run, sh.d1 = r;
    sh.i2 = INT_MAX, sh.i3 = -1;
  }
  __syncthreads();
  const int chosen = sh.i0, last_overall = sh.i1;
  const double base = sh.d0, r = sh.d1;
  __syncthreads();
  if (chosen < 0) return last_overall;

  const int s0 = chosen * seg, s1 = min(V, s0 + seg);
  const int sub = (s1 - s0 + kThreads - 1) / kThreads;
  const int a0 = min(s1, s0 + tid * sub), a1 = min(s1, a0 + sub);
  double v = 0;
  int last = -1;
  for (int i = a0; i < a1; ++i) {
    const double w = weight(i);
    if (w > 0) v += w, last = i;
  }
  const double before = base + block_exclusive_scan(v, sh.warp_d);
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
    double run = before;
    int found = last;
    for (int i = a0; i < a1; ++i) {
      const double w = weight(i);
      if (w <= 0) continue;
      run += w;
      if (run > r) {
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

// The cut of the shortest prefix of the order, over ids in `in_set`, whose weight reaches `target`: weight 1
// per id (top-k) or its probability (top-p, kMass). The prefix's last key must lie in [lo, hi] and nothing
// in the set lies above hi. `tol` bounds how far the deterministic double sums may stray from exact ones.
template <bool kMass, class InSet, class Prob>
__device__ Cut find_cut(const float* l, int V, Prob prob, InSet in_set, double target, double tol,
                        uint32_t lo, uint32_t hi, Shared& sh) {
  const int tid = threadIdx.x, lane = tid & 31;
  unsigned long long above_q = 0, above_n = 0;  // fixed-point mass and count of the set above the range
  int lo_b = 0, hi_b = 0;
  for (;;) {
    const unsigned long long width = static_cast<unsigned long long>(hi) - lo;
    int shift = 0;
    while ((width >> shift) >= static_cast<unsigned long long>(kBins)) ++shift;
    const int nbins = static_cast<int>(width >> shift) + 1;
    for (int b = tid; b < kBins; b += kThreads) sh.mass[b] = 0, sh.count[b] = 0;
    if (tid == 0) sh.i0 = INT_MAX, sh.i1 = -1;
    __syncthreads();
    for (int base = 0; base < V; base += kThreads) {
      const int i = base + tid;
      int bin = -1;
      float x = 0.0f;
      if (i < V) {
        x = l[i];
        const uint32_t key = sort_key(x);
        if (key >= lo && key <= hi && in_set(i, key)) bin = static_cast<int>((key - lo) >> shift);
      }
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin >= 0) {
        if (lane == __ffs(peers) - 1) atomicAdd(&sh.count[bin], static_cast<unsigned>(__popc(peers)));
        if constexpr (kMass) atomicAdd(&sh.mass[bin], static_cast<unsigned long long>(prob(x) * kFixedScale));
      }
    }
    __syncthreads();
    // Bins from the top down: thread t owns kBinsPerThread consecutive reversed positions.
    unsigned long long q[kBinsPerThread], n[kBinsPerThread], q_sum = 0, n_sum = 0;
    int bins[kBinsPerThread];
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int rb = kBinsPerThread * tid + j;
      bins[j] = nbins - 1 - rb;
      q[j] = rb < nbins ? sh.mass[bins[j]] : 0;
      n[j] = rb < nbins ? sh.count[bins[j]] : 0;
      q_sum += q[j], n_sum += n[j];
    }
    const unsigned long long q_before = above_q + block_exclusive_scan(q_sum, sh.warp_u);
    const unsigned long long n_before = above_n + block_exclusive_scan(n_sum, sh.warp_u);
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
    hi_b = max(sh.i1, 0);  // none: the target is beyond the range (rounding only), take its bottom
    lo_b = min(sh.i0, hi_b);
    qa = q_before, na = n_before;
    for (int j = 0; j < kBinsPerThread; ++j) {
      if (bins[j] == hi_b) sh.u0 = qa, sh.u1 = na;
      qa += q[j], na += n[j];
    }
    __syncthreads();
    above_q = sh.u0, above_n = sh.u1;
    __syncthreads();
    if (shift == 0) break;  // the bins are single keys lo + b; sh.count keeps their exact counts
    const unsigned long long top =
        static_cast<unsigned long long>(lo) + ((static_cast<unsigned long long>(hi_b) + 1) << shift) - 1;
    lo += static_cast<uint32_t>(lo_b) << shift;
    hi = static_cast<uint32_t>(min(top, static_cast<unsigned long long>(hi)));
  }

  // Settle the key: walk the candidate keys down from the top, each a tie group of one probability.
  const uint32_t top_key = lo + static_cast<uint32_t>(hi_b);
  double above = static_cast<double>(above_n);
  if constexpr (kMass) {
    double v = 0;
    for (int i = tid; i < V; i += kThreads) {
      const float x = l[i];
      const uint32_t key = sort_key(x);
      if (key > top_key && in_set(i, key)) v += prob(x);
    }
    above = block_sum(v, sh);
  }
  if (tid == 0) {
    uint32_t t = lo + static_cast<uint32_t>(lo_b);
    long long m = 0, ties = 0;
    double g = above;
    for (int b = hi_b; b >= lo_b; --b) {
      const long long cnt = sh.count[b];
      if (cnt == 0) continue;
      t = lo + static_cast<uint32_t>(b);
      const double w = kMass ? prob(key_logit(t)) : 1.0;
      ties = m = cnt;
      if (g + static_cast<double>(cnt) * w >= target) {
        // The fewest ties (lowest ids first) that reach the target.
        m = static_cast<long long>(ceil((target - g) / w));
        m = m < 1 ? 1 : (m > cnt ? cnt : m);
        while (m > 1 && g + static_cast<double>(m - 1) * w >= target) --m;
        while (m < cnt && g + static_cast<double>(m) * w < target) ++m;
        break;
      }
      g += static_cast<double>(cnt) * w;
    }
    sh.k0 = t, sh.l0 = m, sh.l1 = ties;
  }
  __syncthreads();
  Cut cut;
  cut.t = sh.k0;
  const long long m = sh.l0, ties = sh.l1;
  __syncthreads();
  if (m < ties) {
    const uint32_t t = cut.t;
    cut.c = first_exceeding(
        V,
        [&](int i) {
          const uint32_t key = sort_key(l[i]);
          return key == t && in_set(i, key) ? 1.0 : 0.0;
        },
        [m](double) { return static_cast<double>(m) - 0.5; }, sh);
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
                  int32_t* out) {
  __shared__ Shared sh;
  const SamplingRow row = rows[blockIdx.x];
  float* l = logits + static_cast<int64_t>(blockIdx.x) * V;
  for (int e = row.adj_begin + threadIdx.x; e < row.adj_end; e += kThreads) {
    const LogitAdjustment a = adjustments[e];
    if (a.id >= 0 && a.id < V) l[a.id] = adjust_logit(l[a.id], a, row.penalties);
  }
  __syncthreads();
  const int best = block_argmax(l, V, sh);
  const float max_logit = l[best];
  // Top-k 1 keeps only the greedy id (p = 1 passes every later filter): the same answer without the passes.
  if (!(row.temperature > 0.0f) || !isfinite(max_logit) || row.top_k == 1) {
    if (threadIdx.x == 0) out[blockIdx.x] = best;
    return;
  }
  const float temperature = row.temperature;
  auto prob = [=](float x) { return token_probability(x, max_logit, temperature); };
  const uint32_t max_key = sort_key(max_logit);

  Cut top_k;
  if (row.top_k > 0 && row.top_k < V)
    top_k = find_cut<false>(
        l, V, prob, [](int, uint32_t) { return true; }, static_cast<double>(row.top_k), 0.0, 0u, max_key, sh);
  auto in_top_k = [=](int i, uint32_t key) { return top_k.has(key, i); };
  Cut top_p;
  if (row.top_p < 1.0f) {
    double v = 0;
    for (int i = threadIdx.x; i < V; i += kThreads) {
      const float x = l[i];
      if (in_top_k(i, sort_key(x))) v += prob(x);
    }
    const double mass = block_sum(v, sh);
    const uint32_t lo = max(top_k.t, top_p_floor_key(max_logit, temperature, row.top_p, V));
    top_p = find_cut<true>(l, V, prob, in_top_k, static_cast<double>(row.top_p) * mass, kMassTolerance * mass,
                           min(lo, max_key), max_key, sh);
  }
  const double min_p = row.min_p;
  const int id = first_exceeding(
      V,
      [&](int i) {
        const float x = l[i];
        const uint32_t key = sort_key(x);
        if (!top_k.has(key, i) || !top_p.has(key, i)) return 0.0;
        const double p = prob(x);
        return p >= min_p ? p : 0.0;
      },
      [u = row.u](double total) { return u * total; }, sh);
  if (threadIdx.x == 0) out[blockIdx.x] = id >= 0 ? id : best;
}

}  // namespace

void sample_rows(float* logits, int rows, int vocab, const SamplingRow* params,
                 const LogitAdjustment* adjustments, int32_t* out, cudaStream_t stream) {
  if (rows <= 0) return;
  if (vocab <= 0 || vocab > (1 << 18))
    fail(ErrorKind::kInternal, "sample_rows: vocab " + std::to_string(vocab) + " outside [1, 262144]");
  sample_kernel<<<rows, kThreads, 0, stream>>>(logits, vocab, params, adjustments, out);
}

}  // namespace m3::cuda
