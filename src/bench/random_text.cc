// Fitting keeps the head's ids intact: when the new text merges with the end of the head, its first token is
// replaced and the fit starts over, so prompts that share a head share its ids (what prefix caching keys on).
#include "bench/random_text.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "common/error.h"

namespace m3::bench {
namespace {

constexpr int kMaxFitAttempts = 64;
constexpr int kMaxThreads = 8;

}  // namespace

int64_t Rng::uniform(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  uint64_t x = gen_();
  while (x >= limit) x = gen_();
  return lo + static_cast<int64_t>(x % span);
}

uint64_t mix_seed(uint64_t seed, uint64_t stream) {  // splitmix64 finaliser
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

RandomText::RandomText(const Tokenizer& tok) : tok_(tok) {
  const std::vector<int32_t> added = tok.added_token_ids();
  const std::set<int32_t> skip(added.begin(), added.end());
  for (int32_t id = 0; id < static_cast<int32_t>(tok.vocab_size()); ++id)
    if (tok.is_known(id) && !skip.count(id)) allowed_.push_back(id);
  if (allowed_.empty())
    fail(ErrorKind::kInvalidArgument, "--tokenizer '" + tok.path() + "' has no ordinary tokens");
}

int32_t RandomText::random_id(Rng& rng) const {
  return allowed_[static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(allowed_.size()) - 1))];
}

FittedText RandomText::fit(const std::string& head_text, const std::vector<int32_t>& head_ids,
                           std::vector<int32_t> ids, size_t target, Rng& rng) const {
  FittedText best;
  for (int attempt = 0; attempt < kMaxFitAttempts; ++attempt) {
    const std::string text = tok_.decode(ids);
    const std::vector<int32_t> full = tok_.encode(head_text + text);
    if (full.size() < head_ids.size() || !std::equal(head_ids.begin(), head_ids.end(), full.begin())) {
      // The text merged with the end of the head: start it with a different token.
      ids = tok_.encode(text);
      if (ids.empty()) ids.push_back(random_id(rng));
      ids[0] = random_id(rng);
      continue;
    }
    std::vector<int32_t> tail(full.begin() + static_cast<std::ptrdiff_t>(head_ids.size()), full.end());
    best = {text, tail.size(), tail.size() == target};
    if (best.exact) return best;
    if (tail.size() > target) tail.resize(target);
    while (tail.size() < target) tail.push_back(random_id(rng));
    ids = std::move(tail);
  }
  return best;
}

FittedText RandomText::draw(const std::string& head_text, const std::vector<int32_t>& head_ids, size_t target,
                            Rng& rng) const {
  std::vector<int32_t> ids(target);
  for (int32_t& id : ids) id = random_id(rng);
  return fit(head_text, head_ids, std::move(ids), target, rng);
}

void parallel_for(int n, const std::function<void(int)>& item) {
  if (n <= 0) return;
  const int threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, std::min(kMaxThreads, n));
  std::exception_ptr error;
  std::mutex error_mu;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        for (int i = t; i < n; i += threads) item(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
    });
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace m3::bench
