// Failed turns are left out of a turn's means (as vLLM's report leaves out failed requests); a request
// whose server sent no cached_tokens counts as 0 cached once any request of the run reported it.
#include "bench/agent_report.h"

#include <algorithm>
#include <cstdio>

#include "bench/bench_metrics.h"

namespace m3::bench {

std::vector<TurnStats> per_turn_stats(const std::vector<AgentTurn>& turns) {
  int num_turns = 0;
  bool reported = false;
  for (const AgentTurn& t : turns) {
    num_turns = std::max(num_turns, t.turn + 1);
    reported = reported || t.output.cached_tokens.has_value();
  }
  std::vector<TurnStats> stats(static_cast<size_t>(num_turns));
  for (int k = 0; k < num_turns; ++k) {
    TurnStats& s = stats[static_cast<size_t>(k)];
    s.turn = k;
    std::vector<double> ttfts;
    double prompt = 0.0, cached = 0.0;
    for (const AgentTurn& t : turns) {
      if (t.turn != k || !t.output.success) continue;
      ttfts.push_back(t.output.ttft * 1000.0);
      prompt += t.output.prompt_len;
      cached += t.output.cached_tokens.value_or(0);
    }
    s.requests = static_cast<int>(ttfts.size());
    if (s.requests > 0) {
      s.mean_prompt_tokens = prompt / s.requests;
      for (const double v : ttfts) s.mean_ttft_ms += v / s.requests;
      s.median_ttft_ms = percentile(ttfts, 50.0);
    }
    if (reported) s.mean_cached_tokens = s.requests > 0 ? cached / s.requests : 0.0;
  }
  return stats;
}

std::string render_per_turn(const std::vector<TurnStats>& stats) {
  const bool cached = !stats.empty() && stats.front().mean_cached_tokens.has_value();
  const size_t width = cached ? 70 : 56;  // the columns below
  const std::string title = " Per-Turn Agent Result ";
  const size_t left = (width - title.size()) / 2;
  std::string r = std::string(left, '=') + title + std::string(width - left - title.size(), '=') + "\n";
  char line[160];
  std::snprintf(line, sizeof line, "%-6s%10s%14s%12s%14s%s\n", "Turn", "Requests", "Mean prompt", "Mean TTFT",
                "Median TTFT", cached ? "   Mean cached" : "");
  r += line;
  std::snprintf(line, sizeof line, "%-6s%10s%14s%12s%14s%s\n", "", "", "(tokens)", "(ms)", "(ms)",
                cached ? "      (tokens)" : "");
  r += line;
  for (const TurnStats& s : stats) {
    std::snprintf(line, sizeof line, "%-6d%10d%14.2f%12.2f%14.2f", s.turn, s.requests, s.mean_prompt_tokens,
                  s.mean_ttft_ms, s.median_ttft_ms);
    r += line;
    if (s.mean_cached_tokens) {
      std::snprintf(line, sizeof line, "%14.2f", *s.mean_cached_tokens);
      r += line;
    }
    r += "\n";
  }
  r += std::string(width, '=') + "\n";
  return r;
}

nlohmann::ordered_json per_turn_json(const std::vector<TurnStats>& stats) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const TurnStats& s : stats)
    out.push_back({{"turn", s.turn},
                   {"requests", s.requests},
                   {"mean_prompt_tokens", s.mean_prompt_tokens},
                   {"mean_ttft_ms", s.mean_ttft_ms},
                   {"median_ttft_ms", s.median_ttft_ms},
                   {"mean_cached_tokens", s.mean_cached_tokens ? nlohmann::ordered_json(*s.mean_cached_tokens)
                                                               : nlohmann::ordered_json(nullptr)}});
  return out;
}

}  // namespace m3::bench
