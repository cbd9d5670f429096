// Attention of the CPU backend. Projections, per-head QK norm and RoPE for the whole batch; K/V (and MSA
// index keys) written to their pages before any token attends, so tokens of one chunk see their predecessors;
// then per token: MSA block selection per KV group (sparse layers) and exact softmax attention over the
// allowed keys (j <= pos, and in a selected block for MSA layers). Heads are the rank's shard: its query
// heads, the KV and index query heads of their groups, and the whole index key (one head, on every rank);
// the o-projection's partial sums are added over the ranks.
#include <algorithm>
#include <cmath>
#include <limits>

#include "model/cpu_model.h"
#include "model/cpu_ops.h"
#include "model/msa_selection.h"

namespace m3 {
namespace {

// Per-head Gemma RMSNorm then RoPE on rows of [heads x dim] for token position `pos`.
void norm_and_rope(float* x, int heads, int dim, const float* norm_w, float eps, const Rope& rope,
                   int64_t pos) {
  std::vector<float> cs(rope.rotary_dim());
  rope.angles(pos, cs.data(), cs.data() + rope.rotary_dim() / 2);
  cpu::rms_norm_gemma(x, x, heads, dim, norm_w, eps);
  for (int h = 0; h < heads; ++h) rope.apply(x + h * dim, cs.data(), cs.data() + rope.rotary_dim() / 2);
}

}  // namespace

void CpuModel::attention_block(int l, const float* a, const std::vector<TokenMeta>& tokens, float* out,
                               std::vector<BlockSelection>* msa_trace) {
  const ModelConfig& c = config_;
  const CpuLayerWeights& L = w_.layers[l];
  const int64_t T = static_cast<int64_t>(tokens.size()), H = c.hidden_size;
  const int D = c.head_dim;
  const int Hq = static_cast<int>(shard_.q_heads.size()), Hkv = static_cast<int>(shard_.kv_heads.size());
  const bool sparse = c.sparse_attention[l];
  const int Di = c.msa.index_head_dim, Hi = Hkv;  // one index query head per KV group
  const int B = kv_.page_size();

  std::vector<float> q(T * Hq * D), k(T * Hkv * D), v(T * Hkv * D), iq, ik;
  cpu::matmul(a, T, H, L.q.data(), Hq * D, q.data());
  cpu::matmul(a, T, H, L.k.data(), Hkv * D, k.data());
  cpu::matmul(a, T, H, L.v.data(), Hkv * D, v.data());
  if (sparse) {
    iq.resize(T * Hi * Di);
    ik.resize(T * Di);
    cpu::matmul(a, T, H, L.index_q.data(), Hi * Di, iq.data());
    cpu::matmul(a, T, H, L.index_k.data(), Di, ik.data());
  }

#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = tokens[t].pos;
    norm_and_rope(&q[t * Hq * D], Hq, D, L.q_norm.data(), c.rms_norm_eps, rope_, pos);
    norm_and_rope(&k[t * Hkv * D], Hkv, D, L.k_norm.data(), c.rms_norm_eps, rope_, pos);
    const int32_t page = tokens[t].seq->block_table[pos / B];
    const int slot = static_cast<int>(pos % B);
    kv_.store(l, page, slot, &k[t * Hkv * D], &v[t * Hkv * D]);
    if (sparse) {
      norm_and_rope(&iq[t * Hi * Di], Hi, Di, L.index_q_norm.data(), c.rms_norm_eps, rope_, pos);
      norm_and_rope(&ik[t * Di], 1, Di, L.index_k_norm.data(), c.rms_norm_eps, rope_, pos);
      std::copy_n(&ik[t * Di], Di, kv_.index_k(l, page, slot));
    }
  }

  std::vector<float> attn(T * Hq * D);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < T; ++t) {
    BlockSelection selection;
    if (sparse) sparse_select(l, &iq[t * Hi * Di], tokens[t], &selection);
    attend(l, &q[t * Hq * D], tokens[t], sparse ? &selection : nullptr, &attn[t * Hq * D]);
    if (sparse && msa_trace) (*msa_trace)[t] = std::move(selection);
  }
  cpu::matmul(attn.data(), T, Hq * D, L.o.data(), H, out);
  if (shard_.tp_size > 1) comm_->all_reduce_sum(out, T * H);
}

void CpuModel::sparse_select(int l, const float* index_q, const TokenMeta& tok, BlockSelection* selection) {
  const MsaConfig& msa = config_.msa;
  const int Di = msa.index_head_dim, B = kv_.page_size();
  const int64_t pos = tok.pos, query_block = pos / B;
  std::vector<float> block_scores(query_block + 1);
  const int groups = static_cast<int>(shard_.kv_heads.size());
  selection->resize(groups);
  for (int g = 0; g < groups; ++g) {
    std::fill(block_scores.begin(), block_scores.end(), -std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j <= pos; ++j) {  // token scores, max-pooled per block; future tokens never scored
      const float* key = kv_.index_k(l, tok.seq->block_table[j / B], static_cast<int>(j % B));
      float s = cpu::dot(index_q + g * Di, key, Di);
      block_scores[j / B] = std::max(block_scores[j / B], s);
    }
    select_blocks(block_scores.data(), query_block, msa, &(*selection)[g]);
  }
}

void CpuModel::attend(int l, const float* q, const TokenMeta& tok,
                      const std::vector<std::vector<int32_t>>* selection, float* out) {
  const ModelConfig& c = config_;
  const int D = c.head_dim, group = c.group_size(), B = kv_.page_size();
  const int64_t pos = tok.pos;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  std::vector<int64_t> keys;
  std::vector<float> scores, acc(D);
  int g = -1;
  for (int h = 0; h < shard_.q_heads.size(); ++h) {
    const int global_group = static_cast<int>((shard_.q_heads.begin + h) / group);
    if (global_group - shard_.kv_heads.begin != g) {  // the heads of a KV group share the allowed positions
      g = static_cast<int>(global_group - shard_.kv_heads.begin);
      keys.clear();
      if (selection == nullptr) {
        for (int64_t j = 0; j <= pos; ++j) keys.push_back(j);
      } else {
        for (int32_t b : (*selection)[g])
          for (int64_t j = int64_t{b} * B; j < int64_t{b + 1} * B && j <= pos; ++j) keys.push_back(j);
      }
      scores.resize(keys.size());
    }
    const float* qh = q + h * D;
    float mx = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < keys.size(); ++i) {
      const int64_t j = keys[i];
      const float* kj = kv_.k(l, tok.seq->block_table[j / B], static_cast<int>(j % B)) + g * D;
      scores[i] = cpu::dot(qh, kj, D) * scale;
      mx = std::max(mx, scores[i]);
    }
    float sum = 0;
    for (float& s : scores) {
      s = std::exp(s - mx);
      sum += s;
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (size_t i = 0; i < keys.size(); ++i) {
      const int64_t j = keys[i];
      const float* vj = kv_.v(l, tok.seq->block_table[j / B], static_cast<int>(j % B)) + g * D;
      const float p = scores[i] / sum;
      for (int d = 0; d < D; ++d) acc[d] += p * vj[d];
    }
    std::copy(acc.begin(), acc.end(), out + h * D);
  }
}

}  // namespace m3
