// Forward pass of the CPU backend: embedding, decoder layers (attention then FFN, pre-norm residual), final
// norm and LM head for the rows that want logits. Attention is in cpu_attention.cc, the FFN in cpu_ffn.cc.
#include "model/cpu_model.h"

#include <algorithm>

#include "common/error.h"
#include "model/cpu_ops.h"

namespace m3 {

CpuModel::CpuModel(ModelConfig config, CpuWeights weights, int num_kv_pages, const ShardLayout& shard,
                   std::shared_ptr<dist::Communicator> comm, CpuKvStorage::Precision kv,
                   int num_host_kv_pages)
    : config_(std::move(config)),
      shard_(shard),
      comm_(std::move(comm)),
      w_(std::move(weights)),
      kv_(config_, num_kv_pages, static_cast<int>(shard_.kv_heads.size()), kv),
      rope_(config_.rotary_dim, config_.rope_theta) {
  M3_CHECK(comm_->size() == shard_.world_size() && comm_->rank() == shard_.world_rank(),
           "the shard layout and the communicator disagree on the ranks");
  expert_tokens_.assign(config_.num_experts, 0);
  if (num_host_kv_pages > 0)
    host_kv_ = std::make_unique<CpuKvStorage>(config_, num_host_kv_pages,
                                              static_cast<int>(shard_.kv_heads.size()), kv);
}

// Vocabulary-parallel embedding: each rank copies the rows it holds, zeros elsewhere; the sum over ranks is
// exact (every element has one non-zero term).
void CpuModel::embed(const std::vector<int32_t>& ids, float* h) {
  const int64_t H = config_.hidden_size;
  for (size_t t = 0; t < ids.size(); ++t) {
    const int32_t id = ids[t];
    if (id < 0 || id >= config_.vocab_size)
      fail(ErrorKind::kInvalidArgument, "token id " + std::to_string(id) + " out of range");
    if (id >= shard_.vocab.begin && id < shard_.vocab.end)
      std::copy_n(w_.embed.data() + (id - shard_.vocab.begin) * H, H, h + t * H);
    else
      std::fill_n(h + t * H, H, 0.0f);
  }
  if (shard_.tp_size > 1) comm_->all_reduce_sum(h, ids.size() * H);
}

// Vocabulary-parallel LM head: each rank scores its rows, padded to an equal width for the all-gather. One
// rank's scores are already the logits (no gather, no copy: at 200K vocabulary and hundreds of rows a copy
// costs more than the rest of a decode step's host work).
void CpuModel::lm_head(const float* x, int64_t R, std::vector<float>* logits) {
  const int64_t H = config_.hidden_size, V = config_.vocab_size, tp = shard_.tp_size;
  const int64_t per = (V + tp - 1) / tp, mine = shard_.vocab.size();
  if (tp == 1) {
    logits->resize(R * V);
    cpu::matmul(x, R, H, w_.lm_head.data(), V, logits->data());
    return;
  }
  std::vector<float> part(R * per, 0.0f), local(R * mine);
  cpu::matmul(x, R, H, w_.lm_head.data(), mine, local.data());
  for (int64_t r = 0; r < R; ++r) std::copy_n(local.data() + r * mine, mine, part.data() + r * per);
  std::vector<float> all(tp * R * per);
  comm_->all_gather(part.data(), part.size() * sizeof(float), all.data());
  logits->resize(R * V);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t v = 0; v < V; ++v) (*logits)[r * V + v] = all[((v / per) * R + r) * per + v % per];
}

ForwardOutput CpuModel::forward(const ForwardBatch& batch, const ForwardOptions& options) {
  if (shard_.dp_size == 1) return forward_local(batch, options);
  if (options.trace_hidden || options.trace_msa || options.trace_moe)
    fail(ErrorKind::kUnsupported, "forward traces need --data-parallel-size 1");
  // Every rank runs its own sequences (a rank with none still joins the MoE layers' exchanges); the logits
  // rows then reach every rank in batch order.
  const DpSplit split = split_by_dp_rank(batch, shard_.dp_size);
  dp_tokens_.resize(shard_.dp_size);
  for (int r = 0; r < shard_.dp_size; ++r) dp_tokens_[r] = size_t(split.tokens(r));
  ForwardOutput mine = forward_local(dp_local_batch(batch, split, shard_.dp_rank), options);
  ForwardOutput out;
  out.vocab = mine.vocab;
  std::vector<size_t> bytes(shard_.dp_size);
  for (int r = 0; r < shard_.dp_size; ++r) bytes[r] = size_t(split.rows(r)) * out.vocab * sizeof(float);
  out.logits.resize(size_t(split.row_begin.back()) * out.vocab);
  comm_->all_gather_varying(mine.logits.data(), bytes, out.logits.data());
  return out;
}

ForwardOutput CpuModel::forward_local(const ForwardBatch& batch, const ForwardOptions& options) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());

  for (const KvPageCopy& cp : batch.page_copies) {
    if (!host_kv_ || cp.page < 0 || cp.page >= kv_.num_pages() || cp.host_slot < 0 ||
        cp.host_slot >= host_kv_->num_pages())
      fail(ErrorKind::kInternal, "a page copy names an invalid page or host slot");
    if (cp.to_host)
      kv_.copy_page(cp.page, *host_kv_, cp.host_slot);
    else
      host_kv_->copy_page(cp.host_slot, kv_, cp.page);
  }
  std::vector<TokenMeta> tokens(T);
  std::vector<int64_t> logit_rows;  // token index of each logits row
  for (const SeqChunk& s : batch.seqs) {
    if (s.num_tokens <= 0 || s.token_offset < 0 || s.token_offset + s.num_tokens > T)
      fail(ErrorKind::kInternal, "forward batch chunk out of range");
    const int64_t end = s.start_pos + s.num_tokens;
    if (static_cast<int64_t>(s.block_table.size()) * kv_.page_size() < end)
      fail(ErrorKind::kInternal, "block table too short for the chunk");
    for (int32_t p : s.block_table)
      if (p < 0 || p >= kv_.num_pages()) fail(ErrorKind::kInternal, "block table holds an invalid page id");
    for (int i = 0; i < s.num_tokens; ++i) tokens[s.token_offset + i] = {s.start_pos + i, &s};
    if (s.want_logits) logit_rows.push_back(s.token_offset + s.num_tokens - 1);
  }

  std::vector<float> h(T * H), normed(T * H), delta(T * H);
  embed(batch.token_ids, h.data());
  for_each_embed_run(batch, int(H), [&](int32_t row, int32_t rows, const float* v) {
    std::copy_n(v, size_t(rows) * H, h.data() + size_t(row) * H);
  });

  ForwardOutput out;
  auto trace = [&] {
    if (!options.trace_hidden) return;
    out.hidden_trace.resize(logit_rows.size());
    for (size_t r = 0; r < logit_rows.size(); ++r)
      out.hidden_trace[r].emplace_back(h.begin() + logit_rows[r] * H, h.begin() + (logit_rows[r] + 1) * H);
  };
  trace();

  for (int l = 0; l < c.num_layers; ++l) {
    const CpuLayerWeights& L = w_.layers[l];
    cpu::rms_norm_gemma(h.data(), normed.data(), T, H, L.input_norm.data(), c.rms_norm_eps);
    if (options.trace_msa) out.msa_trace.emplace_back(c.sparse_attention[l] ? T : 0);
    attention_block(l, normed.data(), tokens, delta.data(),
                    options.trace_msa ? &out.msa_trace.back() : nullptr);
    for (int64_t i = 0; i < T * H; ++i) h[i] += delta[i];
    cpu::rms_norm_gemma(h.data(), normed.data(), T, H, L.post_norm.data(), c.rms_norm_eps);
    if (options.trace_moe) out.moe_trace.emplace_back(c.moe[l] ? T : 0);
    ffn_block(l, normed.data(), T, delta.data(), options.trace_moe ? &out.moe_trace.back() : nullptr);
    for (int64_t i = 0; i < T * H; ++i) h[i] += delta[i];
    trace();
  }

  const int64_t R = static_cast<int64_t>(logit_rows.size());
  std::vector<float> last(R * H);
  for (int64_t r = 0; r < R; ++r) std::copy_n(h.data() + logit_rows[r] * H, H, last.data() + r * H);
  cpu::rms_norm_gemma(last.data(), last.data(), R, H, w_.final_norm.data(), c.rms_norm_eps);
  out.vocab = c.vocab_size;
  lm_head(last.data(), R, &out.logits);
  return out;
}

}  // namespace m3
