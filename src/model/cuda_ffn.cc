// FFN of the CUDA backend. Dense MLP: one fused gate/up GEMM, SwiGLU-OAI, down GEMM. MoE: fp32 router logits,
// routing and grouping by expert on the device (one launch for up to 32 tokens); small batches run every
// active expert (and the shared expert, as one more group when its width matches) through the grouped GEMV
// without a host sync; large batches read the expert loads back once and run one cuBLAS GEMM per non-empty
// expert over its compact rows. The combine sums experts in ascending id order, times routed_scaling_factor,
// plus the shared expert, as the reference does. With several ranks each runs its columns of every expert, or
// with expert parallelism its own whole experts (routing still covers all of them, and pairs of other ranks'
// experts are skipped); the caller sums the partial outputs over the ranks. With data-parallel attention the
// MoE layer exchanges tokens itself (moe_exchange).
#include <algorithm>
#include <string>

#include "model/cuda_model_impl.h"

namespace m3 {

void CudaModel::Impl::mlp(const bf16* x, int T, const Weight& w13, const Weight& w2, int inter, float* out,
                          const char* tag) {
  const int H = c.hidden_size;
  float* gu = buf<float>(std::string(tag) + ".gu", size_t(T) * 2 * inter);
  bf16* act = buf<bf16>(std::string(tag) + ".act", size_t(T) * inter);
  linear(x, T, H, w13, 2 * inter, gu);
  cuda::swiglu_interleaved(gu, T, inter, c.swiglu_alpha, c.swiglu_limit, act, stream);
  linear(act, T, inter, w2, H, out);
}

void CudaModel::Impl::shared_expert(const Layer& L, const bf16* x, int T, float* out) {
  const int H = c.hidden_size, I = expert_i, EL = int(shard.experts.size());
  if (shared_fused)
    mlp(x, T, L.exp_w13.rows(size_t(EL) * 2 * I, H), L.exp_w2.rows(size_t(EL) * H, I), I, out, "shared");
  else
    mlp(x, T, L.sh_w13, L.sh_w2, shared_i, out, "shared");
}

void CudaModel::Impl::moe_exchange(const Layer& L, const bf16* x, const float* x32, int T, float* out) {
  const int H = c.hidden_size, dp = shard.dp_size;
  int total = 0, widest = 0, first = 0;
  for (int r = 0; r < dp; ++r) {
    if (r == shard.dp_rank) first = total;
    total += dp_tokens[r];
    widest = std::max(widest, dp_tokens[r]);
  }
  if (dp_tokens[shard.dp_rank] != T) fail(ErrorKind::kInternal, "the MoE exchange's token counts disagree");
  // All-gather at the widest rank's size (NCCL gathers equal parts), then the rows packed in rank order. The
  // router reads the fp32 rows, the experts the bf16 ones: both travel.
  auto gather = [&]<typename V>(const V* mine, const char* tag) {
    V* send = buf<V>(std::string(tag) + ".send", size_t(widest) * H);
    V* padded = buf<V>(std::string(tag) + ".padded", size_t(dp) * widest * H);
    V* all = buf<V>(std::string(tag) + ".all", size_t(total) * H);
    M3_CUDA_CHECK(cudaMemcpyAsync(send, mine, size_t(T) * H * sizeof(V), cudaMemcpyDeviceToDevice, stream));
    nccl->all_gather(send, size_t(widest) * H * sizeof(V), padded, stream);
    for (int r = 0, at = 0; r < dp; at += dp_tokens[r++])
      M3_CUDA_CHECK(cudaMemcpyAsync(all + size_t(at) * H, padded + size_t(r) * widest * H,
                                    size_t(dp_tokens[r]) * H * sizeof(V), cudaMemcpyDeviceToDevice, stream));
    return static_cast<const V*>(all);
  };
  const float* all32 = gather(x32, "dp.x32");
  const bf16* all16 = gather(x, "dp.x");
  float* routed = buf<float>("dp.routed", size_t(total) * H);
  // The experts take the gathered rows in slices of the largest step one rank schedules, so the exchange
  // needs no more expert workspace than a TP step does (the memory plan profiles every rank's largest step at
  // once).
  const int slice = std::max(1, opt.max_num_batched_tokens);
  for (int a = 0; a < total; a += slice)
    moe(L, all16 + size_t(a) * H, all32 + size_t(a) * H, std::min(slice, total - a), routed + size_t(a) * H,
        false, nullptr);
  // The combine: every rank's partial sums of every row, summed (an all-reduce standing in for a
  // reduce-scatter), this rank's rows kept.
  nccl->all_reduce_sum(routed, size_t(total) * H, stream);
  M3_CUDA_CHECK(
      cudaMemcpyAsync(out, routed + size_t(first) * H, size_t(T) * H * 4, cudaMemcpyDeviceToDevice, stream));
  float* s = buf<float>("dp.shared", size_t(T) * H);
  shared_expert(L, x, T, s);
  cuda::add_inplace(out, s, int64_t(T) * H, stream);
}

void CudaModel::Impl::moe(const Layer& L, const bf16* x, const float* x32, int T, float* out,
                          bool with_shared, std::vector<std::vector<int32_t>>* trace) {
  const int H = c.hidden_size, E = c.num_experts, K = c.experts_per_token, I = expert_i;
  const cuda::ExpertRange local{int(shard.experts.begin), int(shard.experts.size())};
  const int EL = local.count;  // the experts held here
  const bool small = T <= kGemvMaxTokens;
  // The shared expert rides along as one more group while all tokens fit one GEMV pass (32); beyond that a
  // dense GEMM reads its weights once.
  const bool shared_group = with_shared && small && shared_fused && T <= 32;
  const int G = EL + (shared_group ? 1 : 0);
  float* logits = buf<float>("router", size_t(T) * E);
  int32_t* ids = buf<int32_t>("route.ids", size_t(T) * K);
  float* w = buf<float>("route.w", size_t(T) * K);
  int32_t* counts = buf<int32_t>("moe.counts", G);
  int32_t* offsets = buf<int32_t>("moe.offsets", G + 1);
  int32_t* rank = buf<int32_t>("moe.rank", size_t(T) * K);
  int32_t* slot_token = buf<int32_t>("moe.slot_token", size_t(T) * (K + 1));
  int32_t* active = buf<int32_t>("moe.active", G);
  if (T <= cuda::kRouteGroupMaxTokens && H % 32 == 0) {  // router, routing and grouping in one launch
    cuda::moe_route_group(x32, L.router, L.router_bias, T, H, E, K, local, shared_group, logits, ids, w,
                          counts, offsets, rank, slot_token, active, route_ticket, stream);
  } else {
    gemm_f32(x32, T, H, L.router, E, logits);
    cuda::moe_route(logits, L.router_bias, T, E, K, ids, w, stream);
    cuda::moe_group(ids, T, K, local, shared_group, counts, offsets, rank, slot_token, active, stream);
  }
  if (trace) {
    std::vector<int32_t> h(size_t(T) * K);
    M3_CUDA_CHECK(cudaMemcpyAsync(h.data(), ids, h.size() * 4, cudaMemcpyDeviceToHost, stream));
    M3_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int t = 0; t < T; ++t) {
      (*trace)[t].assign(h.begin() + size_t(t) * K, h.begin() + size_t(t + 1) * K);
      std::sort((*trace)[t].begin(), (*trace)[t].end());
    }
  }

  const float* shared = nullptr;
  if (with_shared && !shared_group) {
    float* s = buf<float>("moe.shared", size_t(T) * H);
    shared_expert(L, x, T, s);
    shared = s;
  }
  if (small) {
    const int slots = T * K + (shared_group ? T : 0);
    bf16* act = buf<bf16>("moe.act", size_t(slots) * I);
    float* y = buf<float>("moe.y", size_t(slots) * H);
    const int max_active = T * K + (shared_group ? 1 : 0);
    cuda::grouped_gemv(L.exp_w13.w, L.exp_w13.mx(), int64_t(2) * I * H, G, 2 * I, H, x, H, slot_token, counts,
                       offsets, active, max_active, T, true, c.swiglu_alpha, c.swiglu_limit, act, stream);
    cuda::grouped_gemv(L.exp_w2.w, L.exp_w2.mx(), int64_t(H) * I, G, H, I, act, I, nullptr, counts, offsets,
                       active, max_active, T, false, 0, 0, y, stream);
    cuda::moe_combine(y, ids, w, rank, offsets, T, K, H, c.routed_scaling_factor, shared, shared_group, local,
                      out, expert_tokens, stream);
    return;
  }
  // Large batch: one host read of the expert loads, then one GEMM per non-empty expert over its compact rows
  // (robust to skewed routing, unlike padding every expert to the largest load).
  std::vector<int32_t> hc(EL);
  M3_CUDA_CHECK(cudaMemcpyAsync(hc.data(), counts, EL * 4, cudaMemcpyDeviceToHost, stream));
  M3_CUDA_CHECK(cudaStreamSynchronize(stream));
  size_t slots = 0;  // the pairs routed to the experts held here
  for (int32_t n : hc) slots += size_t(n);
  const size_t cap = size_t(T) * K;  // every pair: the memory plan's bound, whatever the routing
  bf16* xs = buf<bf16>("moe.xs", cap * H);
  float* gu = buf<float>("moe.gu", cap * 2 * I);
  bf16* act = buf<bf16>("moe.act", cap * I);
  float* y = buf<float>("moe.y", cap * H);
  cuda::moe_gather(x, ids, rank, offsets, T, K, H, local, xs, stream);
  for (int e = 0, off = 0; e < EL; off += hc[e++])
    if (hc[e] > 0)
      linear(xs + size_t(off) * H, hc[e], H, L.exp_w13.rows(size_t(e) * 2 * I, H), 2 * I,
             gu + size_t(off) * 2 * I);
  cuda::swiglu_interleaved(gu, int64_t(slots), I, c.swiglu_alpha, c.swiglu_limit, act, stream);
  for (int e = 0, off = 0; e < EL; off += hc[e++])
    if (hc[e] > 0)
      linear(act + size_t(off) * I, hc[e], I, L.exp_w2.rows(size_t(e) * H, I), H, y + size_t(off) * H);
  cuda::moe_combine(y, ids, w, rank, offsets, T, K, H, c.routed_scaling_factor, shared, false, local, out,
                    expert_tokens, stream);
}

}  // namespace m3
