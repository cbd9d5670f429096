// Attention kernels, written for correctness first (the performance issue replaces them): MSA block scoring
// (one warp per KV block), MSA top-k selection (one warp per token and group), and paged GQA attention with an
// online softmax (one warp per token and query head), dense or restricted to the selected blocks.
#include <cfloat>

#include "kernels/kernels.h"

namespace m3::cuda {
namespace {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

__device__ __forceinline__ int page_of(const TokenMeta& m, int seq, int pos, int page_size) {
  return m.block_table[static_cast<int64_t>(seq) * m.max_blocks + pos / page_size];
}

// grid (T, heads); each warp scores whole KV blocks: lanes take tokens, the warp takes the max.
__global__ void block_scores_kernel(const float* iq, const bf16* cache, TokenMeta m, int heads, int dim, int page_size,
                                    int stride, float* out) {
  const int t = blockIdx.x, g = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int pos = m.pos[t], seq = m.seq[t];
  const float* q = iq + (static_cast<int64_t>(t) * heads + g) * dim;
  const int nblocks = pos / page_size + 1;
  float* row = out + (static_cast<int64_t>(t) * heads + g) * stride;
  for (int b = warp; b < nblocks; b += warps) {
    const int page = page_of(m, seq, b * page_size, page_size);
    float best = -FLT_MAX;
    for (int s = lane; s < page_size; s += 32) {
      const int j = b * page_size + s;
      if (j > pos) break;
      const bf16* k = cache + (static_cast<int64_t>(page) * page_size + s) * dim;
      float acc = 0;
      for (int d = 0; d < dim; ++d) acc += q[d] * __bfloat162float(k[d]);
      best = fmaxf(best, acc);
    }
    for (int o = 16; o > 0; o >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffff, best, o));
    if (lane == 0) row[b] = best;
  }
}

// One warp per (token, group): forced blocks first, then repeated warp argmax over the rest.
__global__ void select_kernel(const float* scores, TokenMeta m, int T, int heads, int stride, int page_size, int topk,
                              int local_blocks, int init_blocks, int32_t* sel) {
  const int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (w >= T * heads) return;
  const int t = w / heads;
  const int L = m.pos[t] / page_size, n = L + 1;
  const float* row = scores + static_cast<int64_t>(w) * stride;
  int32_t* out = sel + static_cast<int64_t>(w) * topk;
  if (n <= topk) {
    for (int i = lane; i < topk; i += 32) out[i] = i < n ? i : -1;
    return;
  }
  const int local_first = max(0, L - local_blocks + 1);
  int chosen[64];  // topk <= 64 (checked by the launcher)
  int count = 0;
  for (int b = 0; b < n && count < topk; ++b)
    if (b < init_blocks || b >= local_first) chosen[count++] = b;
  while (count < topk) {
    float best = -FLT_MAX;
    int best_id = 0x7fffffff;
    for (int b = lane; b < local_first; b += 32) {
      if (b < init_blocks) continue;
      bool taken = false;
      for (int i = 0; i < count; ++i) taken |= chosen[i] == b;
      float s = row[b];
      if (s != s) s = -FLT_MAX;  // NaN ranks last
      if (!taken && (s > best || (s == best && b < best_id))) {
        best = s;
        best_id = b;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffff, best, o);
      const int oi = __shfl_xor_sync(0xffffffff, best_id, o);
      if (ob > best || (ob == best && oi < best_id)) {
        best = ob;
        best_id = oi;
      }
    }
    chosen[count++] = best_id;
  }
  if (lane == 0) {
    for (int i = 1; i < count; ++i)
      for (int j = i; j > 0 && chosen[j - 1] > chosen[j]; --j) {
        const int x = chosen[j];
        chosen[j] = chosen[j - 1];
        chosen[j - 1] = x;
      }
    for (int i = 0; i < topk; ++i) out[i] = chosen[i];
  }
}

// One warp per (token, query head); DPL = head_dim / 32 dims per lane.
template <int DPL>
__global__ void attention_kernel(const float* q, const bf16* kc, const bf16* vc, TokenMeta m, const int32_t* sel,
                                 int topk, int T, int heads, int kv_heads, int page_size, float scale, float* out) {
  const int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (w >= T * heads) return;
  const int t = w / heads, h = w % heads, g = h / (heads / kv_heads);
  constexpr int D = DPL * 32;
  const int pos = m.pos[t], seq = m.seq[t];
  float qv[DPL], acc[DPL];
  for (int i = 0; i < DPL; ++i) {
    qv[i] = q[static_cast<int64_t>(w) * D + lane * DPL + i];
    acc[i] = 0;
  }
  float mx = -FLT_MAX, sum = 0;
  auto visit = [&](int j) {
    const int page = page_of(m, seq, j, page_size);
    const int64_t base = ((static_cast<int64_t>(page) * page_size + j % page_size) * kv_heads + g) * D + lane * DPL;
    float part = 0;
    for (int i = 0; i < DPL; ++i) part += qv[i] * __bfloat162float(kc[base + i]);
    const float s = warp_sum(part) * scale;
    const float nm = fmaxf(mx, s);
    const float corr = __expf(mx - nm), p = __expf(s - nm);
    sum = sum * corr + p;
    for (int i = 0; i < DPL; ++i) acc[i] = acc[i] * corr + p * __bfloat162float(vc[base + i]);
    mx = nm;
  };
  if (sel == nullptr) {
    for (int j = 0; j <= pos; ++j) visit(j);
  } else {
    const int32_t* blocks = sel + (static_cast<int64_t>(t) * kv_heads + g) * topk;
    for (int k = 0; k < topk; ++k) {
      const int b = blocks[k];
      if (b < 0) continue;
      for (int j = b * page_size; j < (b + 1) * page_size && j <= pos; ++j) visit(j);
    }
  }
  for (int i = 0; i < DPL; ++i) out[static_cast<int64_t>(w) * D + lane * DPL + i] = acc[i] / sum;
}

// One thread per token: sigmoid, biased choice, top-k (ties to the lower id), renormalised unbiased weights.
__global__ void route_kernel(const float* logits, const float* bias, int T, int E, int k, int32_t* ids, float* w) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const float* l = logits + static_cast<int64_t>(t) * E;
  int32_t* oi = ids + static_cast<int64_t>(t) * k;
  float* ow = w + static_cast<int64_t>(t) * k;
  float total = 0;
  for (int r = 0; r < k; ++r) {
    int best = -1;
    float best_c = -FLT_MAX;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < r; ++i) taken |= oi[i] == e;
      const float c = 1.0f / (1.0f + expf(-l[e])) + (bias ? bias[e] : 0.0f);
      if (!taken && c > best_c) {
        best_c = c;
        best = e;
      }
    }
    oi[r] = best;
    ow[r] = 1.0f / (1.0f + expf(-l[best]));
    total += ow[r];
  }
  for (int r = 0; r < k; ++r) ow[r] /= total;
}

}  // namespace

void msa_block_scores(const float* iq, const bf16* cache, TokenMeta m, int T, int heads, int dim, int page_size,
                      int stride, float* out, cudaStream_t s) {
  if (T > 0) block_scores_kernel<<<dim3(T, heads), 256, 0, s>>>(iq, cache, m, heads, dim, page_size, stride, out);
}

void msa_select(const float* scores, TokenMeta m, int T, int heads, int stride, int page_size, int topk,
                int local_blocks, int init_blocks, int32_t* sel, cudaStream_t s) {
  if (topk > 64 || T == 0) return;  // the model layer rejects topk > 64 before it gets here
  const int warps = T * heads;
  select_kernel<<<(warps * 32 + 127) / 128, 128, 0, s>>>(scores, m, T, heads, stride, page_size, topk, local_blocks,
                                                         init_blocks, sel);
}

void paged_attention(const float* q, const bf16* kc, const bf16* vc, TokenMeta m, const int32_t* sel, int topk, int T,
                     int heads, int kv_heads, int dim, int page_size, float scale, float* out, cudaStream_t s) {
  const int warps = T * heads;
  if (warps == 0) return;
  const int blocks = (warps * 32 + 127) / 128;
  switch (dim) {
    case 32: attention_kernel<1><<<blocks, 128, 0, s>>>(q, kc, vc, m, sel, topk, T, heads, kv_heads, page_size, scale, out); break;
    case 64: attention_kernel<2><<<blocks, 128, 0, s>>>(q, kc, vc, m, sel, topk, T, heads, kv_heads, page_size, scale, out); break;
    case 128: attention_kernel<4><<<blocks, 128, 0, s>>>(q, kc, vc, m, sel, topk, T, heads, kv_heads, page_size, scale, out); break;
    case 256: attention_kernel<8><<<blocks, 128, 0, s>>>(q, kc, vc, m, sel, topk, T, heads, kv_heads, page_size, scale, out); break;
    default: break;  // the model layer only builds for head_dim in {32, 64, 128, 256}
  }
}

void moe_route(const float* logits, const float* bias, int T, int E, int k, int32_t* ids, float* w, cudaStream_t s) {
  if (T > 0) route_kernel<<<(T + 127) / 128, 128, 0, s>>>(logits, bias, T, E, k, ids, w);
}

}  // namespace m3::cuda
