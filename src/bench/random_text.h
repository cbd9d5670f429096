// Random-token prompt text shared by the synthetic datasets (random, prefix_repetition, agent): a portable
// seeded generator, the ordinary (non-added) vocabulary ids, and fitting, which turns candidate ids into text
// that re-encodes to an exact number of tokens after a given head. Everything is deterministic for a seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace m3::bench {

// Uniform integers from a 64-bit Mersenne twister by rejection, so the draws are the same on every standard
// library (std::uniform_int_distribution is implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  int64_t uniform(int64_t lo, int64_t hi);  // inclusive bounds

 private:
  std::mt19937_64 gen_;
};

// An independent seed for stream `stream` of `seed` (splitmix64), so per-item generators do not overlap.
uint64_t mix_seed(uint64_t seed, uint64_t stream);

// Text that encodes, after its head, to `tokens` ids; `exact` when that is the length asked for.
struct FittedText {
  std::string text;
  size_t tokens = 0;
  bool exact = false;
};

// Text made of a tokenizer's ordinary vocabulary (no special or control tokens, as vLLM's allowed_tokens).
class RandomText {
 public:
  // Throws m3::Error(kInvalidArgument) naming --tokenizer when it has no ordinary tokens.
  explicit RandomText(const Tokenizer& tok);

  const Tokenizer& tokenizer() const { return tok_; }
  const std::vector<int32_t>& allowed() const { return allowed_; }
  int32_t random_id(Rng& rng) const;

  // Text that, appended to `head_text` (which encodes to `head_ids`), adds exactly `target` ids and leaves
  // the head's ids unchanged, starting from the candidate ids `ids`. Ids do not round-trip through text
  // (random ids decode to byte fragments, neighbours merge), so it re-encodes, cuts or extends with random
  // ids, and repeats; after a bounded number of attempts it returns the closest text with exact = false.
  FittedText fit(const std::string& head_text, const std::vector<int32_t>& head_ids, std::vector<int32_t> ids,
                 size_t target, Rng& rng) const;
  // fit() from `target` random ids.
  FittedText draw(const std::string& head_text, const std::vector<int32_t>& head_ids, size_t target,
                  Rng& rng) const;

 private:
  Tokenizer tok_;
  std::vector<int32_t> allowed_;
};

// Runs item(0) .. item(n - 1) on up to 8 threads and rethrows the first exception. Items must be independent
// (each with its own generator), so results do not depend on the thread count.
void parallel_for(int n, const std::function<void(int)>& item);

}  // namespace m3::bench
