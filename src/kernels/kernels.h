// Launchers of the CUDA kernels of the MiniMax-M3 forward pass. Plain device pointers, shapes and a stream;
// no engine or model types. Activations are fp32 unless named *_bf16; weights are bf16 or MXFP8 (fp8.h), KV
// pages bf16 or FP8 (KvPages).
// KV cache layout per layer: [page][slot][kv_head][head_dim]; index keys: [page][slot][index_dim].
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/attention_plan.h"
#include "kernels/fp8.h"

namespace m3::cuda {

using bf16 = __nv_bfloat16;

// One layer's K and V pages, [page][slot][kv_head][head_dim]: bf16 (k, v), or FP8 (k8, v8 set): e4m3 values
// with one fp32 scale per (slot, KV head), element i = e4m3(k8[i]) x k_scale[i / head_dim], the scale being
// that head's largest magnitude / 448 when it was written (prepare_heads). Per token and head because a
// decode step writes one token at a time (no page-wide rescaling, no calibration) and heads differ in range;
// fp32 so that V, which no norm bounds, keeps its own range. The index keys stay bf16 (they pick the blocks).
struct KvPages {
  const bf16 *k = nullptr, *v = nullptr;
  const uint8_t *k8 = nullptr, *v8 = nullptr;
  const float *k_scale = nullptr, *v_scale = nullptr;
  bool fp8() const { return k8 != nullptr; }
};

// Per-token metadata of a batch, on the device.
struct TokenMeta {
  const int32_t* seq;          // [T] sequence index of each token
  const int32_t* pos;          // [T] absolute position
  const int32_t* block_table;  // [S, max_blocks] page ids
  int max_blocks;
};

// out[t] = table row ids[t] - vocab_begin for ids in [vocab_begin, vocab_end) (this rank's vocabulary rows),
// zeros for the others.
void embed_rows(const bf16* table, const int32_t* ids, int T, int H, int vocab_begin, int vocab_end,
                float* out, cudaStream_t s);
// Gemma RMSNorm of rows: y = x * rsqrt(mean(x^2) + eps) * (1 + w). Writes bf16 and/or fp32 (either may be
// null).
void rms_norm(const float* x, const bf16* w, int rows, int dim, float eps, bf16* out_bf16, float* out_f32,
              cudaStream_t s);
// The residual add fused with the next norm: x += delta, then rms_norm(x).
void add_rms_norm(float* x, const float* delta, const bf16* w, int rows, int dim, float eps, bf16* out_bf16,
                  float* out_f32, cudaStream_t s);
// The heads of an attention layer's input projection, prepared in one launch. Each segment is `heads` heads
// of `dim` values starting at column `col` of every projection row (fp32, row stride ld): with `norm`, a
// per-head Gemma RMSNorm then partial NeoX RoPE at the token's position (inv_freq: [rotary_dim / 2]);
// without, a copy. The result goes to `out` (fp32 [T, heads, dim]) and / or `cache` (bf16 paged
// [page][slot][heads x dim], the token's slot from meta) or `cache8` + `cache_scale` (KvPages' FP8 format:
// scale = the head's amax / 448, or 1 when that is 0 or not finite; e4m3(x / scale), round to nearest even,
// saturating, NaN kept; the same values as the CPU reference's FP8 cache). dim <= kMaxPrepDim; the segments'
// heads in order: q, k, v, index q, index k; segments with 0 heads are unused.
constexpr int kMaxHeadSegments = 5;
constexpr int kMaxPrepDim = 256;
struct HeadSegment {
  int col = 0, heads = 0, dim = 0;
  const bf16* norm = nullptr;
  float* out = nullptr;
  bf16* cache = nullptr;
  uint8_t* cache8 = nullptr;
  float* cache_scale = nullptr;
};
struct HeadPrep {
  HeadSegment seg[kMaxHeadSegments];
};
void prepare_heads(const float* proj, int64_t ld, const HeadPrep& prep, const float* inv_freq, TokenMeta meta,
                   int T, int rotary_dim, float eps, int page_size, cudaStream_t s);

// The MSA kernels launch with programmatic dependent launch: they may read TokenMeta (pos, seq, block table)
// before the previous kernel in the stream has finished, so no kernel of a step may write TokenMeta (the host
// uploads it before the step).
// ---- MSA index branch (msa_index.cu). block_scores [T, heads, score_stride] fp32: for token t and index
// head g, entry b (0 <= b <= pos[t] / page_size) = max over the tokens j <= pos[t] of block b of t's
// sequence of <bf16(index_q[t, g]), index_k[j]> (fp32 accumulation; -inf if every such score is NaN).
// Entries past the token's own block are NOT written (they keep whatever the buffer held). index_q: fp32
// [T, heads, dim], 16-byte aligned; dim in {32, 64, 128}; score_stride >= pos[t] / page_size + 1 for every t.
// Both paths are exact for any batch; max_tokens_per_seq only picks the faster one: 1 (every sequence has one
// query token: decode) streams each token's index keys split over the KV axis (heads <= 8); anything else
// (0 = unknown) scores tiles of consecutive tokens of one sequence on tensor cores, where single-token
// sequences are handled one after the other per CTA: score a mixed batch in two calls, offsetting index_q,
// meta.seq, meta.pos and block_scores to the decode tokens and to the prefill tokens. Launch shapes depend
// only on the host arguments (T, heads, dim, page_size, score_stride, max_tokens_per_seq): graph-safe.
void msa_block_scores(const float* index_q, const bf16* index_cache, TokenMeta meta, int T, int heads,
                      int dim, int page_size, int score_stride, float* block_scores, cudaStream_t s,
                      int max_tokens_per_seq = 0);
// MSA selection per (token, group) = select_blocks (model/msa_selection.h): forced init/local blocks + top
// scores (NaN ranks last, ties to the lower id), ascending ids, -1 padded to topk. Reads only entries
// b <= pos[t] / page_size of each score row. Needs 1 <= local_blocks, 0 <= init_blocks, init + local <= topk
// <= 64 (kInvalidArgument otherwise). Graph-safe (shapes from T, heads, score_stride).
void msa_select(const float* block_scores, TokenMeta meta, int T, int heads, int score_stride, int page_size,
                int topk, int local_blocks, int init_blocks, int32_t* selection, cudaStream_t s);
// ---- Paged GQA attention on tensor cores (attention.cu), over bf16 or FP8 pages (KvPages: FP8 rows are
// widened to bf16 times their scale in shared memory, the MMAs are the same). Query token t (q fp32 [T,
// heads, dim], post RoPE) attends the keys j <= pos[t] of its sequence: all of them (selection null: dense
// layers), or only those in the blocks of selection[t][kv_head][0..topk) (ascending distinct block ids, -1
// padded; MSA layers). Output bf16 [T, heads x dim], every element written. `tiles` is the device copy of
// plan_attention(..., heads / kv_heads, dim) (attention_plan.h) for this batch; max_kv_len bounds pos + 1
// over the batch (it only sizes the split-K; the keys are always read from pos). Launch shapes depend only on
// host arguments (graph-safe). With splits > 1 `workspace` must hold paged_attention_workspace_floats(...)
// floats; a null workspace forces splits = 1.
struct AttentionTiles {
  const AttentionTile* tiles = nullptr;  // device [count]
  int count = 0;
  int max_tokens = 0;  // AttentionPlan::max_tokens
};
void paged_attention(const float* q, const KvPages& kv, TokenMeta meta, const int32_t* selection, int topk,
                     const AttentionTiles& tiles, int T, int heads, int kv_heads, int dim, int page_size,
                     int max_kv_len, float scale, float* workspace, bf16* out, cudaStream_t s);
// The split count paged_attention picks for these arguments (sparse = selection non-null) and the workspace
// it needs. Size the workspace for the largest over the layers of a forward (dense and MSA differ).
int paged_attention_splits(const AttentionTiles& tiles, int heads, int kv_heads, int dim, int page_size,
                           bool sparse, int topk, int max_kv_len, bool fp8 = false);
size_t paged_attention_workspace_floats(const AttentionTiles& tiles, int T, int heads, int kv_heads, int dim,
                                        int page_size, bool sparse, int topk, int max_kv_len,
                                        bool fp8 = false);
// As paged_attention with an explicit split count (>= 1; tests and benchmarks).
void paged_attention_with_splits(const float* q, const KvPages& kv, TokenMeta meta, const int32_t* selection,
                                 int topk, const AttentionTiles& tiles, int T, int heads, int kv_heads,
                                 int dim, int page_size, int splits, float scale, float* workspace, bf16* out,
                                 cudaStream_t s);

void add_inplace(float* x, const float* y, int64_t n, cudaStream_t s);
// Byte copies of whole KV pages between device memory and mapped pinned host memory (the prefix cache's host
// tier): item i copies bytes (a multiple of 16, 16-byte aligned) from src to dst. A few blocks stride over
// the items, so a copy running beside the forward pass leaves it the SMs.
struct PageCopyItem {
  const void* src;
  void* dst;
  uint64_t bytes;
};
void copy_pages(const PageCopyItem* items, int n, cudaStream_t s);
void gather_rows_f32(const float* src, const int32_t* rows, int n, int width, float* dst, cudaStream_t s);
// Synthetic weights: p[i] = counter_gaussian(key + i) * scale (common/random_init.h), bf16 or fp32.
void fill_random(void* p, bool f32, int64_t n, uint64_t key, float scale, cudaStream_t s);
// The same values rounded to e4m3 (saturating): synthetic FP8 KV pages.
void fill_random_e4m3(uint8_t* p, int64_t n, uint64_t key, float scale, cudaStream_t s);

// ---- MoE / MLP (moe.cu). Gate/up weights are fused as [2I, K] with rows interleaved in blocks of 8
// (rows 16j..16j+7: gate units 8j..8j+7, rows 16j+8..16j+15: up units 8j..8j+7).
// Router: sigmoid(logits) (+bias for the choice), top-k with ties to the lower id, weights renormalised over
// the unbiased scores. ids/weights: [T, k].
void moe_route(const float* logits, const float* bias, int T, int experts, int k, int32_t* ids,
               float* weights, cudaStream_t s);
// The routed experts one rank holds (expert parallelism): global ids [first, first + count). Grouping, gather
// and combine number the groups by local id (expert - first); a pair routed to an expert held elsewhere has
// rank -1, gets no slot and adds nothing to the combine. All experts: {0, E}.
struct ExpertRange {
  int first = 0, count = 0;
};
// Groups the T x k pairs of the local experts by expert, stable in pair order: counts[G], offsets[G + 1] (G =
// local.count, plus one group holding every token when `shared`), rank[T x k] (a pair's index within its
// expert, -1 when not local), slot_token[offsets[G]] (the token of each compact slot), active[G] (the
// non-empty groups in ascending order, then -1). One CTA; local.count <= 256.
void moe_group(const int32_t* ids, int T, int k, ExpertRange local, bool shared, int32_t* counts,
               int32_t* offsets, int32_t* rank, int32_t* slot_token, int32_t* active, cudaStream_t s);
// Small batches, one launch: router logits = x [T, H] (fp32) . router [E, H]^T (fp32 dot products in a fixed
// order) into `logits` [T, E], then exactly what moe_route and moe_group give on those logits.
// T <= kRouteGroupMaxTokens, H % 32 == 0. ticket: a device counter that is 0 before the first launch; each
// launch leaves it 0 (graph-safe; launches sharing one ticket must not overlap).
constexpr int kRouteGroupMaxTokens = 32;
void moe_route_group(const float* x, const float* router, const float* bias, int T, int H, int E, int k,
                     ExpertRange local, bool shared, float* logits, int32_t* ids, float* w, int32_t* counts,
                     int32_t* offsets, int32_t* rank, int32_t* slot_token, int32_t* active, unsigned* ticket,
                     cudaStream_t s);
// For each group e with counts[e] > 0: Y[offsets[e] + i] = W[e] . X[row_i] for i < counts[e], where row_i =
// slot_token[offsets[e] + i] (or offsets[e] + i when slot_token is null). W: groups x [N, K] at element
// stride w_stride, bf16 (W) or, when W8.w is set, MXFP8 (fp8.h; group g's scales at g x w_stride / 32; half
// the bytes per pass; K and w_stride multiples of 32); X rows bf16 with stride ldx; K % 8 == 0, N % 16 == 0.
// swiglu: W is interleaved gate/up and Y is bf16 act [slots, N / 2]; else Y is fp32 [slots, N]. With `active`
// (moe_group's list) only the first min(groups, max_active) entries get CTAs (max_active: a host bound on
// non-empty groups, e.g. T x k + 1), else every group does. max_count: a host bound on counts[e] (e.g. T);
// small bounds select leaner kernels. The grid depends only on host arguments: graph-safe.
void grouped_gemv(const bf16* W, Fp8Matrix W8, int64_t w_stride, int groups, int N, int K, const bf16* X,
                  int ldx, const int32_t* slot_token, const int32_t* counts, const int32_t* offsets,
                  const int32_t* active, int max_active, int max_count, bool swiglu, float alpha, float limit,
                  void* Y, cudaStream_t s);
// Y[T, N] fp32 = X[T, K] (bf16, dense rows) . W[N, K]^T by the same GEMV: the weights are read once per 32
// tokens, so it is the decode-sized linear layer. W bf16, or fp8 when W8.w is set (then K % 32 == 0);
// N % 16 == 0.
void linear_gemv(const bf16* W, Fp8Matrix W8, int N, int K, const bf16* X, int T, float* Y, cudaStream_t s);
// act [rows, I] bf16 = SwiGLU-OAI of the interleaved fp32 GEMM output [rows, 2I].
void swiglu_interleaved(const float* gate_up, int64_t rows, int I, float alpha, float limit, bf16* act,
                        cudaStream_t s);
// Rows for per-expert GEMMs: xs[offsets[e - local.first] + rank[p]] = x[p / k] for every local pair p of
// expert e (moe_group's compact layout). H % 8 == 0.
void moe_gather(const bf16* x, const int32_t* ids, const int32_t* rank, const int32_t* offsets, int T, int k,
                int H, ExpertRange local, bf16* xs, cudaStream_t s);
// out[t] = scale x sum over t's local experts (ascending id) of w x y[offsets[e - local.first] + rank] +
// shared_row(t); shared_row(t) = shared[t] when shared is non-null, else y[offsets[local.count] + t] when
// shared_group (the shared expert computed as the last group), else 0. k <= 16. expert_tokens (nullable):
// [E] counters, each token adds 1 to each of its k experts' (local or not: the load metrics).
void moe_combine(const float* y, const int32_t* ids, const float* w, const int32_t* rank,
                 const int32_t* offsets, int T, int k, int H, float scale, const float* shared,
                 bool shared_group, ExpertRange local, float* out, unsigned long long* expert_tokens,
                 cudaStream_t s);

}  // namespace m3::cuda
