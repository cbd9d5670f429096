// The vision tower's fused attention kernel against a double-precision reference on the host, at the released
// head_dim (80) and the tiny fixtures' (16): lengths around the 64-row tiles (one partial tile, several, a
// partial last one), several heads, q / k / v rows wider than the heads (as the fused q|k|v buffer is).
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cmath>
#include <random>
#include <vector>

#include "gpu_util.h"
#include "kernels/vision.h"

namespace {

struct Case {
  int len, heads, d;
};

class VisionFlashAttention : public ::testing::TestWithParam<Case> {};

TEST_P(VisionFlashAttention, MatchesTheReference) {
  M3_REQUIRE_GPU();
  const auto [len, heads, d] = GetParam();
  const int hv = heads * d, ldqk = hv, ldv = 3 * hv, ldo = hv;
  ASSERT_TRUE(m3::cuda::vision_flash_attention_supported(d, ldqk, ldv, ldo));
  std::mt19937 rng(len * 131 + d);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto fill = [&](size_t n, float scale) {
    std::vector<__nv_bfloat16> v(n);
    for (auto& x : v) x = __float2bfloat16(dist(rng) * scale);
    return v;
  };
  const std::vector<__nv_bfloat16> q = fill(size_t(len) * ldqk, 1.5f), k = fill(size_t(len) * ldqk, 1.5f),
                                   v = fill(size_t(len) * ldv, 1.0f);
  __nv_bfloat16 *dq, *dk, *dv;
  float* dout;
  ASSERT_EQ(cudaMalloc(&dq, q.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dk, k.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dv, v.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, size_t(len) * ldo * 4), cudaSuccess);
  cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(dout, 0xff, size_t(len) * ldo * 4);  // NaNs where nothing is written
  m3::cuda::vision_flash_attention(dq, dk, ldqk, dv, ldv, len, heads, d, dout, ldo, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> out(size_t(len) * ldo);
  cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
  cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout);

  auto f = [](__nv_bfloat16 x) { return double(__bfloat162float(x)); };
  double worst = 0, scale_sum = 0;
  std::vector<double> s(len), o(d);
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < len; ++i) {
      double mx = -1e300;
      for (int j = 0; j < len; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c)
          dot += f(q[size_t(i) * ldqk + h * d + c]) * f(k[size_t(j) * ldqk + h * d + c]);
        s[j] = dot / std::sqrt(double(d));
        mx = std::max(mx, s[j]);
      }
      double z = 0;
      for (int j = 0; j < len; ++j) z += (s[j] = std::exp(s[j] - mx));
      std::fill(o.begin(), o.end(), 0.0);
      for (int j = 0; j < len; ++j)
        for (int c = 0; c < d; ++c) o[c] += s[j] / z * f(v[size_t(j) * ldv + h * d + c]);
      for (int c = 0; c < d; ++c) {
        const double got = out[size_t(i) * ldo + h * d + c];
        ASSERT_TRUE(std::isfinite(got)) << "row " << i << " head " << h << " col " << c;
        worst = std::max(worst, std::abs(got - o[c]));
        scale_sum += std::abs(o[c]);
      }
    }
  }
  // Values are ~N(0, 1); bf16 probabilities in the P V product cost a few thousandths. A wrong softmax, tile
  // or row would be off by tenths.
  const double mean = scale_sum / (double(len) * heads * d);
  EXPECT_LT(worst, 1e-2) << "worst " << worst << ", mean |out| " << mean;
}

INSTANTIATE_TEST_SUITE_P(Shapes, VisionFlashAttention,
                         ::testing::Values(Case{37, 2, 80}, Case{64, 1, 80}, Case{200, 3, 80},
                                           Case{130, 2, 16}, Case{257, 2, 16}),
                         [](const auto& i) {
                           return "len" + std::to_string(i.param.len) + "_heads" +
                                  std::to_string(i.param.heads) + "_d" + std::to_string(i.param.d);
                         });

}  // namespace
