// Token sampling from one row of logits: the readable reference of the rule the CUDA kernel
// (kernels/sampling.h) follows bit for bit. Seeded per request through a counter-based draw
// (sample_uniform in common/sampling_math.h), so a seeded request gives the same tokens whatever else is in
// the batch and whichever device samples. Log-probabilities are reported from the raw logits (vLLM's
// default).
//
// The rule (vLLM's order):
//  1. adjust: each id of the row's adjustment list (logit_adjustments) gets adjust_logit: logit_bias, then
//     the repetition penalty (prompt or output ids), then frequency + presence (output ids), then bans
//     (EOS / stop ids before min_tokens) -> -inf.
//  2. order: descending logit, ties by ascending id (sort_key: -0 == +0, NaN as -inf).
//  3. greedy when temperature <= 0 (or the maximum is not finite): the first id of that order.
//  4. p_i = exp((l_i - max) / T) in double (token_probability; the maximum has p = 1).
//  5. top-k (0 < k < vocab): keep the first k ids of the order.
//  6. top-p (< 1): of those, keep the shortest prefix of the order whose mass reaches top_p x (their mass).
//  7. min-p (> 0): keep ids with p_i >= min_p (= min_p x p_max, as p_max = 1).
//  8. ids with p_i == 0 (banned, or more than 708 T below the maximum) are never kept.
//  9. draw: r = u x (kept mass); walk the kept ids in ASCENDING ID ORDER and return the first whose running
//     mass exceeds r (the last kept id if rounding leaves none). This walk order differs from the earlier
//     descending-probability walk on purpose: a GPU can follow it with one scan over ids and no sort.
// Masses are double sums; the GPU sums in another order, so the two can differ only where r (or the top-p
// prefix) lies within rounding (~1e-15 relative) of a boundary. SampleMargins reports how close a call was.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <vector>

#include "common/sampling_math.h"

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

// How close a draw came to a boundary where summation order could change the answer, relative to the mass
// involved (+inf when the step did not happen). Tests use it to tell rounding ties from real mismatches.
struct SampleMargins {
  // |top-p prefix mass - target| at the cut (either side), / top-k mass.
  double top_p = std::numeric_limits<double>::infinity();
  // Distance of r to the running mass on either side of the chosen id, / kept mass.
  double draw = std::numeric_limits<double>::infinity();
};

bool needs_adjustment(const SamplingParams& p);
Penalties penalties_of(const SamplingParams& p);

// The row's adjustments merged by id, ascending: bias, prompt ids (repetition penalty), output counts
// (penalties) and `banned` ids (-inf). Ids outside [0, vocab) are dropped; empty when nothing applies.
std::vector<LogitAdjustment> logit_adjustments(const SamplingParams& p, const PenaltyState& state,
                                               std::span<const int32_t> banned, int32_t vocab);
void apply_logit_adjustments(std::span<float> logits, std::span<const LogitAdjustment> entries,
                             const Penalties& penalties);
// Applies logit_bias and penalties to `logits` in place; `banned` ids (EOS/stop ids before min_tokens) get
// -inf. Same as apply_logit_adjustments(logit_adjustments(...)).
void adjust_logits(std::span<float> logits, const SamplingParams& p, const PenaltyState& state,
                   std::span<const int32_t> banned);

SamplingRow sampling_row(const SamplingParams& p, double u, int32_t adj_begin = 0, int32_t adj_end = 0);

// Samples adjusted logits with the row's filters and draw u (row.adj_* are ignored here).
int32_t sample_token(const float* logits, int32_t vocab, const SamplingRow& row,
                     SampleMargins* margins = nullptr);
int32_t sample_token(const float* logits, int32_t vocab, const SamplingParams& params, double u);

// Sets the ids `mask` (token_mask_words(vocab) words) does not allow to -inf.
void apply_token_mask(std::span<float> logits, const uint32_t* mask);

// The CPU twin of cuda::sample_rows: for each row r, applies its entries (and its token-mask row, when it has
// one) to logits[r * vocab, ...) in place and samples it. Returns one id per row.
std::vector<int32_t> sample_rows(std::span<float> logits, int32_t vocab, std::span<const SamplingRow> rows,
                                 std::span<const LogitAdjustment> adjustments,
                                 std::vector<SampleMargins>* margins = nullptr,
                                 std::span<const uint32_t> token_masks = {});

TokenLogprobs compute_logprobs(const float* logits, int32_t vocab, int32_t chosen, int top_k);

}  // namespace m3
