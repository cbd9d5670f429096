// Data-parallel attention (DEP: vLLM's --data-parallel-size with --enable-expert-parallel, TensorRT-LLM's
// enable_attention_dp): each DP rank attends for its own requests with full heads and holds their KV pages in
// its own pool, so a request lives on one rank from admission to finish. One Scheduler per DP rank, all of
// them in rank 0's engine loop (vLLM's DP engine cores, stepped together): schedule() concatenates the ranks'
// plans in rank order and tags each chunk with its rank, so one forward call carries every rank's batch and a
// rank with nothing to do still joins the step's collectives (its dummy step). A new request goes to the
// least loaded rank (running + waiting requests, then KV pages in use, then the lowest rank: vLLM's DP
// coordinator balances on the same counts). With one rank this is exactly the Scheduler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "sched/scheduler.h"

namespace m3 {

class DataParallelScheduler {
 public:
  // `num_pages`: each rank's KV pool. The host tier of the prefix cache needs one rank.
  DataParallelScheduler(SchedulerOptions options, int num_pages, int page_size, int dp_size);

  int dp_size() const { return static_cast<int>(ranks_.size()); }
  // Queues a sequence on `dp_rank`, or on the least loaded rank when it is -1; returns the rank.
  int add(int64_t id, std::vector<int32_t> prompt, uint64_t cache_salt = 0, double keep_seconds = 0,
          int dp_rank = -1);
  void set_clock(double now);
  // Every rank's plan, rank 0's chunks first; ScheduledChunk::dp_rank says whose.
  StepPlan schedule();
  void commit(const StepPlan& plan);
  void append_token(int64_t id, int32_t token);
  void finish(int64_t id);  // as Scheduler::finish; an unknown id is ignored

  const SequenceState& seq(int64_t id) const;
  int rank_of(int64_t id) const;
  bool has_work() const;
  size_t num_waiting() const;
  size_t num_running() const;
  const Scheduler& rank(int r) const { return ranks_[r]; }
  int64_t admitted(int r) const { return admitted_[r]; }  // requests queued on rank r so far
  int num_pages() const;                                  // over the ranks
  int num_free_pages() const;                             // over the ranks
  PrefixCacheStats prefix_cache_stats() const;            // summed over the ranks
  const HostTier* host_tier() const { return ranks_[0].pool().host_tier(); }
  int reset_prefix_cache();
  std::vector<PageTransfer> take_transfers() { return ranks_[0].take_transfers(); }

 private:
  int least_loaded() const;

  std::vector<Scheduler> ranks_;
  std::map<int64_t, int> rank_of_;  // sequence -> DP rank
  std::vector<int64_t> admitted_;   // per rank
};

}  // namespace m3
