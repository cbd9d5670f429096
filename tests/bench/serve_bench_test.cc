// Request arrival times of the load generator: all at once for an infinite rate; otherwise gamma gaps
// rescaled so the last request goes out at n / rate (vLLM), evenly spaced for infinite burstiness, and the
// same for the same seed. And whole runs of the prefix_repetition and agent datasets against the in-process
// SSE server: request counts, ignore_eos, the per-turn table and the result JSON's per_turn array.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "bench/serve_bench.h"
#include "common/error.h"
#include "sse_test_server.h"

namespace m3::bench {
namespace {

TEST(BenchArrivalTimes, InfiniteRateSendsEverythingAtOnce) {
  EXPECT_EQ(arrival_times(5, kInfiniteRate, 1.0, 0), std::vector<double>(5, 0.0));
  EXPECT_TRUE(arrival_times(0, 10.0, 1.0, 0).empty());
}

TEST(BenchArrivalTimes, PoissonAndGammaArrivalsEndAtNOverRate) {
  for (const double burstiness : {1.0, 0.3, 4.0}) {
    const std::vector<double> t = arrival_times(50, 10.0, burstiness, 3);
    ASSERT_EQ(t.size(), 50u);
    EXPECT_TRUE(std::is_sorted(t.begin(), t.end())) << "burstiness " << burstiness;
    EXPECT_GT(t.front(), 0.0) << "burstiness " << burstiness;
    EXPECT_NEAR(t.back(), 5.0, 1e-9) << "burstiness " << burstiness;
    EXPECT_EQ(t, arrival_times(50, 10.0, burstiness, 3)) << "burstiness " << burstiness;
    EXPECT_NE(t, arrival_times(50, 10.0, burstiness, 4)) << "burstiness " << burstiness;
  }
}

TEST(BenchArrivalTimes, InfiniteBurstinessIsEvenlySpaced) {
  const std::vector<double> t = arrival_times(4, 2.0, kInfiniteRate, 0);
  ASSERT_EQ(t.size(), 4u);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], 0.5 * double(i + 1), 1e-12) << i;
}

namespace fs = std::filesystem;
using nlohmann::json;

// Completions streams of two chunks with usage (cached_tokens 7); remembers every generation request's body.
// Its /metrics counts (e + 1) routed tokens for expert e of 4 per request so far.
class CountingServer {
 public:
  std::vector<json> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  std::string url() const { return server_.url(); }

 private:
  TestReply reply(const TestRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    if (req.target == "/metrics") {
      std::string text = "# TYPE m3:moe_expert_tokens_total counter\n";
      for (int e = 0; e < 4; ++e)
        text += "m3:moe_expert_tokens_total{model_name=\"m\",expert=\"" + std::to_string(e) + "\"} " +
                std::to_string(bodies_.size() * (e + 1)) + "\n";
      return {200, {text}};
    }
    bodies_.push_back(json::parse(req.body, nullptr, false));
    const std::string chunk = "data: {\"choices\":[{\"index\":0,\"text\":\" ok\"}]}\n\n";
    return {200,
            {chunk, chunk,
             "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":2,"
             "\"prompt_tokens_details\":{\"cached_tokens\":7}}}\n\n",
             "data: [DONE]\n\n"}};
  }
  std::mutex mu_;
  std::vector<json> bodies_;
  SseTestServer server_{[this](const TestRequest& r) { return reply(r); }};  // last: stops first
};

class BenchServeDatasets : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("m3_bench_datasets_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    o_.base_url = server_.url();
    o_.model = "m";
    o_.tokenizer = "tests/fixtures/minimax-m3/tokenizer.json";
    o_.disable_tqdm = true;
    o_.save_result = true;
    o_.result_dir = dir_.string();
    o_.result_filename = "result.json";
  }
  void TearDown() override { fs::remove_all(dir_); }

  json run() {
    testing::internal::CaptureStdout();
    int status = -1;
    try {
      status = run_serve_benchmark(o_);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
    out_ = testing::internal::GetCapturedStdout();
    EXPECT_EQ(status, 0);
    std::ifstream in(dir_ / "result.json");
    return json::parse(in, nullptr, false);
  }

  CountingServer server_;
  fs::path dir_;
  ServeBenchOptions o_;
  std::string out_;
};

TEST_F(BenchServeDatasets, PrefixRepetitionSendsNumPrompts) {
  o_.dataset_name = "prefix_repetition";
  o_.random.num_prompts = 6;
  o_.prefix_repetition = {0, 12, 4, 3, 5, 0};
  const json result = run();
  ASSERT_FALSE(result.is_discarded()) << out_;
  EXPECT_EQ(result["num_prompts"], 6);
  EXPECT_EQ(result["completed"], 6);
  EXPECT_FALSE(result.contains("per_turn"));
  EXPECT_EQ(out_.find("Per-Turn"), std::string::npos);
  const std::vector<json> bodies = server_.bodies();
  ASSERT_EQ(bodies.size(), 6u);
  for (const json& b : bodies) {
    EXPECT_EQ(b["max_tokens"], 5);
    EXPECT_FALSE(b.contains("ignore_eos"));  // as vLLM: only the random dataset forces it
  }
}

TEST_F(BenchServeDatasets, AgentReportsPerTurn) {
  o_.dataset_name = "agent";
  o_.agent = {2, 3, 16, 4, 2, 0};
  o_.max_concurrency = 1;
  const json result = run();
  ASSERT_FALSE(result.is_discarded()) << out_;
  EXPECT_EQ(result["num_prompts"], 6);  // conversations x turns
  EXPECT_EQ(result["completed"], 6);
  ASSERT_EQ(result["per_turn"].size(), 3u) << result.dump();
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(result["per_turn"][t]["turn"], t);
    EXPECT_EQ(result["per_turn"][t]["requests"], 2);
    EXPECT_EQ(result["per_turn"][t]["mean_prompt_tokens"], 20.0);
    EXPECT_EQ(result["per_turn"][t]["mean_cached_tokens"], 7.0);
  }
  const size_t report = out_.find("Serving Benchmark Result"), table = out_.find("Per-Turn Agent Result");
  ASSERT_NE(table, std::string::npos) << out_;
  EXPECT_LT(report, table);  // after vLLM's report
  const std::vector<json> bodies = server_.bodies();
  ASSERT_EQ(bodies.size(), 6u);
  for (const json& b : bodies) EXPECT_EQ(b["ignore_eos"], true);
  // The run's expert load from the server's counters (what --expert-placement reads back).
  EXPECT_EQ(result["expert_tokens"], json::array({6, 12, 18, 24})) << result.dump();
  EXPECT_NE(
      out_.find("Expert load: 4 experts, 60 routed tokens; busiest expert 3 at 1.60x the mean, idlest 0 at "
                "0.40x"),
      std::string::npos)
      << out_;
}

TEST_F(BenchServeDatasets, UnknownDatasetNamesTheFlag) {
  o_.dataset_name = "sharegpt";
  try {
    run_serve_benchmark(o_);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dataset-name"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("prefix_repetition"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(server_.bodies().empty());
}

}  // namespace
}  // namespace m3::bench
