// Aggregation of per-request measurements into vLLM's serving-benchmark metrics (spec/serving-api.md §6.1):
// TPOT = (E2EL - TTFT) / (output_tokens - 1) for requests with more than one token, ITL gaps pooled over all
// requests, mean / median / std (population) / percentiles with numpy's default linear interpolation, request
// / output / total token throughput, goodput against SLOs. Also the printed report ("Serving Benchmark
// Result" block, vLLM's layout) and the --save-result JSON with vLLM's keys.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/request_client.h"

namespace m3::bench {

constexpr double kInfiniteRate = std::numeric_limits<double>::infinity();

// numpy.percentile(values, p) with the default "linear" method; 0 for no values (vLLM's `values or 0`).
double percentile(std::vector<double> values, double p);

struct MetricStats {  // milliseconds
  double mean = 0.0;
  double median = 0.0;
  double std = 0.0;
  std::vector<std::pair<double, double>> percentiles;  // (p, value)
};
// Stats of `seconds`, reported in milliseconds.
MetricStats summarize_ms(const std::vector<double>& seconds, const std::vector<double>& percentiles);

// Service-level objectives for goodput (--goodput ttft:MS tpot:MS e2el:MS).
struct GoodputSlos {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};

// What the report and the result JSON depend on besides the measurements.
struct ReportOptions {
  std::optional<int> max_concurrency;
  double request_rate = kInfiniteRate;
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
  std::vector<double> metric_percentiles = {99.0};
  GoodputSlos goodput;
};

// The metric names --percentile-metrics accepts, in report order.
const std::vector<std::string>& known_percentile_metrics();

struct BenchmarkMetrics {
  int completed = 0;
  int failed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  double duration = 0.0;  // seconds
  double request_throughput = 0.0;
  double request_goodput = 0.0;
  double output_throughput = 0.0;
  double total_token_throughput = 0.0;
  double max_output_tokens_per_s = 0.0;  // peak over 1 s buckets (each chunk counted as one token, as vLLM)
  int max_concurrent_requests = 0;       // peak number of requests in flight
  std::vector<int> output_lens;          // per request; 0 for a failed one
  std::vector<std::pair<std::string, MetricStats>> stats;  // ttft, tpot, itl, e2el (+ client queue metrics)
  const MetricStats* find(const std::string& name) const;
};

// Counts the tokens of a generated text (used when the server sent no usage).
using TokenCounter = std::function<int(const std::string&)>;

BenchmarkMetrics calculate_metrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                   const ReportOptions& opt, const TokenCounter& count_tokens);

// "Failed requests during benchmark run detected (capping to 10):" and the first errors; "" when none.
std::string render_failures(const std::vector<RequestOutput>& outputs);
// The "============ Serving Benchmark Result ============" block, as vLLM prints it.
std::string render_report(const BenchmarkMetrics& m, const ReportOptions& opt);

// Python's str(float): "inf", "1.0", "0.5", "1e-05".
std::string python_float(double v);
// "99" for 99.0, "99.9" for 99.9 (the p-names of percentile keys and labels).
std::string percentile_name(double p);

// The benchmark part of the result JSON (duration ... rtfx, then mean/median/std/pNN per selected metric).
nlohmann::ordered_json benchmark_result_json(const BenchmarkMetrics& m,
                                             const std::vector<RequestOutput>& outputs,
                                             const ReportOptions& opt);

// The run description written before the benchmark part.
struct RunInfo {
  std::string date;  // %Y%m%d-%H%M%S
  std::string backend;
  std::optional<std::string> label;
  std::string model_id;
  std::string tokenizer_id;
  int num_prompts = 0;
  std::vector<std::pair<std::string, std::string>> metadata;  // --metadata KEY=VALUE
  double request_rate = kInfiniteRate;
  double burstiness = 1.0;
  std::optional<int> max_concurrency;
};

// The --save-result document: run description, metadata, traffic, then `benchmark`; without save_detailed
// the per-request lists vLLM drops (input_lens, output_lens, start_times, ttfts, itls, generated_texts,
// errors) are removed.
nlohmann::ordered_json result_file_json(const RunInfo& info, const nlohmann::ordered_json& benchmark,
                                        bool save_detailed);

// vLLM's default file name: {label or backend}-{rate}qps[-concurrency{N}]-{last part of model id}-{date}.json
std::string default_result_filename(const RunInfo& info);

}  // namespace m3::bench
