// Exact-value checks of the CPU primitives against spec §6.1 (SwiGLU-OAI, RoPE, Gemma RMSNorm).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/cpu_ops.h"
#include "model/rope.h"

namespace m3 {
namespace {

TEST(SwigluOai, SpecValues) {
  struct Case {
    float g, u;
    double want;
  };
  const Case cases[] = {{0, 0, 0},
                        {1, 1, 1.6915915318656},
                        {1, -2, -0.8457957659328},
                        {0.5, 1, 0.7007768732128},
                        {10, 10, 55.99962502643},
                        {-3, -8, 0.10842785824672},
                        {-10, -10, 2.4347767769e-6}};
  for (const Case& c : cases) {
    float got = cpu::swiglu_oai(c.g, c.u, 1.702f, 7.0f);
    EXPECT_NEAR(got, c.want, 1e-6 * std::max(1.0, std::fabs(c.want))) << "g=" << c.g << " u=" << c.u;
  }
  // The gate is clamped from above only; (10, 10) equals (10, 8) because up is clamped at 7.
  EXPECT_EQ(cpu::swiglu_oai(10, 10, 1.702f, 7.0f), cpu::swiglu_oai(10, 8, 1.702f, 7.0f));
}

TEST(Rope, FrequenciesOfTheReleasedModel) {
  Rope rope(64, 5e6);
  ASSERT_EQ(rope.inv_freq().size(), 32u);
  EXPECT_FLOAT_EQ(rope.inv_freq()[0], 1.0f);
  EXPECT_NEAR(rope.inv_freq()[1], 0.6175287581, 1e-7);
  EXPECT_NEAR(rope.inv_freq()[31], 3.2387e-7, 1e-10);
}

TEST(Rope, PositionZeroIsIdentityAndPairsRotate) {
  Rope rope(64, 5e6);
  std::mt19937 rng(1);
  std::normal_distribution<float> n;
  std::vector<float> x(128), y;
  for (float& v : x) v = n(rng);
  std::vector<float> c(32), s(32);
  rope.angles(0, c.data(), s.data());
  y = x;
  rope.apply(y.data(), c.data(), s.data());
  EXPECT_EQ(x, y);

  rope.angles(12345, c.data(), s.data());
  y = x;
  rope.apply(y.data(), c.data(), s.data());
  for (int i = 64; i < 128; ++i) EXPECT_EQ(y[i], x[i]) << "dims past rotary_dim pass through";
  for (int i = 0; i < 32; ++i) {  // each (i, i+32) pair keeps its norm and turns by p * inv_freq[i]
    double before = std::hypot(x[i], x[i + 32]), after = std::hypot(y[i], y[i + 32]);
    EXPECT_NEAR(after, before, 1e-5 * before);
    double turn = std::atan2(y[i + 32], y[i]) - std::atan2(x[i + 32], x[i]);
    double want = std::fmod(double(float(12345.0f * rope.inv_freq()[i])), 2 * M_PI);
    EXPECT_NEAR(std::remainder(turn - want, 2 * M_PI), 0.0, 1e-4);
  }
}

TEST(RmsNorm, GemmaWithZeroWeightIsPlainRms) {
  std::vector<float> x = {1, -2, 3, -4}, w(4, 0.0f), y(4);
  cpu::rms_norm_gemma(x.data(), y.data(), 1, 4, w.data(), 1e-6f);
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] / rms, 1e-6);
  std::vector<float> w2 = {0.5f, 0.5f, 0.5f, 0.5f};
  cpu::rms_norm_gemma(x.data(), y.data(), 1, 4, w2.data(), 1e-6f);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], 1.5 * x[i] / rms, 1e-6) << "scale is (1 + w)";
}

TEST(Matmul, MatchesDoubleReferenceOnRandomData) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n;
  const int T = 5, K = 37, N = 11;
  std::vector<float> x(T * K), w(N * K), y(T * N);
  for (float& v : x) v = n(rng);
  for (float& v : w) v = n(rng);
  cpu::matmul(x.data(), T, K, w.data(), N, y.data());
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < N; ++o) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += double(x[t * K + k]) * w[o * K + k];
      EXPECT_NEAR(y[t * N + o], ref, 1e-5 * (1 + std::fabs(ref)));
    }
}

}  // namespace
}  // namespace m3
