// The scheduler's decision for one engine step, as plain data (vLLM's SchedulerOutput): which sequences run,
// how many of their tokens are computed, and whether the step yields a token for them.
#pragma once

#include <cstdint>
#include <vector>

namespace m3 {

struct ScheduledChunk {
  int64_t seq_id = 0;
  int32_t start_pos = 0;   // tokens of the sequence already in the KV cache
  int32_t num_tokens = 0;  // tokens computed this step, starting at start_pos
  bool samples = false;    // the chunk reaches the end of the known tokens: sample the next one
  int32_t dp_rank = 0;     // the data-parallel attention rank that holds the sequence (sched/data_parallel.h)
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<int64_t> preempted;  // sequences whose pages were freed this step (they will recompute)
  int32_t num_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

}  // namespace m3
