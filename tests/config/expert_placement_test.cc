// Static expert placement: the histogram file in both forms (JSON and a saved /metrics), the greedy
// balanced order (each rank's experts ascending, loads evened out), and refusals that name the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "config/expert_placement.h"

namespace m3 {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(ExpertPlacement, ReadsJsonAndMetricsText) {
  EXPECT_EQ(read_expert_loads(write_file("ep_loads.json", R"({"expert_tokens": [5, 0, 7, 1]})"), 4),
            (std::vector<int64_t>{5, 0, 7, 1}));
  const std::string metrics =
      "# TYPE m3:moe_expert_tokens_total counter\n"
      "m3:moe_expert_tokens_total{model_name=\"m\",expert=\"1\"} 3\n"
      "m3:moe_expert_tokens_total{model_name=\"m\",expert=\"0\"} 12\n"
      "vllm:num_requests_running{model_name=\"m\"} 0\n";
  EXPECT_EQ(read_expert_loads(write_file("ep_metrics.txt", metrics), 2), (std::vector<int64_t>{12, 3}));
  for (const auto& [name, text, n] :
       {std::tuple{"ep_short.json", std::string(R"({"expert_tokens": [1, 2]})"), 4},
        std::tuple{"ep_none.txt", std::string("vllm:num_requests_running 0\n"), 2},
        std::tuple{"ep_bad.json", std::string("{\"tokens\": [1]}"), 1}}) {
    try {
      read_expert_loads(write_file(name, text), n);
      ADD_FAILURE() << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--expert-placement"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_expert_loads("/nonexistent/loads.json", 4), Error);
}

TEST(ExpertPlacement, BalancesTheGroups) {
  // Experts 0 and 1 are hot: in checkpoint order both land on rank 0.
  const std::vector<int64_t> loads = {100, 90, 10, 10, 5, 5, 1, 1};
  EXPECT_NEAR(placement_imbalance(loads, {}, 2), 2.0 * 210 / 222, 1e-9);
  const std::vector<int32_t> p = balanced_expert_placement(loads, 2);
  // Heaviest first onto the lighter rank (ties: the lower): 100+10+1+1 = 112 | 90+10+5+5 = 110.
  EXPECT_EQ(p, (std::vector<int32_t>{0, 3, 6, 7, 1, 2, 4, 5}));
  EXPECT_NEAR(placement_imbalance(loads, p, 2), 2.0 * 112 / 222, 1e-9);
  std::vector<int32_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int e = 0; e < 8; ++e) EXPECT_EQ(sorted[e], e) << "a permutation";
  EXPECT_THROW(balanced_expert_placement(loads, 3), Error);
  EXPECT_THROW(expert_placement_from_file(write_file("ep_ok.json", R"({"expert_tokens": [1, 2]})"), 2, 1),
               Error)
      << "one rank: nothing to place over";
}

}  // namespace
}  // namespace m3
