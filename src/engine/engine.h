// The step loop: scheduler plan -> ForwardBatch -> backend forward -> sampling -> stop checks -> events.
// Requests are validated on entry (length limits, token ids, sampling ranges) so a bad request is rejected
// with a clear error and never reaches the model. Stop strings are the caller's business (it owns the text).
// Sampling runs on the backend's device when it offers to (ModelBackend::samples_on_device) and no row of the
// step wants logprobs, else on the host; both follow engine/sampler.h with the draw sample_uniform(seed,
// index of the output token), so the device never changes the tokens.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/multimodal.h"
#include "engine/sampler.h"
#include "grammar/token_mask.h"
#include "model/backend.h"
#include "sched/data_parallel.h"

namespace m3 {

struct EngineOptions {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  int64_t max_model_len = 0;          // 0: the model's max_position_embeddings, capped by the KV pool
  bool enable_prefix_caching = true;  // reuse the KV pages of known prefixes (sched/scheduler.h)
  size_t mm_cache_bytes =
      size_t(4) << 30;  // vision features kept for repeated images (--mm-processor-cache-gb)
};

// A cap on reasoning (Anthropic thinking.budget_tokens, vLLM thinking_token_budget): once a reasoning span
// (after `start_token`, or from the first token when the prompt already opened one) has `budget` tokens, the
// next token is `end_token` whatever was sampled, and generation goes on with the answer.
struct ThinkingBudget {
  int budget = 0;
  int32_t start_token = -1, end_token = -1;
  bool starts_inside = false;
};

// Structured output: the grammar the answer must follow. With a reasoning parser the grammar waits for the
// reasoning to end (think_end), as vLLM's structured outputs do; an answer that has not started reasoning may
// still open (think_start) or skip (think_end) it before its first constrained token.
struct GrammarConstraint {
  std::shared_ptr<const grammar::TokenGrammar> grammar;
  bool starts_in_reasoning = false;          // the prompt opened a reasoning span
  int32_t think_start = -1, think_end = -1;  // the reasoning markers; -1: no reasoning parser
};

struct Request {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  int min_tokens = 0;  // EOS and stop_token_ids are masked until this many tokens are generated
  SamplingParams sampling;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::optional<ThinkingBudget> thinking_budget;
  uint64_t cache_salt = 0;  // prefix-cache namespace: requests share cached pages only with the same salt
  double cache_keep_seconds = 0;  // keep the prompt's cached pages this long (Anthropic cache_control ttl)
  std::optional<GrammarConstraint> grammar;
  // Images and videos, in the order of their placeholder tokens in `prompt` (engine/multimodal.h).
  std::vector<MultimodalInput> mm;
};

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason r);

struct TokenEvent {
  int64_t request_id = 0;
  int32_t token = -1;                         // -1 on an abort event, which carries no token
  FinishReason finish = FinishReason::kNone;  // set on the request's last event
  int32_t stop_token = -1;                    // the stop token id / EOS that finished it (finish == kStop)
  bool is_eos = false;  // stop_token is an EOS id rather than one of the request's stop_token_ids
  std::optional<TokenLogprobs> logprobs;  // when the request asked for logprobs
  int32_t cached_tokens = 0;              // prompt tokens that came from the prefix cache
  int32_t cache_written_tokens = 0;       // prompt tokens this request wrote to the cache and had kept
};

// One data-parallel attention rank's share (sched/data_parallel.h).
struct DpRankStats {
  size_t running = 0, waiting = 0;
  int kv_pages_total = 0, kv_pages_free = 0;
  int64_t requests = 0;  // requests the load balancer placed on the rank
};

struct EngineStats {
  size_t running = 0, waiting = 0;
  int kv_pages_total = 0, kv_pages_free = 0;
  int64_t prompt_tokens = 0;  // prompt tokens computed (recomputation after preemption included)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  // tokens (sched/scheduler.h PrefixCacheStats)
  int64_t prefix_cache_host_hits = 0;                       // of the hits, tokens restored from the host tier
  int host_pages_total = 0, host_pages_used = 0;            // the prefix cache's host tier
  int64_t steps = 0;
  double step_seconds = 0;             // wall time spent inside step(), scheduling and sampling included
  int64_t grammar_masks = 0;           // token masks computed for structured output
  double grammar_mask_seconds = 0;     // host time the steps' mask work took (overlapping the forward passes)
  std::vector<DpRankStats> dp_ranks;   // one entry per data-parallel rank (one without DP)
  std::vector<int64_t> expert_tokens;  // tokens routed to each expert, over the MoE layers (ModelBackend)
};

class Engine {
 public:
  Engine(std::unique_ptr<ModelBackend> backend, EngineOptions options);

  const ModelConfig& config() const { return backend_->config(); }
  int64_t max_model_len() const { return max_model_len_; }

  // Throws m3::Error(kInvalidArgument) naming the bad field. Thread-safe (reads immutable state only).
  void validate(const Request& request) const;
  // Encodes the request's images / videos that have no features yet (through the encoder cache), so that
  // add() need not: AsyncEngine calls it on the submitting thread, keeping the vision tower off the step
  // loop. Thread-safe.
  void encode_media(Request& request);
  // Validates and queues a request.
  int64_t add(Request request);
  void abort(int64_t request_id);
  bool has_work() const { return sched_.has_work(); }
  // Runs one step and returns the tokens it produced (at most one per running request).
  std::vector<TokenEvent> step();
  EngineStats stats() const;
  // Forgets the cached KV pages no running request holds; returns how many.
  int reset_prefix_cache() { return sched_.reset_prefix_cache(); }

 private:
  // Where a structured-output request stands.
  enum class GrammarPhase { kNone, kReasoning, kPrelude, kActive };
  struct Active {
    Request req;
    uint64_t seed = 0;  // the request's seed or a random one; draw i is sample_uniform(seed, i)
    int generated = 0;
    PenaltyState penalties;
    bool thinking = false;    // inside a reasoning span (only tracked with a thinking budget)
    int thinking_tokens = 0;  // tokens of the current span
    GrammarPhase phase = GrammarPhase::kNone;
    std::optional<grammar::Matcher> matcher;  // the output so far under req.grammar
    MultimodalPrompt mm;                      // its images' and videos' features on the prompt
  };
  // Bias, penalties and min_tokens bans for the request's next token.
  std::vector<LogitAdjustment> adjustments(const Active& a) const;
  int32_t sample_on_host(Active& a, float* logits, int32_t vocab, const uint32_t* mask,
                         std::optional<TokenLogprobs>* logprobs);
  FinishReason check_stop(const Active& a, int32_t token) const;
  static int32_t apply_thinking_budget(Active& a, int32_t sampled);
  // Advances the grammar over a sampled token; false when the grammar refuses it.
  static bool advance_grammar(Active& a, int32_t token);

  std::unique_ptr<ModelBackend> backend_;
  EngineOptions opt_;
  int64_t max_model_len_ = 0;
  DataParallelScheduler sched_;             // one scheduler per data-parallel attention rank (usually one)
  std::vector<KvPageCopy> pending_copies_;  // host tier copies not yet handed to a forward pass
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();  // the retention clock
  std::map<int64_t, Active> active_;
  int64_t next_id_ = 0;
  EngineStats counters_;
  grammar::MaskWorkers mask_workers_;  // the structured-output masks, beside the forward pass
  std::vector<uint32_t> masks_;        // this step's mask rows (token_mask_words(vocab) words each)
  EncoderCache encoder_cache_;         // vision features by content hash (thread-safe)
};

}  // namespace m3
