// The paged attention kernel against a double-precision CPU computation on fresh random inputs: head_dim 32,
// 64 and 128 (the released model's), dense and block-sparse, a prefill chunk that crosses page boundaries,
// shuffled page ids, ragged selections (fewer blocks than top-k, -1 padding) and an output poisoned
// beforehand.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "gpu/gpu_util.h"
#include "kernels/kernels.h"

namespace m3 {
namespace {

using cuda::bf16;

struct Case {
  int dim;
  bool sparse;
};

class AttentionKernel : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionKernel, MatchesCpuReference) {
  M3_REQUIRE_GPU();
  const int D = GetParam().dim, Hq = 16, Hkv = 2, page = 128, len = 700, T = 300, topk = 3;
  const bool sparse = GetParam().sparse;
  const int pages = (len + page - 1) / page;
  std::mt19937 rng(D * 10 + sparse);
  std::normal_distribution<float> n;
  std::vector<int32_t> table(pages);
  for (int i = 0; i < pages; ++i) table[i] = i;
  std::shuffle(table.begin(), table.end(), rng);
  const size_t slots = size_t(pages) * page;
  std::vector<bf16> kc(slots * Hkv * D), vc(slots * Hkv * D);
  for (auto& x : kc) x = __float2bfloat16(n(rng));
  for (auto& x : vc) x = __float2bfloat16(n(rng));
  std::vector<float> q(size_t(T) * Hq * D);
  for (auto& x : q) x = n(rng);
  std::vector<int32_t> pos(T), seq(T, 0), sel(size_t(T) * Hkv * topk, -1);
  for (int t = 0; t < T; ++t) pos[t] = len - T + t;  // the last 300 tokens: crosses two page boundaries
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < Hkv; ++g) {  // the local block plus up to topk-1 distinct earlier ones, ascending
      const int L = pos[t] / page;
      std::vector<int32_t> s = {L};
      for (int b = 0; b < L && int(s.size()) < topk; ++b)
        if (rng() % 2) s.push_back(b);
      std::sort(s.begin(), s.end());
      std::copy(s.begin(), s.end(), sel.begin() + (size_t(t) * Hkv + g) * topk);
    }
  const float scale = 1.0f / std::sqrt(float(D));

  bf16 *d_k, *d_v;
  float *d_q, *d_out;
  int32_t *d_pos, *d_seq, *d_table, *d_sel;
  cudaMalloc(&d_k, kc.size() * 2), cudaMalloc(&d_v, vc.size() * 2), cudaMalloc(&d_q, q.size() * 4);
  cudaMalloc(&d_out, q.size() * 4), cudaMalloc(&d_pos, T * 4), cudaMalloc(&d_seq, T * 4);
  cudaMalloc(&d_table, pages * 4), cudaMalloc(&d_sel, sel.size() * 4);
  cudaMemcpy(d_k, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(d_v, vc.data(), vc.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(d_q, q.data(), q.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_pos, pos.data(), T * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_seq, seq.data(), T * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_table, table.data(), pages * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_sel, sel.data(), sel.size() * 4, cudaMemcpyHostToDevice);
  cudaMemset(d_out, 0xff, q.size() * 4);  // NaN poison: every element must be written
  cuda::TokenMeta meta{d_seq, d_pos, d_table, pages};
  cuda::paged_attention(d_q, d_k, d_v, meta, sparse ? d_sel : nullptr, topk, T, Hq, Hkv, D, page, scale,
                        d_out, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> out(q.size());
  cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost);

  double err = 0, ref_norm = 0;
  std::vector<double> s, acc(D);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < Hq; ++h) {
      const int g = h / (Hq / Hkv);
      std::vector<int> keys;
      for (int j = 0; j <= pos[t]; ++j) {
        bool allowed = !sparse;
        for (int k = 0; k < topk && sparse; ++k) allowed |= sel[(size_t(t) * Hkv + g) * topk + k] == j / page;
        if (allowed) keys.push_back(j);
      }
      s.assign(keys.size(), 0);
      double mx = -1e300;
      for (size_t i = 0; i < keys.size(); ++i) {
        const size_t base = ((size_t(table[keys[i] / page]) * page + keys[i] % page) * Hkv + g) * D;
        for (int d = 0; d < D; ++d)
          s[i] += double(q[(size_t(t) * Hq + h) * D + d]) * __bfloat162float(kc[base + d]);
        s[i] *= scale;
        mx = std::max(mx, s[i]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t i = 0; i < keys.size(); ++i) {
        const double p = std::exp(s[i] - mx);
        sum += p;
        const size_t base = ((size_t(table[keys[i] / page]) * page + keys[i] % page) * Hkv + g) * D;
        for (int d = 0; d < D; ++d) acc[d] += p * __bfloat162float(vc[base + d]);
      }
      for (int d = 0; d < D; ++d) {
        const double ref = acc[d] / sum, got = out[(size_t(t) * Hq + h) * D + d];
        ASSERT_FALSE(std::isnan(got)) << "unwritten output at token " << t << " head " << h;
        err += (got - ref) * (got - ref);
        ref_norm += ref * ref;
      }
    }
  EXPECT_LT(std::sqrt(err / ref_norm), 1e-5);
  cudaFree(d_k), cudaFree(d_v), cudaFree(d_q), cudaFree(d_out), cudaFree(d_pos), cudaFree(d_seq);
  cudaFree(d_table), cudaFree(d_sel);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernel,
                         ::testing::Values(Case{32, false}, Case{64, true}, Case{128, false},
                                           Case{128, true}),
                         [](const auto& info) {
                           return "dim" + std::to_string(info.param.dim) +
                                  (info.param.sparse ? "_sparse" : "_dense");
                         });

}  // namespace
}  // namespace m3
