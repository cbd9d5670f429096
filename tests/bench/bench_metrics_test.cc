// Benchmark metrics against hand-computed numpy values and vLLM's definitions on a synthetic timeline
// (TPOT, pooled ITL, retokenized output counts, goodput, peaks), the printed report's layout and the result
// JSON's keys.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/bench_metrics.h"

namespace m3::bench {
namespace {

RequestOutput ok(double start, double ttft, std::vector<double> itl, double latency, int output_tokens,
                 int prompt_len, std::string text = "") {
  RequestOutput o;
  o.success = true;
  o.start_time = start;
  o.ttft = ttft;
  o.itl = std::move(itl);
  o.latency = latency;
  o.output_tokens = output_tokens;
  o.prompt_len = prompt_len;
  o.generated_text = std::move(text);
  return o;
}

RequestOutput failed(const std::string& error) {
  RequestOutput o;
  o.error = error;
  o.prompt_len = 10;
  return o;
}

TEST(BenchPercentile, MatchesNumpyLinearInterpolation) {
  // numpy.percentile values computed by hand: index = p / 100 * (n - 1), linear between neighbours.
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 99), 3.97, 1e-12);
  EXPECT_NEAR(percentile({15, 20, 35, 40, 50}, 40), 29.0, 1e-12);
  EXPECT_NEAR(percentile({0.5, 0.1, 0.2}, 99), 0.494, 1e-12);  // unsorted input
  EXPECT_NEAR(percentile({0.5, 0.1, 0.2}, 25), 0.15, 1e-12);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 100), 3.0);
  EXPECT_DOUBLE_EQ(percentile({}, 99), 0.0);  // vLLM: np.percentile(values or 0, p)
}

TEST(BenchSummarize, MeanMedianPopulationStdInMilliseconds) {
  const MetricStats s = summarize_ms({0.001, 0.002, 0.003, 0.004}, {50, 99});
  EXPECT_NEAR(s.mean, 2.5, 1e-9);
  EXPECT_NEAR(s.median, 2.5, 1e-9);
  EXPECT_NEAR(s.std, std::sqrt(1.25), 1e-9);  // numpy.std (ddof = 0)
  ASSERT_EQ(s.percentiles.size(), 2u);
  EXPECT_NEAR(s.percentiles[1].second, 3.97, 1e-9);
  const MetricStats empty = summarize_ms({}, {99});
  EXPECT_EQ(empty.mean, 0.0);
  EXPECT_EQ(empty.percentiles[0].second, 0.0);
}

// A: 4 tokens from usage; B: no usage (the text is re-tokenized: 2 tokens); C: failed; D: one token.
std::vector<RequestOutput> timeline() {
  return {ok(0.0, 0.1, {0.02, 0.03, 0.05}, 0.2, 4, 32), ok(0.05, 0.2, {0.1}, 0.3, 0, 30, "ab"),
          failed("HTTP 500"), ok(0.4, 0.05, {}, 0.05, 1, 31)};
}

TEST(BenchCalculateMetrics, FollowsVllmDefinitions) {
  ReportOptions opt;
  opt.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  opt.goodput.ttft_ms = 150;
  const auto count = [](const std::string& text) { return static_cast<int>(text.size()); };
  const BenchmarkMetrics m = calculate_metrics(timeline(), 2.0, opt, count);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 32 + 30 + 31);
  EXPECT_EQ(m.total_output, 4 + 2 + 1);
  EXPECT_EQ(m.output_lens, (std::vector<int>{4, 2, 0, 1}));
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 3.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, (93 + 7) / 2.0);
  EXPECT_DOUBLE_EQ(m.request_goodput, 1.0);  // A (100 ms) and D (50 ms) meet the 150 ms TTFT objective

  // TPOT = (E2EL - TTFT) / (tokens - 1), only for requests with more than one token.
  const MetricStats* tpot = m.find("tpot");
  ASSERT_NE(tpot, nullptr);
  EXPECT_NEAR(tpot->mean, ((0.2 - 0.1) / 3 + (0.3 - 0.2) / 1) / 2 * 1000, 1e-9);
  // ITL pools every gap of every request: {0.02, 0.03, 0.05, 0.1}.
  const MetricStats* itl = m.find("itl");
  EXPECT_NEAR(itl->mean, 50.0, 1e-9);
  EXPECT_NEAR(itl->median, 40.0, 1e-9);
  EXPECT_NEAR(itl->percentiles[0].second, (0.05 + 0.05 * 0.97) * 1000, 1e-9);
  EXPECT_NEAR(m.find("ttft")->mean, (0.1 + 0.2 + 0.05) / 3 * 1000, 1e-9);
  EXPECT_NEAR(m.find("e2el")->median, 200.0, 1e-9);
  EXPECT_EQ(m.find("client_queue_time"), nullptr);  // only with --max-concurrency

  EXPECT_EQ(m.max_concurrent_requests, 2);           // A and B overlap; D starts after both ended
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 7.0);  // every chunk falls in the first second
}

TEST(BenchCalculateMetrics, AllFailedReportsZeros) {
  const BenchmarkMetrics m = calculate_metrics({failed("x"), failed("y")}, 0.5, ReportOptions{}, nullptr);
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 2);
  EXPECT_EQ(m.total_output, 0);
  EXPECT_EQ(m.find("ttft")->mean, 0.0);
  EXPECT_EQ(m.max_concurrent_requests, 0);
}

TEST(BenchCalculateMetrics, QueueMetricsWithConcurrencyLimit) {
  ReportOptions opt;
  opt.max_concurrency = 2;
  opt.request_rate = 4.0;
  std::vector<RequestOutput> outs = {ok(0.0, 0.1, {}, 0.1, 1, 5), ok(0.1, 0.1, {}, 0.1, 1, 5)};
  outs[1].client_queue_time = 0.3;
  const BenchmarkMetrics m = calculate_metrics(outs, 1.0, opt, nullptr);
  ASSERT_NE(m.find("client_queue_time"), nullptr);
  EXPECT_NEAR(m.find("client_queue_time")->mean, 150.0, 1e-9);
  EXPECT_NEAR(m.find("e2el_including_client_queue")->mean, 250.0, 1e-9);
}

TEST(BenchReport, VllmLayout) {
  ReportOptions opt;
  opt.max_concurrency = 4;
  const BenchmarkMetrics m = calculate_metrics(timeline(), 2.0, opt, [](const std::string&) { return 2; });
  const std::string r = render_report(m, opt);
  EXPECT_EQ(r.rfind("============ Serving Benchmark Result ============\n", 0), 0u) << r;
  // "{:<40} {:<10}": label padded to 40, one space, value padded to 10.
  EXPECT_NE(r.find("\nSuccessful requests:                     3         \n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nFailed requests:                         1         \n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nMaximum request concurrency:             4         \n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nBenchmark duration (s):                  2.00      \n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nTotal generated tokens:                  7         \n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nPeak concurrent requests:                2.00      \n"), std::string::npos) << r;
  EXPECT_NE(r.find("\n---------------Time to First Token----------------\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\n-----Time per Output Token (excl. 1st token)------\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\n---------------Inter-token Latency----------------\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nP99 ITL (ms):"), std::string::npos) << r;
  EXPECT_EQ(r.find("End-to-end Latency"), std::string::npos) << r;  // e2el is not in the default selection
  EXPECT_EQ(r.find("Request rate configured"), std::string::npos) << r;
  EXPECT_EQ(r.find("Request goodput"), std::string::npos) << r;
  EXPECT_EQ(r.find("Client-side Queueing"), std::string::npos) << r;
  EXPECT_EQ(r.substr(r.size() - 51), std::string(50, '=') + "\n");

  opt.request_rate = 2.5;
  opt.percentile_metrics = {"e2el"};
  opt.metric_percentiles = {50, 99.9};
  opt.goodput.e2el_ms = 1000;
  const std::string r2 = render_report(calculate_metrics(timeline(), 2.0, opt, nullptr), opt);
  EXPECT_NE(r2.find("\nRequest rate configured (RPS):           2.50      \n"), std::string::npos) << r2;
  EXPECT_NE(r2.find("\nRequest goodput (req/s):"), std::string::npos) << r2;
  EXPECT_NE(r2.find("\n----------------End-to-end Latency----------------\n"), std::string::npos) << r2;
  EXPECT_NE(r2.find("\nP99.9 E2EL (ms):"), std::string::npos) << r2;
  EXPECT_NE(r2.find("\nP50 E2EL (ms):"), std::string::npos) << r2;
  EXPECT_EQ(r2.find("TTFT"), std::string::npos) << r2;
}

TEST(BenchReport, FailuresAreListedUpToTen) {
  std::vector<RequestOutput> outs(12, failed("boom"));
  outs[0] = ok(0, 0.1, {}, 0.1, 1, 1);
  const std::string f = render_failures(outs);
  EXPECT_EQ(f.rfind("Failed requests during benchmark run detected (capping to 10):\nError 0: boom\n", 0),
            0u);
  EXPECT_NE(f.find("Error 9: boom\n"), std::string::npos);
  EXPECT_EQ(f.find("Error 10"), std::string::npos);
  EXPECT_EQ(render_failures({ok(0, 0.1, {}, 0.1, 1, 1)}), "");
}

TEST(BenchFormatting, PythonFloatsAndPercentileNames) {
  EXPECT_EQ(python_float(kInfiniteRate), "inf");
  EXPECT_EQ(python_float(1.0), "1.0");
  EXPECT_EQ(python_float(10.0), "10.0");
  EXPECT_EQ(python_float(0.5), "0.5");
  EXPECT_EQ(python_float(-2.25), "-2.25");
  EXPECT_EQ(python_float(123.456), "123.456");
  EXPECT_EQ(python_float(0.0001), "0.0001");
  EXPECT_EQ(python_float(0.00001), "1e-05");
  EXPECT_EQ(python_float(1e16), "1e+16");
  EXPECT_EQ(python_float(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(percentile_name(99), "99");
  EXPECT_EQ(percentile_name(99.9), "99.9");
  EXPECT_EQ(percentile_name(50.0), "50");
}

TEST(BenchResultJson, VllmKeysInOrderAndDetailPruning) {
  ReportOptions opt;
  opt.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  const std::vector<RequestOutput> outs = timeline();
  const BenchmarkMetrics m = calculate_metrics(outs, 2.0, opt, [](const std::string&) { return 2; });
  const nlohmann::ordered_json bench = benchmark_result_json(m, outs, opt);
  RunInfo info;
  info.date = "20250101-120000";
  info.backend = "openai-chat";
  info.model_id = "/models/MiniMax-M3/";
  info.tokenizer_id = "/models/MiniMax-M3";
  info.num_prompts = 4;
  info.metadata = {{"tp", "8"}};
  info.max_concurrency = 4;

  const nlohmann::ordered_json full = result_file_json(info, bench, /*save_detailed=*/true);
  std::vector<std::string> keys;
  for (const auto& [k, v] : full.items()) keys.push_back(k);
  const std::vector<std::string> head = {"date",
                                         "endpoint_type",
                                         "backend",
                                         "label",
                                         "model_id",
                                         "tokenizer_id",
                                         "num_prompts",
                                         "tp",
                                         "request_rate",
                                         "burstiness",
                                         "max_concurrency",
                                         "duration",
                                         "completed",
                                         "failed",
                                         "total_input_tokens",
                                         "total_output_tokens",
                                         "request_throughput",
                                         "request_goodput",
                                         "output_throughput",
                                         "total_token_throughput",
                                         "input_lens",
                                         "output_lens",
                                         "ttfts",
                                         "itls",
                                         "latencies",
                                         "start_times",
                                         "queue_times",
                                         "generated_texts",
                                         "errors",
                                         "max_output_tokens_per_s",
                                         "max_concurrent_requests",
                                         "rtfx",
                                         "mean_ttft_ms",
                                         "median_ttft_ms",
                                         "std_ttft_ms",
                                         "p99_ttft_ms",
                                         "mean_tpot_ms"};
  ASSERT_GE(keys.size(), head.size());
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + head.size()), head);
  EXPECT_TRUE(full.contains("p99_e2el_ms"));
  EXPECT_EQ(full["request_rate"], "inf");
  EXPECT_TRUE(full["label"].is_null());
  EXPECT_TRUE(full["request_goodput"].is_null());
  EXPECT_EQ(full["burstiness"], 1.0);
  EXPECT_EQ(full["max_concurrency"], 4);
  EXPECT_EQ(full["ttfts"].size(), 4u);
  EXPECT_EQ(full["itls"][0].size(), 3u);
  EXPECT_EQ(full["errors"][2], "HTTP 500");
  EXPECT_EQ(full["output_lens"], nlohmann::json({4, 2, 0, 1}));

  const nlohmann::ordered_json brief = result_file_json(info, bench, /*save_detailed=*/false);
  for (const char* k :
       {"input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"})
    EXPECT_FALSE(brief.contains(k)) << k;
  EXPECT_TRUE(brief.contains("latencies"));  // vLLM keeps these two
  EXPECT_TRUE(brief.contains("queue_times"));

  EXPECT_EQ(default_result_filename(info), "openai-chat-infqps-concurrency4-MiniMax-M3-20250101-120000.json");
  info.label = "m3";
  info.request_rate = 2.5;
  info.max_concurrency.reset();
  EXPECT_EQ(default_result_filename(info), "m3-2.5qps-MiniMax-M3-20250101-120000.json");
}

}  // namespace
}  // namespace m3::bench
