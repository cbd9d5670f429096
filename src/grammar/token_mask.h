// Token masks: which vocabulary ids a sequence may sample next under a grammar, as a bitset the sampler
// applies on its device. The design follows xgrammar's adaptive mask cache. At compile time every scanning
// position of the grammar sorts the vocabulary into tokens accepted whatever surrounds the rule (with, inside
// a bounded repetition, how much room they need), rejected whatever surrounds it, and "uncertain": tokens
// that read past the end of a rule shared by several callers with a byte that may follow it (its FOLLOW set).
// At run time a mask is the union of the current positions' accepted sets plus the uncertain tokens the real
// parse accepts, tried in sorted order so tokens sharing a prefix share the work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace m3 {
class Tokenizer;
}

namespace m3::grammar {

// The vocabulary as bytes, sorted for prefix-sharing walks. One per tokenizer, shared by its grammars.
class Vocabulary {
 public:
  // token_bytes[id]: the text an id adds. `special` ids (added tokens) are left out of grammars unless a
  // grammar allows them; ids with no bytes never match. `stop_ids` (EOS) are allowed where a grammar can end.
  Vocabulary(std::vector<std::string> token_bytes, std::vector<char> special, std::vector<int32_t> stop_ids);
  static std::shared_ptr<const Vocabulary> from_tokenizer(const Tokenizer& tokenizer,
                                                          std::vector<int32_t> stop_ids);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  int32_t words() const { return (size() + 31) / 32; }  // uint32 words of one mask row
  std::string_view bytes(int32_t id) const { return bytes_[id]; }
  bool is_special(int32_t id) const { return special_[id] != 0; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  // Ids with bytes, sorted by them (as unsigned bytes); lcp[i]: common prefix of sorted[i - 1] and sorted[i].
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<int32_t>& lcp() const { return lcp_; }
  // The first sorted index >= i whose bytes do not start with bytes(sorted[i])[0, len).
  size_t end_of_prefix(size_t i, size_t len) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<char> special_;
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> sorted_, lcp_;
};

struct CompileStats {
  int positions = 0;      // scanning positions precomputed
  int64_t accepted = 0;   // (position, token) pairs accepted whatever the context
  int64_t uncertain = 0;  // pairs left to the run-time check
  double seconds = 0;
};

// A grammar compiled against a vocabulary. Immutable; shared by every request that uses it.
class TokenGrammar {
 public:
  ~TokenGrammar();
  // `allowed_special`: special ids the grammar may use (their bytes then match like text), e.g. the tool-call
  // markers. `threads`: 0 = the hardware's, at most 8. Throws m3::Error(kInvalidArgument) for a grammar over
  // kMaxPositions byte positions, too ambiguous to match (matcher.h), or still compiling after time_limit_s.
  static constexpr size_t kMaxPositions = 200000;
  static std::shared_ptr<const TokenGrammar> compile(const Grammar& grammar,
                                                     std::shared_ptr<const Vocabulary> vocab,
                                                     const std::vector<int32_t>& allowed_special = {},
                                                     int threads = 0, double time_limit_s = 30);

  const Vocabulary& vocab() const { return *vocab_; }
  const std::shared_ptr<const ParseTables>& tables() const { return tables_; }
  const CompileStats& stats() const { return stats_; }
  Matcher matcher() const { return Matcher(tables_); }

  // Writes the mask for `m`'s state into mask[0, vocab().words()): bit id set = id allowed. `m` is used to
  // try tokens and is left as it was.
  void fill_mask(Matcher& m, uint32_t* mask) const;
  // Whether the token may follow `m`'s state (the slow, exact check: what fill_mask must agree with).
  bool allows(Matcher& m, int32_t id) const;

 private:
  struct PositionMask;
  TokenGrammar();
  void precompute(Matcher& m, int32_t position, PositionMask* out) const;
  bool is_candidate(int32_t id) const;

  std::shared_ptr<const Vocabulary> vocab_;
  std::shared_ptr<const ParseTables> tables_;
  std::vector<char> allowed_special_;   // [id]
  std::vector<int32_t> position_slot_;  // [position] -> index into masks_ (-1: not a scanning position)
  std::vector<PositionMask> masks_;
  CompileStats stats_;
};

// One row of a batch's masks.
struct MaskJob {
  const TokenGrammar* grammar = nullptr;
  Matcher* matcher = nullptr;
  std::vector<int32_t>
      also_allowed;  // ids allowed besides the grammar's (a reasoning marker before the answer)
};

// A fixed pool of threads that fills a batch's masks in the background, so nothing starts per step: submit()
// hands the rows over and returns at once (the caller goes on with the forward pass), wait() blocks until
// they are done. Row r goes to out[r * words, ...) (zeroed first; words >= the grammar's); a large batch is
// split over the threads (one per 4 rows, at most `threads`). A row whose state is too ambiguous to follow
// gets only the stop ids, which ends that answer. Threads start on the first submit.
class MaskWorkers {
 public:
  explicit MaskWorkers(int threads = 0);  // 0: the hardware's, at most 8
  ~MaskWorkers();
  MaskWorkers(const MaskWorkers&) = delete;
  MaskWorkers& operator=(const MaskWorkers&) = delete;

  // `jobs` and `out` must stay valid until wait() returns. One batch at a time.
  void submit(std::vector<MaskJob> jobs, int32_t words, uint32_t* out);
  // Blocks until the submitted batch is done (at once when none is pending); rethrows what a row threw
  // other than the ambiguity error above. Returns the batch's wall time in seconds.
  double wait();

 private:
  void run(int worker);
  int max_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<MaskJob> jobs_;
  int32_t words_ = 0;
  uint32_t* out_ = nullptr;
  uint64_t generation_ = 0;
  int participants_ = 0, pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point started_;
  double seconds_ = 0;
};

}  // namespace m3::grammar
