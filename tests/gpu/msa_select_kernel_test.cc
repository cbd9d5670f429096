// The MSA selection kernel against the CPU rule (select_blocks) on fresh random scores, with ties, NaNs,
// positions on and off page boundaries and every count of visible blocks up to 300.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>

#include "gpu/gpu_util.h"
#include "kernels/kernels.h"
#include "model/msa_selection.h"

namespace m3 {
namespace {

TEST(MsaSelectKernel, MatchesCpuRule) {
  M3_REQUIRE_GPU();
  const int heads = 4, topk = 16, page = 128, T = 300;
  std::mt19937 rng(7);
  std::normal_distribution<float> n;
  std::vector<int32_t> pos(T), seq(T, 0), table(1);
  for (int t = 0; t < T; ++t) pos[t] = t * page + int(rng() % page);  // token t sees t + 1 blocks
  const int stride = pos.back() / page + 1;
  std::vector<float> scores(size_t(T) * heads * stride);
  for (auto& s : scores) s = std::round(n(rng) * 4) / 4;  // coarse values: many ties
  for (int i = 0; i < 50; ++i) scores[rng() % scores.size()] = NAN;
  float* d_scores;
  int32_t *d_pos, *d_seq, *d_table, *d_sel;
  cudaMalloc(&d_scores, scores.size() * 4);
  cudaMalloc(&d_pos, T * 4);
  cudaMalloc(&d_seq, T * 4);
  cudaMalloc(&d_table, 4);
  cudaMalloc(&d_sel, size_t(T) * heads * topk * 4);
  cudaMemcpy(d_scores, scores.data(), scores.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_pos, pos.data(), T * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_seq, seq.data(), T * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_table, table.data(), 4, cudaMemcpyHostToDevice);
  cudaMemset(d_sel, 0x7f, size_t(T) * heads * topk * 4);  // poison
  cuda::TokenMeta meta{d_seq, d_pos, d_table, 1};
  cuda::msa_select(d_scores, meta, T, heads, stride, page, topk, 1, 0, d_sel, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<int32_t> sel(size_t(T) * heads * topk);
  cudaMemcpy(sel.data(), d_sel, sel.size() * 4, cudaMemcpyDeviceToHost);
  MsaConfig msa;
  msa.block_size = page;
  msa.topk_blocks = topk;
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < heads; ++g) {
      std::vector<int32_t> want;
      select_blocks(&scores[(size_t(t) * heads + g) * stride], pos[t] / page, msa, &want);
      std::vector<int32_t> got;
      for (int i = 0; i < topk; ++i)
        if (int32_t b = sel[(size_t(t) * heads + g) * topk + i]; b >= 0) got.push_back(b);
      ASSERT_EQ(got, want) << "token " << t << " group " << g;
    }
  cudaFree(d_scores), cudaFree(d_pos), cudaFree(d_seq), cudaFree(d_table), cudaFree(d_sel);
}

}  // namespace
}  // namespace m3
