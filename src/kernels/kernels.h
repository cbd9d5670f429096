// Launchers of the CUDA kernels of the MiniMax-M3 forward pass. Plain device pointers, shapes and a stream;
// no engine or model types. Activations are fp32 unless named *_bf16; weights and KV pages are bf16.
// KV cache layout per layer: [page][slot][kv_head][head_dim]; index keys: [page][slot][index_dim].
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace m3::cuda {

using bf16 = __nv_bfloat16;

// Per-token metadata of a batch, on the device.
struct TokenMeta {
  const int32_t* seq;          // [T] sequence index of each token
  const int32_t* pos;          // [T] absolute position
  const int32_t* block_table;  // [S, max_blocks] page ids
  int max_blocks;
};

void embed_rows(const bf16* table, const int32_t* ids, int T, int H, float* out, cudaStream_t s);
// Gemma RMSNorm of rows: y = x * rsqrt(mean(x^2) + eps) * (1 + w). Writes bf16 and/or fp32 (either may be
// null).
void rms_norm(const float* x, const bf16* w, int rows, int dim, float eps, bf16* out_bf16, float* out_f32,
              cudaStream_t s);
// Per-head Gemma RMSNorm then partial NeoX RoPE, in place on x [T, heads, dim]. inv_freq: [rotary_dim / 2].
void head_norm_rope(float* x, const bf16* w, const float* inv_freq, const int32_t* pos, int T, int heads,
                    int dim, int rotary_dim, float eps, cudaStream_t s);
// Writes rows of src [T, width] (fp32) into paged caches [page][slot][width] as bf16.
void write_pages(const float* src, bf16* cache, TokenMeta meta, int T, int width, int page_size,
                 cudaStream_t s);

// MSA: block_scores [T, heads, max_blocks_in_batch] = max over visible tokens j of <index_q[t,g],
// index_k[j]>.
void msa_block_scores(const float* index_q, const bf16* index_cache, TokenMeta meta, int T, int heads,
                      int dim, int page_size, int score_stride, float* block_scores, cudaStream_t s);
// MSA selection per (token, group): forced init/local blocks + top scores, ascending ids, -1 padded to topk.
void msa_select(const float* block_scores, TokenMeta meta, int T, int heads, int score_stride, int page_size,
                int topk, int local_blocks, int init_blocks, int32_t* selection, cudaStream_t s);
// Paged causal GQA attention; with `selection` ([T, kv_heads, topk]) only keys in the selected blocks.
void paged_attention(const float* q, const bf16* k_cache, const bf16* v_cache, TokenMeta meta,
                     const int32_t* selection, int topk, int T, int heads, int kv_heads, int dim,
                     int page_size, float scale, float* out, cudaStream_t s);

void add_inplace(float* x, const float* y, int64_t n, cudaStream_t s);
void f32_to_bf16(const float* x, bf16* y, int64_t n, cudaStream_t s);
// out[i] = SwiGLU-OAI(gate[i], up[i]) for gate_up laid out as two arrays of n.
void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit, bf16* out,
                cudaStream_t s);
// Router: sigmoid(logits) (+bias for the choice), top-k with ties to the lower id, weights renormalised over
// the unbiased scores. ids/weights: [T, k].
void moe_route(const float* logits, const float* bias, int T, int experts, int k, int32_t* ids,
               float* weights, cudaStream_t s);
void gather_rows_bf16(const bf16* src, const int32_t* rows, int n, int width, bf16* dst, cudaStream_t s);
// out[rows[i]] += weights[i] * y[i] for i in [0, n) (rows distinct within one call).
void scatter_add_rows(const float* y, const int32_t* rows, const float* weights, int n, int width, float* out,
                      cudaStream_t s);
// x = x * scale + y
void scale_add(float* x, float scale, const float* y, int64_t n, cudaStream_t s);
void gather_rows_f32(const float* src, const int32_t* rows, int n, int width, float* dst, cudaStream_t s);

}  // namespace m3::cuda
