// Static expert placement (the offline form of EPLB; SGLang's --init-expert-location): from a recorded
// routing histogram, an order of the routed experts whose equal groups (one per expert-parallel rank) carry
// loads as even as the greedy rule makes them. The model then numbers its experts in that order: slot s holds
// checkpoint expert placement[s] (its weights and its router row), so a rank's experts stay one contiguous
// range of slots and every kernel is unchanged. Routing picks the same experts (ties, which the rule breaks
// toward the lower number, aside) and the combine sums them in slot order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace m3 {

// Tokens per expert in the Prometheus text of m3serve's /metrics (its m3:moe_expert_tokens_total lines), indexed
// by expert; -1 for an expert without a line; empty when there is none.
std::vector<int64_t> parse_expert_token_metrics(const std::string& metrics_text);

// Tokens per expert from `path`: JSON {"expert_tokens": [n0, n1, ...]} (what `m3 bench serve --save-result`
// records), or a saved /metrics text. kInvalidArgument naming the file when it cannot be read or
// does not give one count for each of the model's `num_experts` experts.
std::vector<int64_t> read_expert_loads(const std::string& path, int num_experts);

// The heaviest expert first, each onto the least loaded rank that has a slot left (ties: the lower rank);
// each rank's experts in ascending order. loads.size() must split into `ranks` equal groups.
std::vector<int32_t> balanced_expert_placement(const std::vector<int64_t>& loads, int ranks);

// --expert-placement FILE over `ranks` expert-parallel ranks: the balanced placement of the file's loads,
// logged with the busiest rank's load before and after. kInvalidArgument naming the flag when there is no
// expert parallelism to place over (ranks < 2).
std::vector<int32_t> expert_placement_from_file(const std::string& path, int num_experts, int ranks);

// The busiest group's load over the mean group load (1 = perfectly even) for a placement (empty: identity).
double placement_imbalance(const std::vector<int64_t>& loads, const std::vector<int32_t>& placement,
                           int ranks);

}  // namespace m3
