// Token ids -> text -> ids does not round-trip (random ids decode to byte fragments and U+FFFD, and
// neighbouring pieces merge differently), so each prompt is fitted: re-encode, cut or extend with random ids,
// repeat until the text encodes to exactly the drawn length and still starts with the shared prefix's ids.
// Requests are fitted in parallel; each one draws from its own seeded generator, so the result does not
// depend on the thread count.
#include "bench/random_dataset.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/error.h"
#include "common/log.h"

namespace m3::bench {
namespace {

constexpr int kMaxFitAttempts = 64;

// Uniform integers from a 64-bit Mersenne twister by rejection, so the draws are the same on every standard
// library (std::uniform_int_distribution is implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive bounds
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x = gen_();
    while (x >= limit) x = gen_();
    return lo + static_cast<int64_t>(x % span);
  }

 private:
  std::mt19937_64 gen_;
};

uint64_t mix_seed(uint64_t seed, uint64_t stream) {  // splitmix64 finaliser
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Vocabulary ids that are not added (special or control) tokens, as vLLM's allowed_tokens.
std::vector<int32_t> allowed_token_ids(const Tokenizer& tok) {
  const std::vector<int32_t> added = tok.added_token_ids();
  const std::set<int32_t> skip(added.begin(), added.end());
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < static_cast<int32_t>(tok.vocab_size()); ++id)
    if (tok.is_known(id) && !skip.count(id)) ids.push_back(id);
  if (ids.empty())
    fail(ErrorKind::kInvalidArgument, "--tokenizer '" + tok.path() + "' has no ordinary tokens");
  return ids;
}

struct Fitted {
  std::string text;  // encodes (after the head) to `tokens` ids
  size_t tokens = 0;
  bool exact = false;
};

// Finds text that, appended to `head_text` (which encodes to `head_ids`), adds exactly `target` ids and
// leaves the head's ids unchanged, starting from the candidate ids `ids`.
Fitted fit_to_length(const Tokenizer& tok, const std::string& head_text, const std::vector<int32_t>& head_ids,
                     std::vector<int32_t> ids, size_t target, Rng& rng, const std::vector<int32_t>& allowed) {
  auto random_id = [&] { return allowed[static_cast<size_t>(rng.uniform(0, int64_t(allowed.size()) - 1))]; };
  Fitted best;
  for (int attempt = 0; attempt < kMaxFitAttempts; ++attempt) {
    const std::string text = tok.decode(ids);
    const std::vector<int32_t> full = tok.encode(head_text + text);
    if (full.size() < head_ids.size() || !std::equal(head_ids.begin(), head_ids.end(), full.begin())) {
      // The text merged with the end of the head: start it with a different token.
      ids = tok.encode(text);
      if (ids.empty()) ids.push_back(random_id());
      ids[0] = random_id();
      continue;
    }
    std::vector<int32_t> tail(full.begin() + static_cast<std::ptrdiff_t>(head_ids.size()), full.end());
    best = {text, tail.size(), tail.size() == target};
    if (best.exact) return best;
    if (tail.size() > target) tail.resize(target);
    while (tail.size() < target) tail.push_back(random_id());
    ids = std::move(tail);
  }
  return best;
}

}  // namespace

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

  const std::vector<int32_t> allowed = allowed_token_ids(tok);
  const int64_t vocab = static_cast<int64_t>(tok.vocab_size());
  Rng rng(opt.seed);
  std::vector<int> input_lens(opt.num_prompts), output_lens(opt.num_prompts);
  std::vector<int64_t> offsets(opt.num_prompts);
  for (int& n : input_lens) n = static_cast<int>(rng.uniform(in.low, in.high));
  for (int& n : output_lens) n = static_cast<int>(rng.uniform(out.low, out.high));
  for (int64_t& o : offsets) o = rng.uniform(0, vocab - 1);

  // The shared prefix, fitted on its own so that every prompt starts with the same ids.
  std::vector<int32_t> prefix_ids;
  for (int i = 0; i < opt.prefix_len; ++i)
    prefix_ids.push_back(allowed[static_cast<size_t>(rng.uniform(0, int64_t(allowed.size()) - 1))]);
  std::string prefix_text;
  if (opt.prefix_len > 0) {
    const Fitted p = fit_to_length(tok, "", {}, prefix_ids, prefix_ids.size(), rng, allowed);
    if (!p.exact) log_warn("the random prefix encodes to ", p.tokens, " tokens instead of ", opt.prefix_len);
    prefix_text = p.text;
  }
  const std::vector<int32_t> prefix_encoded = tok.encode(prefix_text);

  std::vector<SampleRequest> requests(opt.num_prompts);
  std::vector<char> exact(opt.num_prompts, 0);
  auto make = [&](int i) {
    Rng own(mix_seed(opt.seed, static_cast<uint64_t>(i)));
    std::vector<int32_t> inner(static_cast<size_t>(input_lens[i]));
    for (size_t k = 0; k < inner.size(); ++k)
      inner[k] = allowed[static_cast<size_t>((offsets[i] + i + static_cast<int64_t>(k)) %
                                             static_cast<int64_t>(allowed.size()))];
    const Fitted f = fit_to_length(tok, prefix_text, prefix_encoded, std::move(inner),
                                   static_cast<size_t>(input_lens[i]), own, allowed);
    requests[i] = {prefix_text + f.text, static_cast<int>(prefix_encoded.size() + f.tokens), output_lens[i]};
    exact[i] = f.exact;
  };

  const int threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, std::min(8, opt.num_prompts));
  std::exception_ptr error;
  std::mutex error_mu;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        for (int i = t; i < opt.num_prompts; i += threads) make(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
    });
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);

  const auto inexact = std::count(exact.begin(), exact.end(), 0);
  if (inexact > 0)
    log_warn(inexact, " of ", opt.num_prompts, " random prompts do not encode to their drawn length");
  return requests;
}

}  // namespace m3::bench
