// Token sampling from one row of logits: greedy (temperature 0) or temperature + top-k + top-p + min-p,
// seeded per request so a seeded request gives the same tokens whatever else is in the batch.
#pragma once

#include <cstdint>
#include <random>

namespace m3 {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  int top_k = 0;             // <= 0: off
  float min_p = 0.0f;        // [0, 1]
};

// Greedy picks the lowest id among equal maxima.
int32_t sample_token(const float* logits, int32_t vocab, const SamplingParams& params, std::mt19937_64& rng);

}  // namespace m3
