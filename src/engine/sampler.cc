// Sampling: logit adjustments first (bias, penalties, bans), then filters on the softmax of logits /
// temperature in the order top-k, top-p, min-p (vLLM's order), then one draw from the renormalised
// distribution.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace m3 {

bool needs_adjustment(const SamplingParams& p) {
  return !p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

void adjust_logits(std::span<float> logits, const SamplingParams& p, const PenaltyState& st,
                   std::span<const int32_t> banned) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= 0 && id < vocab) logits[id] += bias;
  if (p.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t id) {
      if (id < 0 || id >= vocab) return;
      logits[id] = logits[id] > 0 ? logits[id] / p.repetition_penalty : logits[id] * p.repetition_penalty;
    };
    for (int32_t id : st.prompt_tokens)
      if (!st.output_counts.count(id)) penalise(id);
    for (const auto& [id, n] : st.output_counts) penalise(id);
  }
  for (const auto& [id, n] : st.output_counts) {
    if (id < 0 || id >= vocab) continue;
    logits[id] -= p.frequency_penalty * static_cast<float>(n) + (n > 0 ? p.presence_penalty : 0.0f);
  }
  for (int32_t id : banned)
    if (id >= 0 && id < vocab) logits[id] = -std::numeric_limits<float>::infinity();
}

TokenLogprobs compute_logprobs(const float* logits, int32_t vocab, int32_t chosen, int top_k) {
  float mx = logits[0];
  for (int32_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const float log_z = mx + static_cast<float>(std::log(sum));
  TokenLogprobs out;
  out.logprob = logits[chosen] - log_z;
  if (top_k > 0) {
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    const int k = std::min(top_k, vocab);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (int i = 0; i < k; ++i) out.top.push_back({ids[i], logits[ids[i]] - log_z});
  }
  return out;
}

int32_t sample_token(const float* logits, int32_t vocab, const SamplingParams& p, std::mt19937_64& rng) {
  if (p.temperature <= 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  int32_t keep = vocab;
  if (p.top_k > 0 && p.top_k < vocab) {
    keep = p.top_k;
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  } else {
    std::sort(ids.begin(), ids.end(), by_logit);
  }
  std::vector<double> probs(keep);
  const double mx = logits[ids[0]];
  double total = 0;
  for (int32_t i = 0; i < keep; ++i) total += probs[i] = std::exp((logits[ids[i]] - mx) / p.temperature);
  // top-p: smallest prefix (in descending probability) whose mass reaches top_p.
  if (p.top_p < 1.0f) {
    double mass = 0;
    for (int32_t i = 0; i < keep; ++i) {
      mass += probs[i] / total;
      if (mass >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * probs[0];
    int32_t k = 1;
    while (k < keep && probs[k] >= floor) ++k;
    keep = k;
  }
  double kept = 0;
  for (int32_t i = 0; i < keep; ++i) kept += probs[i];
  double r = std::uniform_real_distribution<double>(0.0, kept)(rng);
  for (int32_t i = 0; i < keep; ++i) {
    r -= probs[i];
    if (r < 0) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace m3
