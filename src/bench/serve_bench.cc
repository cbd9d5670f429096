// Flag checks come first, so a typo fails before any request is sent. The load generator keeps vLLM's timing
// semantics: a request's start time is when it is sent, its client queue time the wait for a concurrency
// slot, and the benchmark duration runs from the first arrival slot to the last response.
#include "bench/serve_bench.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "bench/agent_report.h"
#include "bench/progress_bar.h"
#include "bench/request_runner.h"
#include "common/error.h"
#include "common/log.h"
#include "config/expert_placement.h"

namespace m3::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

[[noreturn]] void bad_flag(const std::string& message) {
  fail(ErrorKind::kInvalidArgument, message);
}

ApiKind backend_kind(const std::string& backend) {
  static const std::map<std::string, ApiKind> kinds = {
      {"openai", ApiKind::kCompletions},     {"vllm", ApiKind::kCompletions},
      {"sglang-oai", ApiKind::kCompletions}, {"lmdeploy", ApiKind::kCompletions},
      {"openai-chat", ApiKind::kChat},       {"vllm-chat", ApiKind::kChat},
      {"sglang-oai-chat", ApiKind::kChat}};
  const auto it = kinds.find(backend);
  if (it == kinds.end())
    bad_flag(
        "--backend '" + backend +
        "' is not supported: use openai (/v1/completions; also vllm, sglang-oai, lmdeploy) or openai-chat "
        "(/v1/chat/completions; also vllm-chat, sglang-oai-chat)");
  return it->second;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

double parse_number(const std::string& text, const std::string& flag) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && !std::isnan(v)) return v;
  } catch (const std::exception&) {
  }
  bad_flag(flag + ": '" + text + "' is not a number");
}

std::vector<std::pair<std::string, std::string>> parse_key_values(const std::vector<std::string>& items,
                                                                  const std::string& flag) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) bad_flag(flag + ": '" + item + "' is not in KEY=VALUE form");
    out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  return out;
}

ReportOptions report_options(const ServeBenchOptions& o) {
  ReportOptions r;
  r.max_concurrency = o.max_concurrency;
  r.request_rate = o.request_rate;
  r.percentile_metrics = split_list(o.percentile_metrics);
  const std::vector<std::string>& known = known_percentile_metrics();
  for (const std::string& m : r.percentile_metrics)
    if (std::find(known.begin(), known.end(), m) == known.end())
      bad_flag("--percentile-metrics: unknown metric '" + m +
               "' (allowed: ttft, tpot, itl, e2el, client_queue_time, e2el_including_client_queue)");
  r.metric_percentiles.clear();
  for (const std::string& p : split_list(o.metric_percentiles)) {
    const double v = parse_number(p, "--metric-percentiles");
    if (v < 0 || v > 100) bad_flag("--metric-percentiles: " + p + " is not in [0, 100]");
    r.metric_percentiles.push_back(v);
  }
  for (const std::string& slo : o.goodput) {
    const size_t colon = slo.find(':');
    if (colon == std::string::npos) bad_flag("--goodput: '" + slo + "' is not in KEY:MILLISECONDS form");
    const std::string name = slo.substr(0, colon);
    const double ms = parse_number(slo.substr(colon + 1), "--goodput");
    if (ms < 0) bad_flag("--goodput: the objective for '" + name + "' must not be negative");
    if (name == "ttft")
      r.goodput.ttft_ms = ms;
    else if (name == "tpot")
      r.goodput.tpot_ms = ms;
    else if (name == "e2el")
      r.goodput.e2el_ms = ms;
    else
      bad_flag("--goodput: unknown metric '" + name + "' (allowed: ttft, tpot, e2el)");
  }
  return r;
}

void check_flags(const ServeBenchOptions& o) {
  if (o.dataset_name != "random" && o.dataset_name != "prefix_repetition" && o.dataset_name != "agent")
    bad_flag("--dataset-name '" + o.dataset_name +
             "' is not supported by m3 bench serve: use random, prefix_repetition or agent");
  if (!o.dataset_path.empty()) bad_flag("--dataset-path: the " + o.dataset_name + " dataset reads no file");
  if (o.max_concurrency && *o.max_concurrency <= 0) bad_flag("--max-concurrency must be greater than 0");
  if (!(o.request_rate > 0))
    bad_flag("--request-rate must be greater than 0 (inf sends every request at once)");
  if (!(o.burstiness > 0)) bad_flag("--burstiness must be greater than 0");
  if (o.num_warmups < 0) bad_flag("--num-warmups must not be negative");
  if (o.ready_check_timeout_sec < 0) bad_flag("--ready-check-timeout-sec must not be negative");
  if (o.base_url.empty() && (o.port < 1 || o.port > 65535)) bad_flag("--port must be in [1, 65535]");
  if (!o.base_url.empty() && o.base_url.rfind("http://", 0) != 0 && o.base_url.rfind("https://", 0) != 0)
    bad_flag("--base-url '" + o.base_url + "' must start with http:// or https://");
}

Endpoint make_endpoint(const ServeBenchOptions& o, ApiKind kind) {
  Endpoint ep;
  ep.kind = kind;
  if (!o.base_url.empty()) {
    ep.base_url = o.base_url;
    while (ep.base_url.size() > 8 && ep.base_url.back() == '/') ep.base_url.pop_back();
  } else {
    const bool v6 = o.host.find(':') != std::string::npos && o.host.front() != '[';
    ep.base_url = "http://" + (v6 ? "[" + o.host + "]" : o.host) + ":" + std::to_string(o.port);
  }
  ep.path = !o.endpoint.empty()      ? o.endpoint
            : kind == ApiKind::kChat ? "/v1/chat/completions"
                                     : "/v1/completions";
  if (ep.path.front() != '/') ep.path = "/" + ep.path;
  const std::string suffix = kind == ApiKind::kChat ? "chat/completions" : "completions";
  auto ends_with = [&](const std::string& tail) {
    return ep.path.size() >= tail.size() &&
           ep.path.compare(ep.path.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (!ends_with(suffix))
    bad_flag("--endpoint '" + ep.path + "' does not fit --backend " + o.backend + ": it must end with '" +
             suffix + "'");
  if (kind == ApiKind::kCompletions && ends_with("chat/completions"))
    bad_flag("--endpoint '" + ep.path + "' is a chat endpoint: use --backend openai-chat");

  std::map<std::string, std::string> headers;
  std::string key = o.api_key;
  if (key.empty())
    if (const char* env = std::getenv("OPENAI_API_KEY")) key = env;
  if (!key.empty()) headers["Authorization"] = "Bearer " + key;
  for (const auto& [k, v] : parse_key_values(o.headers, "--header")) headers[k] = v;
  ep.headers.assign(headers.begin(), headers.end());

  // vLLM: random prompts run to their length; so do agent turns, so each turn grows the prompt alike.
  ep.ignore_eos = o.ignore_eos || o.dataset_name == "random" || o.dataset_name == "agent";
  ep.logprobs = o.logprobs;
  auto put = [&](const char* name, const auto& value) {
    if (value) ep.extra_body[name] = *value;
  };
  put("top_p", o.top_p);
  put("top_k", o.top_k);
  put("min_p", o.min_p);
  put("temperature", o.temperature);
  put("frequency_penalty", o.frequency_penalty);
  put("presence_penalty", o.presence_penalty);
  put("repetition_penalty", o.repetition_penalty);
  if (!o.extra_body.empty()) {
    const nlohmann::json extra = nlohmann::json::parse(o.extra_body, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) bad_flag("--extra-body must be a JSON object");
    for (const auto& [k, v] : extra.items()) ep.extra_body[k] = v;
  }
  return ep;
}

// A tokenizer.json, or a directory holding one; "" otherwise.
std::string local_tokenizer(const std::string& path) {
  std::error_code ec;
  if (path.empty()) return "";
  if (fs::is_regular_file(path, ec)) return path;
  if (fs::is_regular_file(fs::path(path) / "tokenizer.json", ec)) return path;
  return "";
}

struct ModelChoice {
  std::string id;         // --model, or /v1/models root (recorded as model_id)
  std::string sent_name;  // the "model" field
  std::string tokenizer;  // a local path
};

ModelChoice choose_model(const ServeBenchOptions& o, const Endpoint& ep) {
  ModelChoice c;
  std::string root;
  auto first_model = [&] {
    const nlohmann::json models = get_json(ep.base_url, "/v1/models", ep.headers);
    if (!models.contains("data") || !models["data"].is_array() || models["data"].empty() ||
        !models["data"][0].contains("id"))
      fail(ErrorKind::kUnavailable, "no models found on the server at " + ep.base_url + "/v1/models");
    const nlohmann::json& m = models["data"][0];
    root = m.value("root", m["id"].get<std::string>());
    return m["id"].get<std::string>();
  };
  if (o.model.empty()) {
    std::cout << "Model not specified, fetching first model from server..." << std::endl;
    c.sent_name = first_model();
    c.id = root;
    std::cout << "First model name: " << c.sent_name << ", first model id: " << c.id << std::endl;
  } else {
    c.id = o.model;
    c.sent_name = o.served_model_name.empty() ? o.model : o.served_model_name;
  }
  if (!o.tokenizer.empty()) {
    c.tokenizer = local_tokenizer(o.tokenizer);
    if (c.tokenizer.empty())
      fail(ErrorKind::kNotFound,
           "--tokenizer '" + o.tokenizer + "' is not a tokenizer.json or a directory with one");
    return c;
  }
  c.tokenizer = local_tokenizer(c.id);
  if (!c.tokenizer.empty()) return c;
  if (root.empty()) {
    try {
      first_model();
    } catch (const Error& e) {
      fail(ErrorKind::kNotFound,
           "--tokenizer: '" + c.id +
               "' is not a local model directory and the server's model root is unknown (" + e.what() +
               "); pass --tokenizer PATH (a model directory or tokenizer.json)");
    }
  }
  c.tokenizer = local_tokenizer(root);
  if (c.tokenizer.empty())
    fail(ErrorKind::kNotFound,
         "--tokenizer: neither --model '" + c.id + "' nor the server's model root '" + root +
             "' is a local model directory; pass --tokenizer PATH (a model directory or "
             "tokenizer.json)");
  return c;
}

// What a run sends: a fixed list of requests (random, prefix_repetition), or agent conversations whose later
// turns are built as the earlier ones answer.
struct Workload {
  std::vector<SampleRequest> requests;
  std::optional<AgentWorkload> agent;
  size_t size() const { return agent ? agent->num_requests() : requests.size(); }
  // The request of the ready check and the warm-ups.
  SampleRequest probe() const { return agent ? agent->first_turn(0) : requests.front(); }
};

Workload draw_workload(const Tokenizer& tok, const ServeBenchOptions& o) {
  Workload w;
  if (o.dataset_name == "prefix_repetition") {
    PrefixRepetitionOptions p = o.prefix_repetition;
    p.num_prompts = o.random.num_prompts;
    p.seed = o.random.seed;
    w.requests = sample_prefix_repetition_requests(tok, p);
  } else if (o.dataset_name == "agent") {
    AgentWorkloadOptions a = o.agent;
    a.seed = o.random.seed;
    w.agent.emplace(tok, a);
  } else {
    w.requests = sample_random_requests(tok, o.random);
  }
  return w;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string random_prefix() {
  std::random_device rd;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
  return std::string("bench-") + buf + "-";
}

std::string local_date() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// Repeats the first request until it succeeds or `timeout_s` passes (--ready-check-timeout-sec).
// The server's tokens per routed expert so far (m3:moe_expert_tokens_total); empty when it has none.
std::vector<int64_t> expert_tokens(const Endpoint& ep, HttpClient& http) {
  const HttpResult res = http.fetch({"GET", ep.base_url + "/metrics", ep.headers, ""});
  if (!res.error.empty() || res.head.status != 200) return {};
  return parse_expert_token_metrics(res.body);
}

// The run's expert load: tokens per expert (the counters' growth), and how uneven it was.
std::string render_expert_load(const std::vector<int64_t>& tokens) {
  if (tokens.empty()) return "";
  int64_t total = 0;
  size_t hot = 0, cold = 0;
  for (size_t e = 0; e < tokens.size(); ++e) {
    total += tokens[e];
    if (tokens[e] > tokens[hot]) hot = e;
    if (tokens[e] < tokens[cold]) cold = e;
  }
  const double mean = double(total) / double(tokens.size());
  char line[256];
  std::snprintf(
      line, sizeof line,
      "Expert load: %zu experts, %lld routed tokens; busiest expert %zu at %.2fx the mean, idlest %zu "
      "at %.2fx\n",
      tokens.size(), static_cast<long long>(total), hot, mean > 0 ? tokens[hot] / mean : 0.0, cold,
      mean > 0 ? tokens[cold] / mean : 0.0);
  return line;
}

void ready_check(const Endpoint& ep, HttpClient& http, const SampleRequest& req, int timeout_s) {
  const Clock::time_point t0 = Clock::now();
  const RequestClient client(ep, t0, http);
  for (;;) {
    const RequestOutput out = client.send(req, "");
    if (out.success) break;
    if (seconds_since(t0) >= timeout_s)
      fail(ErrorKind::kUnavailable,
           "Initial test run failed - Please make sure benchmark arguments are correctly specified. Error: " +
               out.error);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::cout << "Initial test run completed." << std::endl;
}

void write_result(const ServeBenchOptions& o, const RunInfo& info, const nlohmann::ordered_json& result) {
  fs::path file = o.result_filename.empty() ? default_result_filename(info) : o.result_filename;
  if (!o.result_dir.empty()) {
    std::error_code ec;
    fs::create_directories(o.result_dir, ec);
    if (ec) fail(ErrorKind::kInvalidArgument, "--result-dir '" + o.result_dir + "': " + ec.message());
    file = fs::path(o.result_dir) / file;
  }
  std::error_code ec;
  const bool nonempty = o.append_result && fs::exists(file, ec) && fs::file_size(file, ec) > 0;
  std::ofstream out(file, o.append_result ? std::ios::app : std::ios::trunc);
  if (!out) fail(ErrorKind::kInvalidArgument, "cannot write the result file '" + file.string() + "'");
  if (nonempty) out << "\n";
  out << result.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  if (!out.flush()) fail(ErrorKind::kInternal, "writing the result file '" + file.string() + "' failed");
  log_info("wrote the result to ", file.string());
}

}  // namespace

std::vector<double> arrival_times(int n, double request_rate, double burstiness, uint64_t seed) {
  std::vector<double> t(static_cast<size_t>(std::max(n, 0)), 0.0);
  if (std::isinf(request_rate) || t.empty()) return t;
  std::mt19937_64 gen(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  double sum = 0.0;
  for (double& x : t) x = sum += std::isinf(burstiness) ? 1.0 / request_rate : gap(gen);
  if (sum > 0)
    for (double& x : t) x *= (n / request_rate) / sum;  // the last request goes out at n / rate
  return t;
}

int run_serve_benchmark(const ServeBenchOptions& o) {
  check_flags(o);
  const ApiKind kind = backend_kind(o.backend);
  const ReportOptions report = report_options(o);
  const auto metadata = parse_key_values(o.metadata, "--metadata");
  Endpoint ep = make_endpoint(o, kind);
  ::signal(SIGPIPE, SIG_IGN);  // a server that goes away mid-request is a failed request, not a dead client

  const ModelChoice model = choose_model(o, ep);
  ep.model = model.sent_name;
  log_info("tokenizer: ", model.tokenizer);
  const Tokenizer tok = Tokenizer::load(model.tokenizer);
  const Workload work = draw_workload(tok, o);
  const SampleRequest probe = work.probe();
  const std::string id_prefix = o.request_id_prefix.empty() ? random_prefix() : o.request_id_prefix;
  const size_t max_in_flight = o.max_concurrency ? size_t(*o.max_concurrency) : work.size();
  HttpClient http;

  if (o.ready_check_timeout_sec > 0) {
    std::cout << "Starting initial single prompt test run..." << std::endl;
    ready_check(ep, http, probe, o.ready_check_timeout_sec);
  } else {
    std::cout << "Skipping endpoint ready check." << std::endl;
  }
  if (o.num_warmups > 0) {
    std::cout << "Warming up with " << o.num_warmups << " requests..." << std::endl;
    ProgressBar bar(o.num_warmups, !o.disable_tqdm);
    const RequestClient client(ep, Clock::now(), http);
    RequestRunner runner(client, max_in_flight,
                         [&](size_t, RequestOutput&& out) { bar.advance(!out.success); });
    for (int i = 0; i < o.num_warmups; ++i) runner.submit(size_t(i), probe, "", 0.0);
    runner.wait();
    std::cout << "Warmup run completed." << std::endl;
  }

  std::cout << "Starting main benchmark run..." << std::endl;
  std::cout << "Traffic request rate: " << python_float(o.request_rate) << std::endl;
  std::cout << "Burstiness factor: " << python_float(o.burstiness) << " ("
            << (o.burstiness == 1.0 ? "Poisson process" : "Gamma distribution") << ")" << std::endl;
  std::cout << "Maximum request concurrency: "
            << (o.max_concurrency ? std::to_string(*o.max_concurrency) : std::string("None")) << std::endl;

  const std::vector<int64_t> experts_before = expert_tokens(ep, http);
  std::vector<RequestOutput> outputs(work.size());
  std::vector<AgentTurn> turns;
  double duration = 0.0;
  {
    ProgressBar bar(static_cast<int>(work.size()), !o.disable_tqdm);
    const Clock::time_point start = Clock::now();
    const RequestClient client(ep, start, http);
    if (work.agent) {  // the arrivals are conversation starts
      const std::vector<double> starts =
          arrival_times(work.agent->options().conversations, o.request_rate, o.burstiness, o.random.seed);
      turns = work.agent->run(client, max_in_flight, starts, start, id_prefix,
                              [&](const RequestOutput& out) { bar.advance(!out.success); });
      for (size_t i = 0; i < turns.size(); ++i) outputs[i] = turns[i].output;
    } else {
      const std::vector<double> arrivals =
          arrival_times(static_cast<int>(work.size()), o.request_rate, o.burstiness, o.random.seed);
      RequestRunner runner(client, max_in_flight, [&](size_t i, RequestOutput&& out) {
        bar.advance(!out.success);
        outputs[i] = std::move(out);
      });
      for (size_t i = 0; i < work.requests.size(); ++i) {
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
        runner.submit(i, work.requests[i], id_prefix + std::to_string(i), seconds_since(start));
      }
      runner.wait();
    }
    duration = seconds_since(start);
  }

  const BenchmarkMetrics metrics = calculate_metrics(outputs, duration, report, [&](const std::string& text) {
    return static_cast<int>(tok.encode(text).size());
  });
  if (metrics.completed == 0)
    log_warn("All requests failed. This is likely due to a misconfiguration on the benchmark arguments.");
  std::cout << render_failures(outputs) << render_report(metrics, report) << std::flush;
  std::vector<int64_t> experts = expert_tokens(ep, http);  // this run's share of the counters
  if (experts.size() == experts_before.size())
    for (size_t e = 0; e < experts.size(); ++e) experts[e] -= experts_before[e];
  else if (!experts_before.empty())  // (none before: the server had routed nothing yet)
    experts.clear();
  std::cout << render_expert_load(experts) << std::flush;
  const std::vector<TurnStats> per_turn = per_turn_stats(turns);
  if (work.agent) std::cout << render_per_turn(per_turn) << std::flush;

  RunInfo info;
  info.date = local_date();
  info.backend = o.backend;
  info.label = o.label;
  info.model_id = model.id;
  info.tokenizer_id = model.tokenizer;
  info.num_prompts = static_cast<int>(work.size());
  info.metadata = metadata;
  info.request_rate = o.request_rate;
  info.burstiness = o.burstiness;
  info.max_concurrency = o.max_concurrency;
  if (o.save_result || o.append_result) {
    nlohmann::ordered_json result =
        result_file_json(info, benchmark_result_json(metrics, outputs, report), o.save_detailed);
    if (work.agent) result["per_turn"] = per_turn_json(per_turn);
    if (!experts.empty()) result["expert_tokens"] = experts;  // --expert-placement reads this file
    write_result(o, info, result);
  }
  return 0;
}

}  // namespace m3::bench
