// Continuous batching scheduler: running sequences first (decode tokens and unfinished prefills), then
// waiting ones in arrival order, under a token budget per step (max_num_batched_tokens) and a cap on running
// sequences (max_num_seqs). Prefill is chunked; a chunk cut by the budget ends on a page (MSA block)
// boundary. When pages run out, the most recently admitted running sequence is preempted by recompute: its
// pages are freed and it returns to the front of the queue with its tokens kept. With prefix caching a
// sequence that is admitted (or readmitted after preemption) first takes the cached pages of its longest
// known prefix (BlockPool::acquire_prefix; never the page of its last known token, which is computed for the
// logits) and starts computing at the first page it lacks; every page it fills is registered for the next
// ones. Pages found only in the pool's host tier come back by a copy (take_transfers) instead of a recompute.
// A waiting sequence whose next uncached page another running sequence is computing right now waits until
// that page is registered, so requests that share a prefix and arrive together compute it once. A request
// that asked for its prompt to be kept (keep_seconds, Anthropic cache_control) has its prompt pages retained
// for that long (BlockPool::retain). Deterministic given the clock the engine sets; no CUDA, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "kv/block_pool.h"
#include "sched/step_plan.h"

namespace m3 {

struct SchedulerOptions {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  bool enable_prefix_caching = false;
  int num_host_kv_pages = 0;  // the prefix cache's host tier, in pages (0: none)
  double retain_share = 0.5;  // at most this share of the pool is kept for cache_control
};

// Prefix-cache counters, in tokens (vLLM's vllm:prefix_cache_queries / vllm:prefix_cache_hits): the known
// tokens of every admission, and how many of them came from cached pages.
struct PrefixCacheStats {
  int64_t queries = 0, hits = 0;
  int64_t host_hits = 0;  // of the hits, tokens restored from the host tier (vllm:external_prefix_cache_hits)
};

struct SequenceState {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // prompt then generated tokens
  int32_t num_prompt = 0;
  int32_t num_computed = 0;  // tokens whose KV is in the cache
  std::vector<int32_t> block_table;
  uint64_t salt = 0;             // starts the prefix-cache hash chain (the request's cache_salt)
  int32_t num_cached = -1;       // prompt tokens taken from cached pages at the first admission (-1: not yet)
  int32_t registered_pages = 0;  // leading pages of block_table that are cached or registered
  uint64_t chain = 0;            // hash of the last of them (salt if none)
  std::vector<uint64_t> page_hashes;  // the hash chain of the prompt's full pages (prefix caching)
  double keep_seconds = 0;            // keep the prompt's pages this long (0: LRU alone)
  int32_t num_restored = 0;           // of its cached tokens at the last admission, those from the host tier
  int32_t num_kept_written = 0;       // prompt tokens of pages this sequence registered and had kept
};

class Scheduler {
 public:
  Scheduler(SchedulerOptions options, int num_pages, int page_size);

  // Queues a sequence; the caller guarantees prompt + max new tokens fit one sequence's page budget.
  void add(int64_t id, std::vector<int32_t> prompt, uint64_t cache_salt = 0, double keep_seconds = 0);
  // The clock (seconds) that retention times are measured on; the engine sets it before each schedule().
  void set_clock(double now) { pool_.set_clock(now); }
  StepPlan schedule();
  // After the forward pass: marks the planned tokens computed.
  void commit(const StepPlan& plan);
  void append_token(int64_t id, int32_t token);
  void finish(int64_t id);  // frees the sequence's pages (finished or aborted), whether waiting or running

  const SequenceState& seq(int64_t id) const;
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  const BlockPool& pool() const { return pool_; }
  const PrefixCacheStats& prefix_cache_stats() const { return prefix_stats_; }
  // Forgets the cached pages no sequence holds (POST /reset_prefix_cache); returns how many.
  int reset_prefix_cache() { return pool_.reset_cache(); }
  // The page copies (host tier spills and restores) the backend must run before the next forward pass.
  std::vector<PageTransfer> take_transfers() { return pool_.take_transfers(); }

 private:
  int32_t chunk_size(const SequenceState& s, int32_t budget) const;
  void preempt(int64_t id, StepPlan& plan);
  // Takes the sequence's cached prefix pages (prefix caching, empty block table).
  void take_cached_prefix(SequenceState& s);
  // Releases its pages; it will compute from position 0 (or its cached prefix) again.
  void drop_pages(SequenceState& s);
  // True when a running sequence is computing, unregistered yet, the page `s` would take from the cache next.
  bool next_page_in_flight(const SequenceState& s) const;

  SchedulerOptions opt_;
  BlockPool pool_;
  std::map<int64_t, SequenceState> seqs_;
  std::deque<int64_t> waiting_;
  std::vector<int64_t> running_;  // admission order
  PrefixCacheStats prefix_stats_;
};

}  // namespace m3
