// vLLM's "prefix_repetition" serving-benchmark dataset (PrefixRepetitionRandomDataset), for measuring prefix
// caching: num_prefixes random prefixes of prefix_len tokens, the requests spread evenly over them, each its
// prefix + a random suffix of suffix_len tokens, output length fixed, shuffled by the seed. Every prompt
// re-encodes to exactly prefix_len + suffix_len tokens and starts with its prefix's ids.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/sample_request.h"
#include "tokenizer/tokenizer.h"

namespace m3::bench {

struct PrefixRepetitionOptions {  // vLLM's defaults
  int num_prompts = 1000;
  int prefix_len = 256;   // --prefix-repetition-prefix-len
  int suffix_len = 256;   // --prefix-repetition-suffix-len
  int num_prefixes = 10;  // --prefix-repetition-num-prefixes
  int output_len = 128;   // --prefix-repetition-output-len
  uint64_t seed = 0;
};

// Draws exactly `num_prompts` requests: prefix p serves num_prompts / num_prefixes of them, one more for the
// first num_prompts % num_prefixes prefixes (vLLM drops that remainder instead). Throws
// m3::Error(kInvalidArgument) naming the flag for negative lengths, an empty prompt, no prefixes or fewer
// prompts than prefixes (as vLLM).
std::vector<SampleRequest> sample_prefix_repetition_requests(const Tokenizer& tok,
                                                             const PrefixRepetitionOptions& opt);

}  // namespace m3::bench
