// Each prompt is fitted (random_text.h) so that it encodes to exactly the drawn length and still starts with
// the shared prefix's ids. Requests are fitted in parallel; each one draws from its own seeded generator, so
// the result does not depend on the thread count.
#include "bench/random_dataset.h"

#include <algorithm>
#include <cmath>

#include "bench/random_text.h"
#include "common/error.h"
#include "common/log.h"

namespace m3::bench {

LengthRange input_length_range(int input_len, double range_ratio) {
  return {static_cast<int>(std::floor(input_len * (1.0 - range_ratio))),
          static_cast<int>(std::ceil(input_len * (1.0 + range_ratio)))};
}

LengthRange output_length_range(int output_len, double range_ratio) {
  return {std::max(1, static_cast<int>(std::floor(output_len * (1.0 - range_ratio)))),
          std::max(1, static_cast<int>(std::ceil(output_len * (1.0 + range_ratio))))};
}

std::vector<SampleRequest> sample_random_requests(const Tokenizer& tok, const RandomDatasetOptions& opt) {
  if (opt.num_prompts < 1) fail(ErrorKind::kInvalidArgument, "--num-prompts must be at least 1");
  if (opt.input_len < 0) fail(ErrorKind::kInvalidArgument, "--random-input-len must not be negative");
  if (opt.output_len < 1) fail(ErrorKind::kInvalidArgument, "--random-output-len must be at least 1");
  if (opt.prefix_len < 0) fail(ErrorKind::kInvalidArgument, "--random-prefix-len must not be negative");
  if (!(opt.range_ratio >= 0.0 && opt.range_ratio < 1.0))
    fail(ErrorKind::kInvalidArgument, "--random-range-ratio must be in [0, 1)");
  const LengthRange in = input_length_range(opt.input_len, opt.range_ratio);
  const LengthRange out = output_length_range(opt.output_len, opt.range_ratio);
  if (opt.prefix_len + in.low < 1)
    fail(ErrorKind::kInvalidArgument,
         "--random-input-len is too small: with --random-range-ratio " + std::to_string(opt.range_ratio) +
             " and --random-prefix-len " + std::to_string(opt.prefix_len) +
             " a prompt could have no tokens; increase --random-input-len or --random-prefix-len");
  log_info("Sampling input_len from [", in.low, ", ", in.high, "] and output_len from [", out.low, ", ",
           out.high, "]");

  const RandomText random(tok);
  const std::vector<int32_t>& allowed = random.allowed();
  const int64_t vocab = static_cast<int64_t>(tok.vocab_size());
  Rng rng(opt.seed);
  std::vector<int> input_lens(opt.num_prompts), output_lens(opt.num_prompts);
  std::vector<int64_t> offsets(opt.num_prompts);
  for (int& n : input_lens) n = static_cast<int>(rng.uniform(in.low, in.high));
  for (int& n : output_lens) n = static_cast<int>(rng.uniform(out.low, out.high));
  for (int64_t& o : offsets) o = rng.uniform(0, vocab - 1);

  // The shared prefix, fitted on its own so that every prompt starts with the same ids.
  std::string prefix_text;
  if (opt.prefix_len > 0) {
    const FittedText p = random.draw("", {}, static_cast<size_t>(opt.prefix_len), rng);
    if (!p.exact) log_warn("the random prefix encodes to ", p.tokens, " tokens instead of ", opt.prefix_len);
    prefix_text = p.text;
  }
  const std::vector<int32_t> prefix_encoded = tok.encode(prefix_text);

  std::vector<SampleRequest> requests(opt.num_prompts);
  std::vector<char> exact(opt.num_prompts, 0);
  parallel_for(opt.num_prompts, [&](int i) {
    Rng own(mix_seed(opt.seed, static_cast<uint64_t>(i)));
    std::vector<int32_t> inner(static_cast<size_t>(input_lens[i]));
    for (size_t k = 0; k < inner.size(); ++k)
      inner[k] = allowed[static_cast<size_t>((offsets[i] + i + static_cast<int64_t>(k)) %
                                             static_cast<int64_t>(allowed.size()))];
    const FittedText f =
        random.fit(prefix_text, prefix_encoded, std::move(inner), static_cast<size_t>(input_lens[i]), own);
    requests[i] = {prefix_text + f.text, static_cast<int>(prefix_encoded.size() + f.tokens), output_lens[i]};
    exact[i] = f.exact;
  });

  const auto inexact = std::count(exact.begin(), exact.end(), 0);
  if (inexact > 0)
    log_warn(inexact, " of ", opt.num_prompts, " random prompts do not encode to their drawn length");
  return requests;
}

}  // namespace m3::bench
