// Sampling: greedy, filters, seeded reproducibility and the distribution actually drawn.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/sampler.h"

namespace m3 {
namespace {

TEST(Sampler, GreedyPicksTheLowestIdAmongMaxima) {
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
  std::mt19937_64 rng(1);
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(sample_token(l.data(), 4, p, rng), 1);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  std::vector<float> l = {0.1f, 2.0f, 1.9f, -1.0f};
  std::mt19937_64 rng(2);
  SamplingParams k1;
  k1.top_k = 1;
  SamplingParams p0;
  p0.top_p = 1e-6f;
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(sample_token(l.data(), 4, k1, rng), 1);
    EXPECT_EQ(sample_token(l.data(), 4, p0, rng), 1);
  }
}

TEST(Sampler, DrawsFollowTheSoftmax) {
  // softmax([0, ln 3]) = [0.25, 0.75]; at temperature 2 it is [1/(1+sqrt 3), sqrt 3/(1+sqrt 3)].
  std::vector<float> l = {0.0f, std::log(3.0f)};
  std::mt19937_64 rng(3);
  SamplingParams p;
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += sample_token(l.data(), 2, p, rng);
  EXPECT_NEAR(ones / double(n), 0.75, 0.015);
  p.temperature = 2.0f;
  ones = 0;
  for (int i = 0; i < n; ++i) ones += sample_token(l.data(), 2, p, rng);
  EXPECT_NEAR(ones / double(n), std::sqrt(3.0) / (1 + std::sqrt(3.0)), 0.015);
}

TEST(Sampler, MinPAndTopKFilterTheTail) {
  std::vector<float> l = {5.0f, 4.9f, 0.0f, -1.0f, 4.8f};
  std::mt19937_64 rng(4);
  SamplingParams p;
  p.min_p = 0.5f;  // only tokens with at least half the top probability survive: 0, 1, 4
  SamplingParams k;
  k.top_k = 2;
  for (int i = 0; i < 300; ++i) {
    int32_t t = sample_token(l.data(), 5, p, rng);
    EXPECT_TRUE(t == 0 || t == 1 || t == 4) << t;
    int32_t u = sample_token(l.data(), 5, k, rng);
    EXPECT_TRUE(u == 0 || u == 1) << u;
  }
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = std::sin(i * 1.3f);
  SamplingParams p;
  p.top_p = 0.9f;
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sample_token(l.data(), 50, p, a), sample_token(l.data(), 50, p, b));
}

}  // namespace
}  // namespace m3

namespace m3 {
namespace {

TEST(SamplerAdjust, PenaltiesBiasAndBans) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.logit_bias = {{3, 10.0f}};
  PenaltyState st;
  st.prompt_tokens = {0, 1};
  st.output_counts = {{2, 2}};
  std::vector<int32_t> banned = {3};
  adjust_logits(l, p, st, banned);
  EXPECT_FLOAT_EQ(l[0], 1.0f);                // prompt token, positive: divided
  EXPECT_FLOAT_EQ(l[1], -4.0f);               // prompt token, negative: multiplied
  EXPECT_FLOAT_EQ(l[2], 0.5f - 0.5f - 0.5f);  // generated twice: /2, presence 0.5, frequency 2 x 0.25
  EXPECT_TRUE(std::isinf(l[3]) && l[3] < 0);  // banned even with a bias
}

TEST(SamplerLogprobs, AreLogSoftmaxOfTheRawLogits) {
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  TokenLogprobs lp = compute_logprobs(l.data(), 3, 0, 2);
  const double z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(lp.logprob, 1.0 - z, 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 2);
  EXPECT_NEAR(lp.top[0].second, 3.0 - z, 1e-6);
  EXPECT_EQ(lp.top[1].first, 1);
}

}  // namespace
}  // namespace m3
