// vLLM's "random" serving-benchmark dataset: per-request input/output lengths drawn uniformly around the
// requested means (--random-range-ratio), a random prefix shared by every prompt (--random-prefix-len), and
// prompts made of random token ids decoded to text. Unlike vLLM's best-effort re-encoding, every prompt here
// re-encodes to exactly its drawn length with the benchmark tokenizer. Deterministic for a given seed.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/sample_request.h"
#include "tokenizer/tokenizer.h"

namespace m3::bench {

struct RandomDatasetOptions {
  int num_prompts = 1000;
  int input_len = 1024;      // tokens after the shared prefix (mean when range_ratio > 0)
  int output_len = 128;      // max_tokens per request (mean when range_ratio > 0)
  int prefix_len = 0;        // tokens of the shared prefix
  double range_ratio = 0.0;  // lengths are drawn from [len * (1 - r), len * (1 + r)], r in [0, 1)
  uint64_t seed = 0;
};

// Inclusive integer bounds of a drawn length.
struct LengthRange {
  int low = 0;
  int high = 0;
};

// vLLM's bounds: [floor(len * (1 - r)), ceil(len * (1 + r))]; output lengths are at least 1.
LengthRange input_length_range(int input_len, double range_ratio);
LengthRange output_length_range(int output_len, double range_ratio);

// Draws `num_prompts` requests. Throws m3::Error(kInvalidArgument) naming the flag when the options cannot
// produce a prompt (negative lengths, range ratio outside [0, 1), an empty prompt).
std::vector<SampleRequest> sample_random_requests(const Tokenizer& tok, const RandomDatasetOptions& opt);

}  // namespace m3::bench
