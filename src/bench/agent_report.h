// Per-turn results of the agent workload, printed after vLLM's report and saved as the result JSON's
// `per_turn` array: how many requests each turn index completed, their mean prompt tokens, mean and median
// TTFT, and mean cached prompt tokens (usage.prompt_tokens_details.cached_tokens) when the server reports
// them. A growing prompt with a flat TTFT is prefix caching at work.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/agent_workload.h"

namespace m3::bench {

struct TurnStats {
  int turn = 0;
  int requests = 0;  // completed (successful) requests of this turn index; the means are over these
  double mean_prompt_tokens = 0.0;
  double mean_ttft_ms = 0.0;
  double median_ttft_ms = 0.0;
  std::optional<double> mean_cached_tokens;  // unset when no request of the run reported cached_tokens
};

// One entry per turn index, in order.
std::vector<TurnStats> per_turn_stats(const std::vector<AgentTurn>& turns);

// The "Per-Turn Agent Result" table.
std::string render_per_turn(const std::vector<TurnStats>& stats);

// [{"turn", "requests", "mean_prompt_tokens", "mean_ttft_ms", "median_ttft_ms", "mean_cached_tokens"}, ...];
// mean_cached_tokens is null when the server did not report it.
nlohmann::ordered_json per_turn_json(const std::vector<TurnStats>& stats);

}  // namespace m3::bench
