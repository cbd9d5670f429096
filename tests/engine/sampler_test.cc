// Sampling: greedy, the filters and their ties, the ascending-id draw, the adjustment list against the
// per-id formula, the counter-based random source, the shared exp, and the distribution actually drawn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "common/error.h"
#include "engine/sampler.h"

namespace m3 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams greedy_params() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

// Ids drawn for u on a fine grid over [0, 1).
std::set<int32_t> drawn(const std::vector<float>& l, const SamplingParams& p, int steps = 2000) {
  std::set<int32_t> ids;
  for (int i = 0; i < steps; ++i)
    ids.insert(sample_token(l.data(), static_cast<int32_t>(l.size()), p, (i + 0.5) / steps));
  return ids;
}

TEST(Sampler, GreedyPicksTheLowestIdAmongMaxima) {
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(sample_token(l.data(), 4, greedy_params(), 0.9), 1);
  std::vector<float> zeros = {-kInf, -0.0f, 0.0f, -1.0f};  // -0 == +0: the lower id
  EXPECT_EQ(sample_token(zeros.data(), 4, greedy_params(), 0.9), 1);
  std::vector<float> nan = {1.0f, std::nanf(""), 0.5f};  // NaN ranks as -inf
  EXPECT_EQ(sample_token(nan.data(), 3, greedy_params(), 0.9), 0);
  std::vector<float> banned = {-kInf, -kInf, -kInf};  // no finite maximum: greedy, whatever the temperature
  EXPECT_EQ(sample_token(banned.data(), 3, SamplingParams{}, 0.9), 0);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  std::vector<float> l = {0.1f, 2.0f, 1.9f, -1.0f};
  SamplingParams k1;
  k1.top_k = 1;
  SamplingParams p0;
  p0.top_p = 1e-6f;
  EXPECT_EQ(drawn(l, k1), std::set<int32_t>{1});
  EXPECT_EQ(drawn(l, p0), std::set<int32_t>{1});
}

TEST(Sampler, TheDrawWalksKeptIdsInAscendingOrder) {
  // p = {1/3, 1} (relative to the maximum): id 0 owns r in [0, 1/3), id 1 owns [1/3, 4/3), i.e. u < 1/4 -> 0.
  std::vector<float> l = {-std::log(3.0f), 0.0f};
  SamplingParams p;
  EXPECT_EQ(sample_token(l.data(), 2, p, 0.0), 0);
  EXPECT_EQ(sample_token(l.data(), 2, p, 0.2499), 0);
  EXPECT_EQ(sample_token(l.data(), 2, p, 0.2501), 1);
  EXPECT_EQ(sample_token(l.data(), 2, p, 0.9999), 1);
  // Equal logits split [0, 1) into equal intervals in id order; filtered ids take no share.
  std::vector<float> flat = {1.0f, -kInf, 1.0f, 1.0f, 1.0f};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(sample_token(flat.data(), 5, p, (i + 0.5) / 4), i == 0 ? 0 : i + 1) << i;
}

TEST(Sampler, DrawsFollowTheSoftmax) {
  // softmax([0, ln 3]) = [0.25, 0.75]; at temperature 2 it is [1/(1+sqrt 3), sqrt 3/(1+sqrt 3)].
  std::vector<float> l = {0.0f, std::log(3.0f)};
  SamplingParams p;
  const int n = 20000;
  int ones = 0;
  for (int i = 0; i < n; ++i) ones += sample_token(l.data(), 2, p, sample_uniform(3, i));
  EXPECT_NEAR(ones / double(n), 0.75, 0.015);
  p.temperature = 2.0f;
  ones = 0;
  for (int i = 0; i < n; ++i) ones += sample_token(l.data(), 2, p, sample_uniform(4, i));
  EXPECT_NEAR(ones / double(n), std::sqrt(3.0) / (1 + std::sqrt(3.0)), 0.015);
}

TEST(Sampler, MinPAndTopKFilterTheTail) {
  std::vector<float> l = {5.0f, 4.9f, 0.0f, -1.0f, 4.8f};
  SamplingParams p;
  p.min_p = 0.5f;  // only tokens with at least half the top probability survive: 0, 1, 4
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{0, 1, 4}));
  SamplingParams k;
  k.top_k = 2;
  EXPECT_EQ(drawn(l, k), (std::set<int32_t>{0, 1}));
  // min_p compares p_i = exp(l_i - max) (in double) with min_p itself: the largest float <= p_1 keeps id 1,
  // the next float drops it.
  std::vector<float> q = {0.0f, -std::log(4.0f)};
  const double p1 = token_probability(q[1], 0.0f, 1.0f);
  p.min_p = static_cast<float>(p1);
  if (p.min_p > p1) p.min_p = std::nextafter(p.min_p, 0.0f);
  EXPECT_EQ(drawn(q, p), (std::set<int32_t>{0, 1}));
  p.min_p = std::nextafter(p.min_p, 1.0f);
  EXPECT_EQ(drawn(q, p), std::set<int32_t>{0});
}

TEST(Sampler, TiesAtTheTopKThresholdKeepTheLowerIds) {
  std::vector<float> l = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f, 2.0f};
  SamplingParams p;
  p.top_k = 2;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2}));
  p.top_k = 4;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2, 3, 5}));
  p.top_k = 5;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{0, 1, 2, 3, 5}));
}

TEST(Sampler, TiesAtTheTopPThresholdKeepTheLowerIds) {
  // Four equal ids, then a small one: top-p 0.5 of the mass needs two of the four, lowest ids first.
  std::vector<float> l = {-20.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  SamplingParams p;
  p.top_p = 0.45f;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2}));
  p.top_p = 0.55f;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2, 3}));
  // Top-p is relative to the top-k mass: with top-k 2 the pair is the whole mass, and 0.55 keeps both.
  p.top_k = 2;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2}));
  p.top_p = 0.45f;
  EXPECT_EQ(drawn(l, p), std::set<int32_t>{1});
}

TEST(Sampler, MarginsSayHowCloseTheDrawWasToABoundary) {
  std::vector<float> l = {0.0f, 0.0f};  // p = {1, 1}: the boundary is r = 1, u = 0.5
  SampleMargins far, near;
  sample_token(l.data(), 2, sampling_row(SamplingParams{}, 0.25), &far);
  EXPECT_NEAR(far.draw, 0.25, 1e-12);
  EXPECT_TRUE(std::isinf(far.top_p));
  EXPECT_EQ(sample_token(l.data(), 2, sampling_row(SamplingParams{}, 0.5), &near), 1);
  EXPECT_EQ(near.draw, 0.0);
}

TEST(Sampler, SameDrawSameToken) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = std::sin(i * 1.3f);
  SamplingParams p;
  p.top_p = 0.9f;
  for (int i = 0; i < 100; ++i) {
    const double u = sample_uniform(42, i);
    EXPECT_EQ(sample_token(l.data(), 50, p, u), sample_token(l.data(), 50, p, u));
  }
}

TEST(SamplerRandom, CounterDrawsAreDeterministicAndUniform) {
  EXPECT_EQ(sample_uniform(7, 3), sample_uniform(7, 3));
  EXPECT_NE(sample_uniform(7, 3), sample_uniform(7, 4));
  EXPECT_NE(sample_uniform(7, 3), sample_uniform(8, 3));
  // Chi-square over 100 bins (99 degrees of freedom; 180 is p ~ 1e-6): along one stream, and across
  // consecutive seeds (the n > 1 choices of one request) at a fixed counter.
  auto chi2 = [](auto draw) {
    const int bins = 100, n = 200000;
    std::vector<int> count(bins, 0);
    for (int i = 0; i < n; ++i) {
      const double u = draw(i);
      EXPECT_TRUE(u >= 0.0 && u < 1.0) << u;
      ++count[static_cast<int>(u * bins)];
    }
    double x = 0;
    for (int c : count) x += (c - n / bins) * double(c - n / bins) / (n / bins);
    return x;
  };
  EXPECT_LT(chi2([](int i) { return sample_uniform(12345, i); }), 180.0);
  EXPECT_LT(chi2([](int i) { return sample_uniform(1000 + i, 0); }), 180.0);
  EXPECT_LT(chi2([](int i) { return sample_uniform(uint64_t(i) << 40, 17); }), 180.0);
  // Seeds s and s + 1 are unrelated: their draws at the same counter fill a 10 x 10 grid evenly.
  std::vector<int> grid(100, 0);
  const int n = 100000;
  for (int i = 0; i < n; ++i)
    ++grid[int(sample_uniform(5000 + i, 9) * 10) * 10 + int(sample_uniform(5001 + i, 9) * 10)];
  double x = 0;
  for (int c : grid) x += (c - n / 100) * double(c - n / 100) / (n / 100);
  EXPECT_LT(x, 180.0);
}

TEST(SamplerMath, ExpMatchesStdExp) {
  EXPECT_EQ(exp_nonpositive(0.0), 1.0);
  EXPECT_EQ(exp_nonpositive(-0.0), 1.0);
  EXPECT_EQ(exp_nonpositive(-708.5), 0.0);
  EXPECT_EQ(exp_nonpositive(-std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_EQ(exp_nonpositive(std::nan("")), 0.0);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> wide(-708.0, 0.0), narrow(-2.0, 0.0);
  double worst = 0, at = 0;
  for (int i = 0; i < 200000; ++i) {
    const double x = i % 2 ? wide(rng) : narrow(rng);
    const double err = std::abs(exp_nonpositive(x) - std::exp(x)) / std::exp(x);
    if (err > worst) worst = err, at = x;
  }
  EXPECT_LT(worst, 4.5e-16) << "at x = " << at;  // about 2 ulp
}

TEST(SamplerMath, SortKeyOrdersLikeTheFloats) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> v = {0.0f, -0.0f, kInf, -kInf, 1e-45f, -1e-45f, 1.0f, -1.0f};
  for (int i = 0; i < 2000; ++i) {
    const uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  for (float a : v)
    for (size_t j = 0; j < 40; ++j) {
      const float b = v[j];
      EXPECT_EQ(sort_key(a) < sort_key(b), a < b) << a << " " << b;
      EXPECT_EQ(sort_key(a) == sort_key(b), a == b) << a << " " << b;
    }
  EXPECT_EQ(sort_key(std::nanf("")), sort_key(-kInf));
  EXPECT_EQ(key_logit(sort_key(-0.0f)), 0.0f);
  EXPECT_EQ(key_logit(sort_key(-3.5f)), -3.5f);
}

}  // namespace
}  // namespace m3

namespace m3 {
namespace {

// The adjustments as the engine applied them before the entry list: loops over each source in turn.
void adjust_directly(std::vector<float>& logits, const SamplingParams& p, const PenaltyState& st,
                     const std::vector<int32_t>& banned) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= 0 && id < vocab) logits[id] += bias;
  if (p.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t id) {
      logits[id] = logits[id] > 0 ? logits[id] / p.repetition_penalty : logits[id] * p.repetition_penalty;
    };
    for (int32_t id : st.prompt_tokens)
      if (!st.output_counts.count(id)) penalise(id);
    for (const auto& [id, n] : st.output_counts) penalise(id);
  }
  for (const auto& [id, n] : st.output_counts) {
    const float sub = p.frequency_penalty * static_cast<float>(n);
    logits[id] -= sub + p.presence_penalty;
  }
  for (int32_t id : banned)
    if (id >= 0 && id < vocab) logits[id] = -kInf;
}

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

TEST(SamplerAdjust, TheEntryListMatchesThePerSourceLoops) {
  std::mt19937 rng(11);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  std::uniform_int_distribution<int32_t> id(-2, 299);  // a few ids outside [0, 300) are dropped
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t vocab = 300;
    SamplingParams p;
    p.repetition_penalty = trial % 3 ? 0.5f + 2 * unit(rng) : 1.0f;
    p.presence_penalty = trial % 4 ? 4 * unit(rng) - 2 : 0.0f;
    p.frequency_penalty = trial % 5 ? 4 * unit(rng) - 2 : 0.0f;
    PenaltyState st;
    std::vector<int32_t> banned;
    for (int i = 0; i < 40; ++i) {
      if (unit(rng) < 0.3f) p.logit_bias[id(rng)] = 200 * unit(rng) - 100;
      const int32_t a = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
      if (unit(rng) < 0.5f) st.prompt_tokens.push_back(a);
      if (unit(rng) < 0.4f) st.output_counts[a] += 1 + int(unit(rng) * 5);
      if (unit(rng) < 0.05f) banned.push_back(id(rng));
    }
    std::sort(st.prompt_tokens.begin(), st.prompt_tokens.end());
    st.prompt_tokens.erase(std::unique(st.prompt_tokens.begin(), st.prompt_tokens.end()),
                           st.prompt_tokens.end());
    std::erase_if(p.logit_bias, [&](const auto& kv) { return kv.first < 0 || kv.first >= vocab; });
    std::vector<float> want(vocab);
    for (float& x : want) x = logit(rng);
    std::vector<float> got = want;
    if (needs_adjustment(p) || !banned.empty()) adjust_directly(want, p, st, banned);
    const std::vector<LogitAdjustment> entries = logit_adjustments(p, st, banned, vocab);
    for (size_t i = 1; i < entries.size(); ++i)
      ASSERT_LT(entries[i - 1].id, entries[i].id) << "sorted, merged";
    for (const LogitAdjustment& e : entries) ASSERT_TRUE(e.id >= 0 && e.id < vocab);
    apply_logit_adjustments(got, entries, penalties_of(p));
    for (int32_t i = 0; i < vocab; ++i)
      ASSERT_EQ(got[i], want[i]) << "trial " << trial << " id " << i;  // -0 == +0; otherwise bit-exact
  }
}

TEST(SamplerAdjust, OneEntryPerIdCarriesEverySource) {
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  p.logit_bias = {{4, 2.0f}, {9, -1.0f}};
  PenaltyState st;
  st.prompt_tokens = {1, 4};
  st.output_counts = {{4, 3}, {7, 1}};
  std::vector<int32_t> banned = {9, 4, 4};
  const auto e = logit_adjustments(p, st, banned, 10);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].id, 1);
  EXPECT_TRUE(e[0].in_prompt && !e[0].banned && e[0].output_count == 0 && e[0].bias == 0.0f);
  EXPECT_EQ(e[1].id, 4);
  EXPECT_TRUE(e[1].in_prompt && e[1].banned && e[1].output_count == 3 && e[1].bias == 2.0f);
  EXPECT_EQ(e[2].id, 7);
  EXPECT_EQ(e[2].output_count, 1);
  EXPECT_EQ(e[3].id, 9);
  EXPECT_TRUE(e[3].banned && e[3].bias == -1.0f && !e[3].in_prompt);
  // Nothing to adjust: no entries. Without penalties, output counts are left out.
  EXPECT_TRUE(logit_adjustments(SamplingParams{}, st, {}, 10).empty());
}

TEST(SamplerRows, SampleRowsAppliesEachRowsEntriesThenSamples) {
  const int32_t vocab = 64;
  std::vector<float> logits(3 * vocab);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::cos(0.37f * i) * 3;
  std::vector<LogitAdjustment> entries(2);
  entries[0].id = 5, entries[0].bias = 100.0f;  // row 1: id 5 wins greedily
  entries[1].id = 7, entries[1].banned = 1;     // row 2
  std::vector<SamplingRow> rows(3);
  rows[0].temperature = 0;
  rows[1].temperature = 0, rows[1].adj_begin = 0, rows[1].adj_end = 1;
  rows[2].u = 0.3, rows[2].adj_begin = 1, rows[2].adj_end = 2;
  std::vector<float> expect = logits;
  std::vector<int32_t> want;
  for (int r = 0; r < 3; ++r) {
    float* l = expect.data() + r * vocab;
    if (r == 1) l[5] += 100.0f;
    if (r == 2) l[7] = -kInf;
    want.push_back(sample_token(l, vocab, rows[r]));
  }
  EXPECT_EQ(want[1], 5);
  EXPECT_EQ(sample_rows(logits, vocab, rows, entries), want);
  EXPECT_EQ(logits, expect) << "the entries are applied in place";
  rows[2].adj_end = 3;
  EXPECT_THROW(sample_rows(logits, vocab, rows, entries), Error);
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
