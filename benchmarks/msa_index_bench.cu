// The MSA index branch at real widths (4 index heads, dim 128, page 128, top-16): decode scoring (one query
// token per sequence) alone, selection alone and both, at B = 1..64 and L = 8K..1M; prefill scoring and
// selection of an 8K-token chunk at the end of an 8K..128K context. Floors: decode = the index keys read once
// (B x L x 256 B); prefill scoring = 2 x heads x dim FLOPs per visible key of each query (causal) on the
// tensor cores; selection = the score rows read once.
#include <string>
#include <vector>

#include "harness.h"
#include "kernels/kernels.h"

namespace m3::bench {
namespace {

using cuda::bf16;

constexpr int kHeads = 4, kDim = 128, kPage = 128, kTopk = 16;

// B sequences whose query positions are [ctx - q, ctx); block b of sequence i lives in page b x B + i (the
// sequences' pages interleave, as after a mixed allocation history).
struct Batch {
  cuda::TokenMeta meta{};
  int T = 0, stride = 0;
  double score_entries = 0;   // sum over the queries of their visible blocks
  double flops_per_head = 0;  // sum over the queries of 2 x dim x visible keys
};

Batch make_batch(Arena& a, int B, int ctx, int q) {
  Batch bt;
  bt.stride = (ctx + kPage - 1) / kPage;
  std::vector<int32_t> seq, pos, table(size_t(B) * bt.stride);
  for (int i = 0; i < B; ++i)
    for (int k = 0; k < q; ++k) {
      seq.push_back(i);
      pos.push_back(ctx - q + k);
      bt.score_entries += (ctx - q + k) / kPage + 1;
      bt.flops_per_head += 2.0 * kDim * (ctx - q + k + 1);
    }
  for (int i = 0; i < B; ++i)
    for (int b = 0; b < bt.stride; ++b) table[size_t(i) * bt.stride + b] = b * B + i;
  bt.T = static_cast<int>(pos.size());
  int32_t *d_seq = a.get<int32_t>(seq.size()), *d_pos = a.get<int32_t>(pos.size());
  int32_t* d_table = a.get<int32_t>(table.size());
  cudaMemcpy(d_seq, seq.data(), seq.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_pos, pos.data(), pos.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice);
  bt.meta = {d_seq, d_pos, d_table, bt.stride};
  return bt;
}

void report_row(const std::string& kernel, const std::string& shape, double us, double bytes, double flops,
                const std::string& note) {
  Measurement m;
  m.kernel = kernel;
  m.shape = shape;
  m.us = us;
  m.bytes = bytes;
  m.flops = flops;
  m.note = note;
  report(m);
}

M3_BENCH(msa_index_decode) {
  const std::vector<int> batches = {1, 8, 32, 64};
  const std::vector<int> lengths =
      opts.quick ? std::vector<int>{8192, 131072, 1 << 20} : std::vector<int>{8192, 32768, 131072, 1 << 20};
  for (int L : lengths)
    for (int B : batches) {
      const double key_bytes = double(B) * L * kDim * 2;
      if (key_bytes > 40e9) continue;  // index cache too large for one GPU
      const std::string shape = "B=" + std::to_string(B) + " L=" + std::to_string(L);
      if (!wanted(opts, "msa_decode_score", shape) && !wanted(opts, "msa_decode_select", shape) &&
          !wanted(opts, "msa_decode_score+select", shape))
        continue;
      Arena a;
      const size_t keys = size_t(B) * L * kDim;
      bf16* cache = a.get<bf16>(keys);
      a.fill_bf16(cache, keys, 1.0f, 11);
      float* q = a.get<float>(size_t(B) * kHeads * kDim);
      a.fill_f32(q, size_t(B) * kHeads * kDim, 1.0f, 12);
      const Batch bt = make_batch(a, B, L, 1);
      float* scores = a.get<float>(size_t(B) * kHeads * bt.stride);
      int32_t* sel = a.get<int32_t>(size_t(B) * kHeads * kTopk);
      auto score = [&](cudaStream_t s) {
        cuda::msa_block_scores(q, cache, bt.meta, B, kHeads, kDim, kPage, bt.stride, scores, s, 1);
      };
      auto select = [&](cudaStream_t s) {
        cuda::msa_select(scores, bt.meta, B, kHeads, bt.stride, kPage, kTopk, 1, 0, sel, s);
      };
      const double flops = bt.flops_per_head * kHeads, score_bytes = bt.score_entries * kHeads * 4;
      score(nullptr);  // real scores for the selection-only timing
      if (wanted(opts, "msa_decode_score", shape))
        report_row("msa_decode_score", shape, time_us(score, nullptr, opts.iters), key_bytes, flops,
                   "floor: index keys read once");
      if (wanted(opts, "msa_decode_select", shape))
        report_row("msa_decode_select", shape, time_us(select, nullptr, opts.iters), score_bytes, 0,
                   "floor: score rows read once");
      if (wanted(opts, "msa_decode_score+select", shape))
        report_row("msa_decode_score+select", shape,
                   time_us(
                       [&](cudaStream_t s) {
                         score(s);
                         select(s);
                       },
                       nullptr, opts.iters),
                   key_bytes, flops, "floor: index keys read once");
    }
}

M3_BENCH(msa_index_prefill) {
  const int Q = 8192;
  const std::vector<int> contexts = {8192, 32768, 131072};
  for (int ctx : contexts) {
    const std::string shape = "Q=" + std::to_string(Q) + " ctx=" + std::to_string(ctx);
    if (!wanted(opts, "msa_prefill_score", shape) && !wanted(opts, "msa_prefill_select", shape)) continue;
    Arena a;
    bf16* cache = a.get<bf16>(size_t(ctx) * kDim);
    a.fill_bf16(cache, size_t(ctx) * kDim, 1.0f, 21);
    float* q = a.get<float>(size_t(Q) * kHeads * kDim);
    a.fill_f32(q, size_t(Q) * kHeads * kDim, 1.0f, 22);
    const Batch bt = make_batch(a, 1, ctx, Q);
    float* scores = a.get<float>(size_t(Q) * kHeads * bt.stride);
    int32_t* sel = a.get<int32_t>(size_t(Q) * kHeads * kTopk);
    const double score_bytes = bt.score_entries * kHeads * 4;
    auto score = [&](cudaStream_t s) {
      cuda::msa_block_scores(q, cache, bt.meta, Q, kHeads, kDim, kPage, bt.stride, scores, s, Q);
    };
    score(nullptr);  // real scores for the selection-only timing
    if (wanted(opts, "msa_prefill_score", shape)) {
      const double us = time_us(score, nullptr, opts.iters);
      report_row("msa_prefill_score", shape, us, ctx * kDim * 2.0 + Q * kHeads * kDim * 4.0 + score_bytes,
                 bt.flops_per_head * kHeads, "causal; floor: bf16 tensor peak");
    }
    if (wanted(opts, "msa_prefill_select", shape)) {
      const double us = time_us(
          [&](cudaStream_t s) {
            cuda::msa_select(scores, bt.meta, Q, kHeads, bt.stride, kPage, kTopk, 1, 0, sel, s);
          },
          nullptr, opts.iters);
      report_row("msa_prefill_select", shape, us, score_bytes, 0, "floor: score rows read once");
    }
  }
}

}  // namespace
}  // namespace m3::bench
