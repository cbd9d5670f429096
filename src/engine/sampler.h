// Token sampling from one row of logits. The logits are first adjusted for the request (logit_bias,
// repetition / presence / frequency penalties, min_tokens masking), then sampled greedily (temperature 0) or
// with temperature + top-k + top-p + min-p, seeded per request so a seeded request gives the same tokens
// whatever else is in the batch. Log-probabilities are reported from the model's raw logits (vLLM's default).
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <vector>

namespace m3 {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  float top_p = 1.0f;               // (0, 1]
  int top_k = 0;                    // <= 0: off
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; tokens seen in prompt or output: logit / r if > 0 else logit * r
  float presence_penalty = 0.0f;    // [-2, 2]; minus p once for every token already generated
  float frequency_penalty = 0.0f;   // [-2, 2]; minus f x (times generated)
  std::map<int32_t, float> logit_bias;  // added to the logits, [-100, 100]
  int logprobs = -1;                    // -1: none; k >= 0: the chosen token's logprob and the top k
};

struct TokenLogprobs {
  float logprob = 0;                           // of the chosen token
  std::vector<std::pair<int32_t, float>> top;  // best first
};

// The state a request's penalties need: token counts of the prompt and of the output so far.
struct PenaltyState {
  std::map<int32_t, int> output_counts;
  std::vector<int32_t> prompt_tokens;  // sorted, unique
};

bool needs_adjustment(const SamplingParams& p);
// Applies logit_bias and penalties to `logits` in place; `banned` ids (EOS/stop ids before min_tokens) get
// -inf.
void adjust_logits(std::span<float> logits, const SamplingParams& p, const PenaltyState& state,
                   std::span<const int32_t> banned);

// Greedy picks the lowest id among equal maxima.
int32_t sample_token(const float* logits, int32_t vocab, const SamplingParams& params, std::mt19937_64& rng);

TokenLogprobs compute_logprobs(const float* logits, int32_t vocab, int32_t chosen, int top_k);

}  // namespace m3
