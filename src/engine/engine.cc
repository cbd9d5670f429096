// Engine step loop and request validation.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "common/error.h"
#include "common/log.h"

namespace m3 {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    default:
      return "";
  }
}

Engine::Engine(std::unique_ptr<ModelBackend> backend, EngineOptions options)
    : backend_(std::move(backend)),
      opt_(options),
      sched_({options.max_num_seqs, options.max_num_batched_tokens, options.enable_prefix_caching,
              backend_->num_host_kv_pages()},
             backend_->num_kv_pages(), backend_->page_size(), backend_->data_parallel_size()),
      encoder_cache_(options.mm_cache_bytes) {
  const int64_t pool_tokens = int64_t{backend_->num_kv_pages()} * backend_->page_size();
  max_model_len_ = opt_.max_model_len > 0 ? opt_.max_model_len : backend_->config().max_position_embeddings;
  if (max_model_len_ > backend_->config().max_position_embeddings)
    fail(ErrorKind::kInvalidArgument, "--max-model-len " + std::to_string(max_model_len_) +
                                          " exceeds the model's max_position_embeddings (" +
                                          std::to_string(backend_->config().max_position_embeddings) + ")");
  // An explicit --max-model-len the KV pool cannot hold is a startup error (as in vLLM), not a silent cap.
  if (opt_.max_model_len > pool_tokens)
    fail(ErrorKind::kInvalidArgument,
         "--max-model-len " + std::to_string(opt_.max_model_len) + " is more than the KV cache holds (" +
             std::to_string(pool_tokens) + " tokens in " + std::to_string(backend_->num_kv_pages()) +
             " pages" + (backend_->data_parallel_size() > 1 ? " per data-parallel rank" : "") +
             "): lower --max-model-len, or give the cache more memory (--gpu-memory-utilization, "
             "--kv-cache-dtype "
             "fp8, a smaller --max-num-batched-tokens, more GPUs)");
  max_model_len_ = std::min(max_model_len_, pool_tokens);
}

void Engine::validate(const Request& r) const {
  const ModelConfig& c = backend_->config();
  if (r.prompt.empty()) fail(ErrorKind::kInvalidArgument, "prompt is empty");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= c.vocab_size)
      fail(ErrorKind::kInvalidArgument, "prompt token id " + std::to_string(t) +
                                            " is outside the vocabulary [0, " + std::to_string(c.vocab_size) +
                                            ")");
  if (r.max_tokens < 1) fail(ErrorKind::kInvalidArgument, "max_tokens must be at least 1");
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  if (total > max_model_len_)
    fail(ErrorKind::kInvalidArgument, "prompt (" + std::to_string(r.prompt.size()) +
                                          " tokens) + max_tokens (" + std::to_string(r.max_tokens) +
                                          ") exceeds the maximum model length " +
                                          std::to_string(max_model_len_));
  if (!(r.cache_keep_seconds >= 0) || !std::isfinite(r.cache_keep_seconds))
    fail(ErrorKind::kInvalidArgument, "the cache retention time must be a finite number of seconds >= 0");
  const SamplingParams& s = r.sampling;
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature))
    fail(ErrorKind::kInvalidArgument, "temperature must be >= 0");
  if (!(s.top_p > 0 && s.top_p <= 1)) fail(ErrorKind::kInvalidArgument, "top_p must be in (0, 1]");
  if (!(s.min_p >= 0 && s.min_p <= 1)) fail(ErrorKind::kInvalidArgument, "min_p must be in [0, 1]");
  if (s.top_k < -1) fail(ErrorKind::kInvalidArgument, "top_k must be -1, 0 (off) or positive");
  if (!(s.repetition_penalty > 0) || !std::isfinite(s.repetition_penalty))
    fail(ErrorKind::kInvalidArgument, "repetition_penalty must be > 0");
  if (!(s.presence_penalty >= -2 && s.presence_penalty <= 2))
    fail(ErrorKind::kInvalidArgument, "presence_penalty must be in [-2, 2]");
  if (!(s.frequency_penalty >= -2 && s.frequency_penalty <= 2))
    fail(ErrorKind::kInvalidArgument, "frequency_penalty must be in [-2, 2]");
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id >= c.vocab_size)
      fail(ErrorKind::kInvalidArgument,
           "logit_bias token id " + std::to_string(id) + " is outside the vocabulary");
    if (!(bias >= -100 && bias <= 100))
      fail(ErrorKind::kInvalidArgument, "logit_bias values must be in [-100, 100]");
  }
  if (r.min_tokens < 0 || r.min_tokens > r.max_tokens)
    fail(ErrorKind::kInvalidArgument, "min_tokens must be in [0, max_tokens]");
  if (const auto& g = r.grammar) {
    if (!g->grammar) fail(ErrorKind::kInvalidArgument, "the structured-output grammar is missing");
    if (g->grammar->vocab().size() > c.vocab_size)
      fail(ErrorKind::kInvalidArgument, "structured output needs the tokenizer's vocabulary (" +
                                            std::to_string(g->grammar->vocab().size()) +
                                            " ids) to fit the model's (" + std::to_string(c.vocab_size) +
                                            ")");
    for (int32_t t : {g->think_start, g->think_end})
      if (t < -1 || t >= c.vocab_size)
        fail(ErrorKind::kInvalidArgument,
             "the reasoning marker token " + std::to_string(t) + " is outside the vocabulary");
  }
  if (const auto& tb = r.thinking_budget) {
    if (tb->budget < 0) fail(ErrorKind::kInvalidArgument, "the thinking budget must be >= 0");
    for (int32_t t : {tb->start_token, tb->end_token})
      if (t < 0 || t >= c.vocab_size)
        fail(ErrorKind::kInvalidArgument,
             "the thinking budget's marker token " + std::to_string(t) + " is outside the vocabulary");
  }
}

void Engine::encode_media(Request& r) {
  if (!r.mm.empty() && !backend_->has_vision())
    fail(ErrorKind::kInvalidArgument,
         "this model does not take image or video input (it has no vision tower)");
  for (MultimodalInput& item : r.mm) item.features = encoder_cache_.features_of(item, *backend_);
}

int64_t Engine::add(Request r) {
  validate(r);
  const int64_t id = next_id_++;
  uint64_t seed = 0;
  if (r.seed) {
    seed = *r.seed;
  } else {
    std::random_device entropy;
    seed = ((uint64_t{entropy()} << 32) | entropy()) ^ static_cast<uint64_t>(id);
  }
  MultimodalPrompt mm(r.prompt, r.mm, *backend_, encoder_cache_);
  r.mm.clear();  // the patches are spent: the features live in `mm` (and the encoder cache)
  // Token masks are computed on rank 0 only (ForwardBatch::token_masks), so a structured-output request is
  // attended there; the others go to the least loaded data-parallel rank.
  sched_.add(id, mm.empty() ? r.prompt : mm.cache_key(r.prompt), r.cache_salt, r.cache_keep_seconds,
             r.grammar ? 0 : -1);
  PenaltyState penalties;
  if (r.sampling.repetition_penalty != 1.0f) {
    penalties.prompt_tokens = r.prompt;
    std::sort(penalties.prompt_tokens.begin(), penalties.prompt_tokens.end());
    penalties.prompt_tokens.erase(std::unique(penalties.prompt_tokens.begin(), penalties.prompt_tokens.end()),
                                  penalties.prompt_tokens.end());
  }
  const bool thinking = r.thinking_budget && r.thinking_budget->starts_inside;
  Active a{std::move(r), seed,         0, std::move(penalties), thinking, 0, GrammarPhase::kNone,
           std::nullopt, std::move(mm)};
  if (const auto& g = a.req.grammar) {
    a.matcher.emplace(g->grammar->matcher());
    a.phase = g->starts_in_reasoning                     ? GrammarPhase::kReasoning
              : g->think_start >= 0 || g->think_end >= 0 ? GrammarPhase::kPrelude
                                                         : GrammarPhase::kActive;
  }
  active_.emplace(id, std::move(a));
  return id;
}

void Engine::abort(int64_t id) {
  sched_.finish(id);
  active_.erase(id);
}

EngineStats Engine::stats() const {
  EngineStats s = counters_;
  s.running = sched_.num_running();
  s.waiting = sched_.num_waiting();
  s.kv_pages_total = sched_.num_pages();
  s.kv_pages_free = sched_.num_free_pages();
  s.prefix_cache_queries = sched_.prefix_cache_stats().queries;
  s.prefix_cache_hits = sched_.prefix_cache_stats().hits;
  s.prefix_cache_host_hits = sched_.prefix_cache_stats().host_hits;
  for (int r = 0; r < sched_.dp_size(); ++r) {
    const Scheduler& rs = sched_.rank(r);
    s.dp_ranks.push_back({rs.num_running(), rs.num_waiting(), rs.pool().num_pages(), rs.pool().num_free(),
                          sched_.admitted(r)});
  }
  s.expert_tokens = backend_->expert_token_counts();  // by slot; reported by checkpoint expert
  if (const auto& placed = config().expert_placement;
      !placed.empty() && s.expert_tokens.size() == placed.size()) {
    std::vector<int64_t> by_expert(placed.size());
    for (size_t slot = 0; slot < placed.size(); ++slot) by_expert[placed[slot]] = s.expert_tokens[slot];
    s.expert_tokens = std::move(by_expert);
  }
  if (const HostTier* host = sched_.host_tier()) {
    s.host_pages_total = host->num_slots();
    s.host_pages_used = host->num_used();
  }
  return s;
}

int32_t Engine::apply_thinking_budget(Active& a, int32_t sampled) {
  const auto& tb = a.req.thinking_budget;
  if (!tb) return sampled;
  const int32_t token = a.thinking && a.thinking_tokens >= tb->budget ? tb->end_token : sampled;
  if (token == tb->start_token) {
    a.thinking = true;
    a.thinking_tokens = 0;
  } else if (token == tb->end_token) {
    a.thinking = false;
  } else if (a.thinking) {
    ++a.thinking_tokens;
  }
  return token;
}

bool Engine::advance_grammar(Active& a, int32_t token) {
  const GrammarConstraint& g = *a.req.grammar;
  switch (a.phase) {
    case GrammarPhase::kNone:
      return true;
    case GrammarPhase::kReasoning:
      if (token == g.think_end) a.phase = GrammarPhase::kActive;
      return true;
    case GrammarPhase::kPrelude:
      if (token == g.think_start || token == g.think_end) {
        a.phase = token == g.think_start ? GrammarPhase::kReasoning : GrammarPhase::kActive;
        return true;
      }
      a.phase = GrammarPhase::kActive;
      break;
    case GrammarPhase::kActive:
      break;
  }
  const grammar::Vocabulary& v = g.grammar->vocab();
  if (std::find(v.stop_ids().begin(), v.stop_ids().end(), token) != v.stop_ids().end())
    return a.matcher->can_finish();
  return token < v.size() && a.matcher->accept(v.bytes(token));
}

FinishReason Engine::check_stop(const Active& a, int32_t token) const {
  const Request& r = a.req;
  if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) != r.stop_token_ids.end())
    return FinishReason::kStop;
  if (!r.ignore_eos) {
    const auto& eos = backend_->config().eos_token_ids;
    if (std::find(eos.begin(), eos.end(), token) != eos.end()) return FinishReason::kStop;
  }
  if (a.generated >= r.max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

std::vector<LogitAdjustment> Engine::adjustments(const Active& a) const {
  const Request& r = a.req;
  std::vector<int32_t> banned;
  if (a.generated < r.min_tokens) {
    banned = r.stop_token_ids;
    if (!r.ignore_eos)
      banned.insert(banned.end(), config().eos_token_ids.begin(), config().eos_token_ids.end());
  }
  return logit_adjustments(r.sampling, a.penalties, banned, config().vocab_size);
}

int32_t Engine::sample_on_host(Active& a, float* logits, int32_t vocab, const uint32_t* mask,
                               std::optional<TokenLogprobs>* logprobs) {
  const SamplingParams& p = a.req.sampling;
  const std::vector<LogitAdjustment> entries = adjustments(a);
  // Logprobs are reported from the raw model logits, so keep them when the sampler is about to edit the row.
  std::vector<float> raw;
  if (p.logprobs >= 0 && (!entries.empty() || mask)) raw.assign(logits, logits + vocab);
  apply_logit_adjustments({logits, static_cast<size_t>(vocab)}, entries, penalties_of(p));
  if (mask) apply_token_mask({logits, static_cast<size_t>(vocab)}, mask);
  const int32_t token = sample_token(logits, vocab, sampling_row(p, sample_uniform(a.seed, a.generated)));
  if (p.logprobs >= 0)
    *logprobs = compute_logprobs(raw.empty() ? logits : raw.data(), vocab, token, p.logprobs);
  return token;
}

std::vector<TokenEvent> Engine::step() {
  const auto t0 = std::chrono::steady_clock::now();
  struct AddElapsed {  // every return path counts the step's time
    std::chrono::steady_clock::time_point t0;
    double* total;
    ~AddElapsed() { *total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
  } add_elapsed{t0, &counters_.step_seconds};
  sched_.set_clock(std::chrono::duration<double>(t0 - start_).count());
  StepPlan plan = sched_.schedule();
  for (const PageTransfer& t : sched_.take_transfers())  // they run before the next forward pass, in order
    pending_copies_.push_back({t.page, t.host_slot, t.to_host});
  std::vector<TokenEvent> events;
  counters_.preemptions += static_cast<int64_t>(plan.preempted.size());
  if (plan.empty()) return events;
  ++counters_.steps;

  ForwardBatch batch;
  batch.page_copies = std::move(pending_copies_);
  pending_copies_.clear();
  std::vector<int64_t> sampled_ids;
  for (const ScheduledChunk& c : plan.chunks) {
    const SequenceState& s = sched_.seq(c.seq_id);
    SeqChunk chunk;
    chunk.token_offset = static_cast<int32_t>(batch.token_ids.size());
    chunk.num_tokens = c.num_tokens;
    chunk.start_pos = c.start_pos;
    chunk.block_table = s.block_table;
    chunk.want_logits = c.samples;
    chunk.seq_id = c.seq_id;
    chunk.dp_rank = c.dp_rank;
    batch.token_ids.insert(batch.token_ids.end(), s.tokens.begin() + c.start_pos,
                           s.tokens.begin() + c.start_pos + c.num_tokens);
    if (const MultimodalPrompt& mm = active_.at(c.seq_id).mm; !mm.empty())
      mm.add_embeds(c.start_pos, c.num_tokens, chunk.token_offset, batch);
    batch.seqs.push_back(chunk);
    if (c.samples) sampled_ids.push_back(c.seq_id);
  }
  // Device sampling unless a row wants logprobs (they need the logits on the host).
  const bool on_device = backend_->samples_on_device() && !sampled_ids.empty() &&
                         std::none_of(sampled_ids.begin(), sampled_ids.end(),
                                      [&](int64_t id) { return active_.at(id).req.sampling.logprobs >= 0; });
  if (on_device) {
    for (int64_t id : sampled_ids) {
      const Active& a = active_.at(id);
      const std::vector<LogitAdjustment> entries = adjustments(a);
      const auto begin = static_cast<int32_t>(batch.sampling_adjustments.size());
      batch.sampling_adjustments.insert(batch.sampling_adjustments.end(), entries.begin(), entries.end());
      batch.sampling.push_back(sampling_row(a.req.sampling, sample_uniform(a.seed, a.generated), begin,
                                            static_cast<int32_t>(batch.sampling_adjustments.size())));
    }
  }
  // Structured output: the rows a grammar constrains get a token mask, computed on the host while the forward
  // pass runs; device sampling waits for it right before it samples, host sampling before its first row.
  std::vector<int32_t> mask_rows(sampled_ids.size(), -1);
  std::vector<Active*> masked;
  for (size_t row = 0; row < sampled_ids.size(); ++row) {
    Active& a = active_.at(sampled_ids[row]);
    if (a.phase != GrammarPhase::kPrelude && a.phase != GrammarPhase::kActive) continue;
    mask_rows[row] = static_cast<int32_t>(masked.size());
    masked.push_back(&a);
    if (on_device) batch.sampling[row].mask_row = mask_rows[row];
  }
  const int32_t words = token_mask_words(config().vocab_size);
  // Whatever happens below, the workers are done with masks_ and the matchers when step() returns.
  struct WaitForMasks {
    grammar::MaskWorkers* workers;
    ~WaitForMasks() {
      if (!workers) return;
      try {
        workers->wait();
      } catch (...) {  // already reported on the normal path
      }
    }
  } wait_for_masks{masked.empty() ? nullptr : &mask_workers_};
  if (!masked.empty()) {
    std::vector<grammar::MaskJob> jobs;
    for (Active* a : masked) {
      const GrammarConstraint& g = *a->req.grammar;
      grammar::MaskJob job{g.grammar.get(), &*a->matcher, {}};
      if (a->phase == GrammarPhase::kPrelude)  // the answer may still open or skip its reasoning
        for (int32_t t : {g.think_start, g.think_end})
          if (t >= 0) job.also_allowed.push_back(t);
      jobs.push_back(std::move(job));
    }
    masks_.resize(masked.size() * words);
    mask_workers_.submit(std::move(jobs), words, masks_.data());
    batch.token_masks = [this]() -> const std::vector<uint32_t>& {
      mask_workers_.wait();  // rethrows a failure of the mask work
      return masks_;
    };
  }
  ForwardOutput out = backend_->forward(batch);
  if (!masked.empty()) {  // a backend that samples on the host never asked: wait here
    counters_.grammar_mask_seconds += mask_workers_.wait();
    counters_.grammar_masks += static_cast<int64_t>(masked.size());
  }
  if (on_device && out.sampled.size() != sampled_ids.size())
    fail(ErrorKind::kInternal, "the backend sampled " + std::to_string(out.sampled.size()) + " rows of " +
                                   std::to_string(sampled_ids.size()));
  sched_.commit(plan);
  for (const ScheduledChunk& c : plan.chunks)
    if (sched_.seq(c.seq_id).num_prompt > c.start_pos)
      counters_.prompt_tokens += std::min(c.num_tokens, sched_.seq(c.seq_id).num_prompt - c.start_pos);

  for (size_t row = 0; row < sampled_ids.size(); ++row) {
    const int64_t id = sampled_ids[row];
    Active& a = active_.at(id);
    std::optional<TokenLogprobs> logprobs;
    const uint32_t* mask = mask_rows[row] >= 0 ? masks_.data() + size_t(mask_rows[row]) * words : nullptr;
    int32_t token = on_device
                        ? out.sampled[row]
                        : sample_on_host(a, out.logits.data() + row * out.vocab, out.vocab, mask, &logprobs);
    if (token < 0 || token >= config().vocab_size)
      fail(ErrorKind::kInternal, "sampled token id " + std::to_string(token) + " is outside the vocabulary");
    token = apply_thinking_budget(a, token);
    ++a.penalties.output_counts[token];
    ++a.generated;
    ++counters_.generated_tokens;
    FinishReason fr = check_stop(a, token);
    if (a.phase != GrammarPhase::kNone) {
      const bool was_active = a.phase == GrammarPhase::kActive;
      bool follows = false;
      try {
        follows = advance_grammar(a, token);
      } catch (const Error&) {  // a state too ambiguous to follow (grammar/matcher.h)
      }
      if (!follows) {
        // The mask allowed only what the grammar accepts; a refusal means a forced token (a thinking budget's
        // end marker outside reasoning) or a bug: end the answer rather than break its structure.
        log_warn("request ", id, ": token ", token, " does not follow its grammar; stopping it");
        fr = FinishReason::kStop;
      } else if (was_active && a.matcher->can_finish()) {
        const auto& stops = a.req.grammar->grammar->vocab().stop_ids();
        if (std::find(stops.begin(), stops.end(), token) != stops.end())
          fr = FinishReason::kStop;  // the structure is complete (even with ignore_eos)
      }
    }
    TokenEvent ev;
    ev.request_id = id;
    ev.token = token;
    ev.finish = fr;
    if (fr == FinishReason::kStop) {
      ev.stop_token = token;
      const auto& stop_ids = a.req.stop_token_ids;
      ev.is_eos = std::find(stop_ids.begin(), stop_ids.end(), token) == stop_ids.end();
    }
    ev.logprobs = std::move(logprobs);
    ev.cached_tokens = std::max(0, sched_.seq(id).num_cached);
    ev.cache_written_tokens = sched_.seq(id).num_kept_written;
    events.push_back(std::move(ev));
    if (fr != FinishReason::kNone) {
      sched_.finish(id);
      active_.erase(id);
    } else {
      sched_.append_token(id, token);
    }
  }
  return events;
}

}  // namespace m3
