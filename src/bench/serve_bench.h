// The `m3 bench serve` driver, vLLM's `vllm bench serve` in C++: resolves the model, tokenizer and endpoint,
// draws the dataset (random, prefix_repetition, or m3serve's multi-turn agent workload), sends the requests
// with Poisson / gamma arrivals (--request-rate, --burstiness) under a --max-concurrency limit through one
// event-driven HTTP client (two I/O threads, keep-alive connections opened as the load needs them), shows
// progress, prints vLLM's report (and the agent workload's per-turn table) and writes its result JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/agent_workload.h"
#include "bench/bench_metrics.h"
#include "bench/prefix_repetition_dataset.h"
#include "bench/random_dataset.h"

namespace m3::bench {

// Flags of `m3 bench serve`, with vLLM's defaults. Optional values are unset when the flag was not given.
struct ServeBenchOptions {
  std::string backend = "openai";  // openai | vllm | sglang-oai | ... (completions); openai-chat | ... (chat)
  std::string base_url;            // overrides host/port
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint;              // "" -> /v1/completions, or /v1/chat/completions for chat backends
  std::vector<std::string> headers;  // KEY=VALUE
  std::string api_key;               // "" -> $OPENAI_API_KEY
  std::string model;                 // "" -> the first model of GET /v1/models
  std::string served_model_name;     // the "model" field sent; "" -> --model
  std::string tokenizer;             // "" -> --model when it is a local path, else /v1/models "root"
  std::optional<std::string> label;

  std::string dataset_name = "random";  // random | prefix_repetition | agent
  std::string dataset_path;
  RandomDatasetOptions random;  // num_prompts, lengths, prefix, range ratio, seed (of every dataset)
  PrefixRepetitionOptions prefix_repetition;  // its num_prompts and seed come from `random`
  AgentWorkloadOptions agent;                 // its seed comes from `random`

  double request_rate = kInfiniteRate;
  double burstiness = 1.0;
  std::optional<int> max_concurrency;
  bool ignore_eos = false;
  std::optional<double> temperature = 0.0, top_p, min_p, frequency_penalty, presence_penalty,
                        repetition_penalty;
  std::optional<int> top_k, logprobs;
  std::string extra_body;  // JSON object merged into every request

  std::string percentile_metrics = "ttft,tpot,itl";
  std::string metric_percentiles = "99";
  std::vector<std::string> goodput;  // ttft:MS tpot:MS e2el:MS

  int num_warmups = 0;
  int ready_check_timeout_sec = 0;
  std::string request_id_prefix;  // "" -> bench-<8 hex>-
  bool disable_tqdm = false;

  bool save_result = false;
  bool append_result = false;
  bool save_detailed = false;
  std::string result_dir;
  std::string result_filename;
  std::vector<std::string> metadata;  // KEY=VALUE
};

// Runs the benchmark and returns the exit status: 0 once the report is printed, even when requests failed
// (as vLLM). Bad flags and an unusable tokenizer throw m3::Error naming the flag.
int run_serve_benchmark(const ServeBenchOptions& opt);

// Send times (seconds from the start) of `n` requests: all 0 for an infinite rate; otherwise
// gamma-distributed gaps (shape = burstiness, mean 1/rate; burstiness 1 is a Poisson process) rescaled so the
// last request goes out at n / rate, as vLLM does. Deterministic for a seed.
std::vector<double> arrival_times(int n, double request_rate, double burstiness, uint64_t seed);

}  // namespace m3::bench
