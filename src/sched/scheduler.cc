// One scheduling pass per step; see scheduler.h for the policy.
#include "sched/scheduler.h"

#include <algorithm>
#include <span>

#include "common/error.h"

namespace m3 {

Scheduler::Scheduler(SchedulerOptions options, int num_pages, int page_size)
    : opt_(options),
      pool_(num_pages, page_size, options.enable_prefix_caching, options.num_host_kv_pages,
            options.retain_share) {
  if (opt_.max_num_seqs <= 0) fail(ErrorKind::kInvalidArgument, "--max-num-seqs must be positive");
  if (opt_.max_num_batched_tokens <= 0)
    fail(ErrorKind::kInvalidArgument, "--max-num-batched-tokens must be positive");
}

void Scheduler::add(int64_t id, std::vector<int32_t> prompt, uint64_t cache_salt, double keep_seconds) {
  M3_CHECK(!prompt.empty(), "empty prompt");
  M3_CHECK(!seqs_.count(id), "duplicate sequence id");
  SequenceState s;
  s.id = id;
  s.salt = s.chain = cache_salt;
  s.num_prompt = static_cast<int32_t>(prompt.size());
  s.keep_seconds = keep_seconds;
  const size_t P = size_t(pool_.page_size());
  if (pool_.prefix_caching())
    for (uint64_t h = cache_salt; (s.page_hashes.size() + 1) * P <= prompt.size();)
      s.page_hashes.push_back(h = BlockPool::chain_hash(
                                  h, std::span<const int32_t>(prompt).subspan(s.page_hashes.size() * P, P)));
  s.tokens = std::move(prompt);
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
}

const SequenceState& Scheduler::seq(int64_t id) const {
  auto it = seqs_.find(id);
  M3_CHECK(it != seqs_.end(), "unknown sequence id");
  return it->second;
}

int32_t Scheduler::chunk_size(const SequenceState& s, int32_t budget) const {
  const int32_t remaining = static_cast<int32_t>(s.tokens.size()) - s.num_computed;
  if (remaining <= budget) return remaining;
  // Cut chunks on page boundaries so the next chunk starts on a fresh MSA block.
  const int32_t end = (s.num_computed + budget) / pool_.page_size() * pool_.page_size();
  return end > s.num_computed ? end - s.num_computed : budget;
}

void Scheduler::take_cached_prefix(SequenceState& s) {
  if (!pool_.prefix_caching() || !s.block_table.empty()) return;
  const int max_pages = (static_cast<int>(s.tokens.size()) - 1) / pool_.page_size();
  int restored = 0;
  const int hit = pool_.acquire_prefix(s.block_table, s.tokens, s.salt, max_pages, &s.chain, &restored);
  s.registered_pages = hit;
  s.num_computed = hit * pool_.page_size();
  s.num_restored = restored * pool_.page_size();
  if (s.keep_seconds > 0) pool_.retain(s.block_table, pool_.clock() + s.keep_seconds);
}

bool Scheduler::next_page_in_flight(const SequenceState& s) const {
  const size_t k = s.block_table.size();
  if (k >= s.page_hashes.size() || (k + 1) * size_t(pool_.page_size()) >= s.tokens.size()) return false;
  for (int64_t id : running_) {
    const SequenceState& r = seqs_.at(id);
    if (size_t(r.registered_pages) <= k && r.page_hashes.size() > k && r.page_hashes[k] == s.page_hashes[k])
      return true;
  }
  return false;
}

void Scheduler::drop_pages(SequenceState& s) {
  pool_.release(s.block_table);
  s.num_computed = s.registered_pages = 0;
  s.chain = s.salt;
}

void Scheduler::preempt(int64_t id, StepPlan& plan) {
  SequenceState& s = seqs_.at(id);
  drop_pages(s);
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
  plan.preempted.push_back(id);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int32_t budget = opt_.max_num_batched_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    SequenceState& s = seqs_.at(running_[i]);
    const int32_t n = chunk_size(s, budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    // Make room by preempting the newest running sequences; if that is this one, it waits.
    bool placed = pool_.ensure(s.block_table, s.num_computed + n);
    while (!placed && running_.back() != s.id) {
      preempt(running_.back(), plan);
      placed = pool_.ensure(s.block_table, s.num_computed + n);
    }
    if (!placed) {
      preempt(s.id, plan);
      break;
    }
    plan.chunks.push_back(
        {s.id, s.num_computed, n, s.num_computed + n == static_cast<int32_t>(s.tokens.size())});
    budget -= n;
    ++i;
  }
  while (!waiting_.empty() && budget > 0 && running_.size() < static_cast<size_t>(opt_.max_num_seqs)) {
    SequenceState& s = seqs_.at(waiting_.front());
    take_cached_prefix(s);
    const int32_t n = chunk_size(s, budget);
    // First come, first served: no overtaking. The cached pages it took go back until it is admitted.
    if (next_page_in_flight(s) || !pool_.ensure(s.block_table, s.num_computed + n)) {
      drop_pages(s);
      break;
    }
    if (pool_.prefix_caching()) {
      prefix_stats_.queries += static_cast<int64_t>(s.tokens.size());
      prefix_stats_.hits += s.num_computed;
      prefix_stats_.host_hits += s.num_restored;
    }
    if (s.num_cached < 0) s.num_cached = std::min(s.num_computed, s.num_prompt);
    waiting_.pop_front();
    running_.push_back(s.id);
    plan.chunks.push_back(
        {s.id, s.num_computed, n, s.num_computed + n == static_cast<int32_t>(s.tokens.size())});
    budget -= n;
  }
  plan.num_tokens = opt_.max_num_batched_tokens - budget;
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  const int P = pool_.page_size();
  for (const ScheduledChunk& c : plan.chunks) {
    auto it = seqs_.find(c.seq_id);
    if (it == seqs_.end()) continue;
    SequenceState& s = it->second;
    s.num_computed = c.start_pos + c.num_tokens;
    // Pages now full of computed tokens join the prefix cache.
    while (pool_.prefix_caching() && (s.registered_pages + 1) * P <= s.num_computed) {
      const std::span<const int32_t> page(s.tokens.data() + size_t(s.registered_pages) * P, size_t(P));
      const std::span<const int32_t> at(s.block_table.data() + s.registered_pages, 1);
      s.chain = pool_.register_page(at[0], s.chain, page);
      ++s.registered_pages;
      if (s.keep_seconds > 0 && s.registered_pages * P <= s.num_prompt)
        s.num_kept_written += P * pool_.retain(at, pool_.clock() + s.keep_seconds);
    }
  }
}

void Scheduler::append_token(int64_t id, int32_t token) {
  seqs_.at(id).tokens.push_back(token);
}

void Scheduler::finish(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  pool_.release(it->second.block_table);
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  seqs_.erase(it);
}

}  // namespace m3
