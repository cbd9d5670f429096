// One Scheduler per data-parallel attention rank, stepped together (sched/data_parallel.h).
#include "sched/data_parallel.h"

#include <tuple>

#include "common/error.h"

namespace m3 {

DataParallelScheduler::DataParallelScheduler(SchedulerOptions options, int num_pages, int page_size,
                                             int dp_size) {
  if (dp_size < 1) fail(ErrorKind::kInvalidArgument, "the data-parallel size must be at least 1");
  if (dp_size > 1 && options.num_host_kv_pages > 0)
    fail(ErrorKind::kUnsupported,
         "the prefix cache's host tier (--kv-offloading-size) needs --data-parallel-size 1");
  ranks_.reserve(dp_size);
  for (int r = 0; r < dp_size; ++r) ranks_.emplace_back(options, num_pages, page_size);
  admitted_.assign(dp_size, 0);
}

int DataParallelScheduler::least_loaded() const {
  int best = 0;
  auto load = [&](int r) {
    const Scheduler& s = ranks_[r];
    return std::tuple(s.num_running() + s.num_waiting(), s.pool().num_pages() - s.pool().num_free(), r);
  };
  for (int r = 1; r < dp_size(); ++r)
    if (load(r) < load(best)) best = r;
  return best;
}

int DataParallelScheduler::add(int64_t id, std::vector<int32_t> prompt, uint64_t cache_salt,
                               double keep_seconds, int dp_rank) {
  if (dp_rank >= dp_size()) fail(ErrorKind::kInternal, "no data-parallel rank " + std::to_string(dp_rank));
  const int r = dp_rank >= 0 ? dp_rank : least_loaded();
  ranks_[r].add(id, std::move(prompt), cache_salt, keep_seconds);
  rank_of_[id] = r;
  ++admitted_[r];
  return r;
}

void DataParallelScheduler::set_clock(double now) {
  for (Scheduler& s : ranks_) s.set_clock(now);
}

StepPlan DataParallelScheduler::schedule() {
  StepPlan all;
  for (int r = 0; r < dp_size(); ++r) {
    StepPlan p = ranks_[r].schedule();
    for (ScheduledChunk& c : p.chunks) {
      c.dp_rank = r;
      all.chunks.push_back(c);
    }
    all.preempted.insert(all.preempted.end(), p.preempted.begin(), p.preempted.end());
    all.num_tokens += p.num_tokens;
  }
  return all;
}

void DataParallelScheduler::commit(const StepPlan& plan) {
  std::vector<StepPlan> mine(ranks_.size());
  for (const ScheduledChunk& c : plan.chunks) {
    mine[c.dp_rank].chunks.push_back(c);
    mine[c.dp_rank].num_tokens += c.num_tokens;
  }
  for (int r = 0; r < dp_size(); ++r) ranks_[r].commit(mine[r]);
}

int DataParallelScheduler::rank_of(int64_t id) const {
  auto it = rank_of_.find(id);
  if (it == rank_of_.end()) fail(ErrorKind::kInternal, "unknown sequence " + std::to_string(id));
  return it->second;
}

void DataParallelScheduler::append_token(int64_t id, int32_t token) {
  ranks_[rank_of(id)].append_token(id, token);
}

void DataParallelScheduler::finish(int64_t id) {
  auto it = rank_of_.find(id);
  if (it == rank_of_.end()) return;
  ranks_[it->second].finish(id);
  rank_of_.erase(it);
}

const SequenceState& DataParallelScheduler::seq(int64_t id) const {
  return ranks_[rank_of(id)].seq(id);
}

bool DataParallelScheduler::has_work() const {
  for (const Scheduler& s : ranks_)
    if (s.has_work()) return true;
  return false;
}

size_t DataParallelScheduler::num_waiting() const {
  size_t n = 0;
  for (const Scheduler& s : ranks_) n += s.num_waiting();
  return n;
}

size_t DataParallelScheduler::num_running() const {
  size_t n = 0;
  for (const Scheduler& s : ranks_) n += s.num_running();
  return n;
}

int DataParallelScheduler::num_pages() const {
  int n = 0;
  for (const Scheduler& s : ranks_) n += s.pool().num_pages();
  return n;
}

int DataParallelScheduler::num_free_pages() const {
  int n = 0;
  for (const Scheduler& s : ranks_) n += s.pool().num_free();
  return n;
}

PrefixCacheStats DataParallelScheduler::prefix_cache_stats() const {
  PrefixCacheStats t;
  for (const Scheduler& s : ranks_) {
    t.queries += s.prefix_cache_stats().queries;
    t.hits += s.prefix_cache_stats().hits;
    t.host_hits += s.prefix_cache_stats().host_hits;
  }
  return t;
}

int DataParallelScheduler::reset_prefix_cache() {
  int n = 0;
  for (Scheduler& s : ranks_) n += s.reset_prefix_cache();
  return n;
}

}  // namespace m3
