// Reading a routing histogram and the greedy balanced placement.
#include "config/expert_placement.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"

namespace m3 {

std::vector<int64_t> parse_expert_token_metrics(const std::string& text) {
  static const std::regex line(
      R"re(m3:moe_expert_tokens_total\{[^}]*expert="(\d+)"[^}]*\}\s+([0-9.eE+]+))re");
  std::vector<int64_t> loads;
  for (std::sregex_iterator it(text.begin(), text.end(), line), end; it != end; ++it) {
    const size_t e = std::stoul((*it)[1].str());
    if (e >= 1u << 16) continue;  // not an expert count
    if (loads.size() <= e) loads.resize(e + 1, -1);
    loads[e] = static_cast<int64_t>(std::stod((*it)[2].str()));
  }
  return loads;
}

std::vector<int64_t> read_expert_loads(const std::string& path, int num_experts) {
  const std::string flag = "--expert-placement " + path + ": ";
  std::ifstream in(path);
  if (!in) fail(ErrorKind::kInvalidArgument, flag + "cannot read the file");
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  std::vector<int64_t> loads;
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start != std::string::npos && text[start] == '{') {
    try {
      loads = nlohmann::json::parse(text).at("expert_tokens").get<std::vector<int64_t>>();
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::kInvalidArgument, flag + "expected {\"expert_tokens\": [counts]}: " + e.what());
    }
  } else {  // /metrics text
    loads = parse_expert_token_metrics(text);
    if (loads.empty())
      fail(ErrorKind::kInvalidArgument,
           flag + "neither JSON nor /metrics text with m3:moe_expert_tokens_total");
  }
  if (static_cast<int>(loads.size()) != num_experts ||
      std::any_of(loads.begin(), loads.end(), [](int64_t n) { return n < 0; }))
    fail(ErrorKind::kInvalidArgument, flag + "needs one non-negative count for each of the model's " +
                                          std::to_string(num_experts) + " experts");
  return loads;
}

std::vector<int32_t> balanced_expert_placement(const std::vector<int64_t>& loads, int ranks) {
  const int E = static_cast<int>(loads.size());
  if (ranks < 1 || E % ranks != 0)
    fail(ErrorKind::kInvalidArgument,
         std::to_string(E) + " experts do not split into " + std::to_string(ranks) + " ranks");
  const int per = E / ranks;
  std::vector<int32_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return loads[a] > loads[b]; });
  std::vector<std::vector<int32_t>> groups(ranks);
  std::vector<int64_t> load(ranks, 0);
  for (int32_t e : order) {
    int best = -1;
    for (int r = 0; r < ranks; ++r)
      if (int(groups[r].size()) < per && (best < 0 || load[r] < load[best])) best = r;
    groups[best].push_back(e);
    load[best] += loads[e];
  }
  std::vector<int32_t> placement;
  for (auto& g : groups) {
    std::sort(g.begin(), g.end());
    placement.insert(placement.end(), g.begin(), g.end());
  }
  return placement;
}

std::vector<int32_t> expert_placement_from_file(const std::string& path, int num_experts, int ranks) {
  if (ranks < 2)
    fail(ErrorKind::kInvalidArgument, "--expert-placement " + path +
                                          " places experts over expert-parallel ranks: it needs "
                                          "--enable-expert-parallel over 2 or more ranks");
  const std::vector<int64_t> loads = read_expert_loads(path, num_experts);
  std::vector<int32_t> placement = balanced_expert_placement(loads, ranks);
  log_info("expert placement from ", path, ": the busiest of ", ranks, " ranks carries ",
           placement_imbalance(loads, {}, ranks), "x the mean load in checkpoint order, ",
           placement_imbalance(loads, placement, ranks), "x placed");
  return placement;
}

double placement_imbalance(const std::vector<int64_t>& loads, const std::vector<int32_t>& placement,
                           int ranks) {
  const int E = static_cast<int>(loads.size()), per = E / std::max(1, ranks);
  int64_t total = 0, busiest = 0;
  for (int r = 0; r < ranks; ++r) {
    int64_t sum = 0;
    for (int s = r * per; s < (r + 1) * per; ++s) sum += loads[placement.empty() ? s : placement[s]];
    busiest = std::max(busiest, sum);
    total += sum;
  }
  return total > 0 ? double(busiest) * ranks / double(total) : 1.0;
}

}  // namespace m3
