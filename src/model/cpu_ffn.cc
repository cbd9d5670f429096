// FFN of the CPU backend: dense SwiGLU-OAI MLP, or MoE = fp32 sigmoid router with correction bias (for choice
// only), top-k renormalised over the unbiased scores, routed sum x routed_scaling_factor, plus the shared
// expert. Experts are applied in ascending id order, matching the reference's accumulation order. Every rank
// routes every token (the router is whole, so the ranks agree) and runs its columns of each expert (or, with
// expert parallelism, its own whole experts) and of the shared expert / dense MLP; the partial outputs are
// added over the ranks once per layer. With data-parallel attention the dense MLP and the shared expert run
// whole on the rank's own tokens, and the routed experts on every rank's tokens, gathered first; each rank
// then receives the sum over the ranks of its own rows.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/cpu_model.h"
#include "model/cpu_ops.h"

namespace m3 {

void CpuModel::mlp(const float* x, int64_t T, const std::vector<float>& gate, const std::vector<float>& up,
                   const std::vector<float>& down, int64_t inter, float* out) {
  const int64_t H = config_.hidden_size;
  std::vector<float> g(T * inter), u(T * inter);
  cpu::matmul(x, T, H, gate.data(), inter, g.data());
  cpu::matmul(x, T, H, up.data(), inter, u.data());
  cpu::swiglu_oai(g.data(), u.data(), g.data(), T * inter, config_.swiglu_alpha, config_.swiglu_limit);
  cpu::matmul(g.data(), T, inter, down.data(), H, out);
}

void CpuModel::moe(const CpuLayerWeights& w, const float* x_mine, int64_t T_mine, float* out_mine,
                   std::vector<std::vector<int32_t>>* trace) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  const int E = c.num_experts, K = c.experts_per_token;
  // The tokens the experts see: this rank's, or with data-parallel attention every rank's in rank order.
  const bool dp = shard_.dp_size > 1;
  std::vector<float> x_all, out_all;
  std::vector<size_t> bytes, counts;
  int64_t T = T_mine;
  const float* x = x_mine;
  float* out = out_mine;
  if (dp) {
    T = 0;
    for (size_t n : dp_tokens_) {
      bytes.push_back(n * H * sizeof(float));
      counts.push_back(n * H);
      T += int64_t(n);
    }
    x_all.resize(T * H);
    out_all.resize(T * H);
    comm_->all_gather_varying(x_mine, bytes, x_all.data());
    x = x_all.data();
    out = out_all.data();
  }

  std::vector<float> logits(T * E);
  cpu::matmul(x, T, H, w.router.data(), E, logits.data());
  // routed[e] lists (token, weight) pairs sent to expert e.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(E);
  std::vector<int> order(E);
  std::vector<float> score(E), choice(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-logits[t * E + e]));
      choice[e] = score[e] + w.router_bias[e];
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return choice[a] != choice[b] ? choice[a] > choice[b] : a < b; });
    float total = 0;
    for (int k = 0; k < K; ++k) total += score[order[k]];
    for (int k = 0; k < K; ++k) routed[order[k]].push_back({t, score[order[k]] / total});
    if (trace) {
      (*trace)[t].assign(order.begin(), order.begin() + K);
      std::sort((*trace)[t].begin(), (*trace)[t].end());
    }
  }

  for (int e = 0; e < E; ++e) expert_tokens_[e] += static_cast<int64_t>(routed[e].size());
  std::fill(out, out + T * H, 0.0f);
  const int64_t I = shard_.expert_intermediate.size();
  std::vector<float> xs, ys;
  for (int e = int(shard_.experts.begin); e < int(shard_.experts.end); ++e) {  // this rank's experts
    const auto& rows = routed[e];
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    xs.resize(n * H);
    ys.resize(n * H);
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + rows[i].first * H, H, xs.data() + i * H);
    mlp(xs.data(), n, w.expert_gate[e], w.expert_up[e], w.expert_down[e], I, ys.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t d = 0; d < H; ++d) out[rows[i].first * H + d] += ys[i * H + d] * rows[i].second;
  }
  if (dp) comm_->reduce_scatter_sum(out_all.data(), counts, out_mine);
  std::vector<float> shared(T_mine * H);
  mlp(x_mine, T_mine, w.shared_gate, w.shared_up, w.shared_down, shard_.shared_intermediate.size(),
      shared.data());
  for (int64_t i = 0; i < T_mine * H; ++i) out_mine[i] = out_mine[i] * c.routed_scaling_factor + shared[i];
}

void CpuModel::ffn_block(int l, const float* x, int64_t T, float* out,
                         std::vector<std::vector<int32_t>>* trace) {
  const CpuLayerWeights& w = w_.layers[l];
  if (config_.moe[l])
    moe(w, x, T, out, trace);
  else
    mlp(x, T, w.mlp_gate, w.mlp_up, w.mlp_down, shard_.dense_intermediate.size(), out);
  if (shard_.tp_size > 1) comm_->all_reduce_sum(out, T * config_.hidden_size);
}

}  // namespace m3
