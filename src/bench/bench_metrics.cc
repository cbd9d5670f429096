// The arithmetic follows vLLM's calculate_metrics (vllm/benchmarks/serve.py) step for step, including its
// conventions: empty sample lists report 0, TPOT is skipped for one-token requests (and counted as 0 for
// goodput), and the peak-throughput buckets count one token per streamed chunk.
#include "bench/bench_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace m3::bench {
namespace {

using nlohmann::ordered_json;

struct MetricName {
  const char* key;     // ttft
  const char* short_;  // TTFT
  const char* header;  // Time to First Token
};

constexpr MetricName kMetrics[] = {
    {"ttft", "TTFT", "Time to First Token"},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
    {"itl", "ITL", "Inter-token Latency"},
    {"e2el", "E2EL", "End-to-end Latency"},
    {"client_queue_time", "Client Queue Time", "Client-side Queueing"},
    {"e2el_including_client_queue", "E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency"},
};

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double population_std(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const double m = mean(v);
  double sq = 0.0;
  for (double x : v) sq += (x - m) * (x - m);
  return std::sqrt(sq / static_cast<double>(v.size()));
}

// Python's "{s:{c}^{n}}": extra fill goes to the right.
std::string center(const std::string& s, size_t width, char fill) {
  if (s.size() >= width) return s;
  const size_t pad = width - s.size();
  return std::string(pad / 2, fill) + s + std::string(pad - pad / 2, fill);
}

std::string ljust(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string fixed2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// "{:<40} {:<10}" rows.
std::string row(const std::string& label, const std::string& value) {
  return ljust(label, 40) + " " + ljust(value, 10) + "\n";
}

bool selected(const ReportOptions& opt, const std::string& name) {
  return std::find(opt.percentile_metrics.begin(), opt.percentile_metrics.end(), name) !=
         opt.percentile_metrics.end();
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double index = (p / 100.0) * static_cast<double>(values.size() - 1);
  const double below = std::floor(index);
  const size_t lo = static_cast<size_t>(below);
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double t = index - below;
  const double a = values[lo], b = values[hi], diff = b - a;
  return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;  // numpy's _lerp
}

MetricStats summarize_ms(const std::vector<double>& seconds, const std::vector<double>& percentiles) {
  MetricStats s;
  s.mean = mean(seconds) * 1000.0;
  s.median = percentile(seconds, 50.0) * 1000.0;
  s.std = population_std(seconds) * 1000.0;
  for (double p : percentiles) s.percentiles.emplace_back(p, percentile(seconds, p) * 1000.0);
  return s;
}

const std::vector<std::string>& known_percentile_metrics() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const MetricName& m : kMetrics) v.push_back(m.key);
    return v;
  }();
  return names;
}

const MetricStats* BenchmarkMetrics::find(const std::string& name) const {
  for (const auto& [key, s] : stats)
    if (key == name) return &s;
  return nullptr;
}

BenchmarkMetrics calculate_metrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                   const ReportOptions& opt, const TokenCounter& count_tokens) {
  BenchmarkMetrics m;
  m.duration = duration_s;
  std::vector<double> ttfts, tpots, all_tpots, itls, e2els, queue_times, e2els_with_queue;
  for (const RequestOutput& o : outputs) {
    if (!o.success) {
      m.output_lens.push_back(0);
      ++m.failed;
      continue;
    }
    int output_len = o.output_tokens;
    if (output_len == 0) output_len = count_tokens ? count_tokens(o.generated_text) : 1;
    m.output_lens.push_back(output_len);
    m.total_input += o.prompt_len;
    m.total_output += output_len;
    double tpot = 0.0;
    if (output_len > 1) {
      tpot = (o.latency - o.ttft) / (output_len - 1);
      tpots.push_back(tpot);
    }
    all_tpots.push_back(tpot);
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    ttfts.push_back(o.ttft);
    e2els.push_back(o.latency);
    queue_times.push_back(o.client_queue_time);
    e2els_with_queue.push_back(o.latency + o.client_queue_time);
    ++m.completed;
  }

  if (!opt.goodput.empty()) {
    int good = 0;
    for (size_t i = 0; i < ttfts.size(); ++i) {
      const GoodputSlos& g = opt.goodput;
      if (g.ttft_ms && ttfts[i] > *g.ttft_ms / 1000.0) continue;
      if (g.tpot_ms && all_tpots[i] > *g.tpot_ms / 1000.0) continue;
      if (g.e2el_ms && e2els[i] > *g.e2el_ms / 1000.0) continue;
      ++good;
    }
    m.request_goodput = good / duration_s;
  }

  // Peak output tokens per 1 s bucket and peak concurrency (a sweep over [start, end) intervals).
  double first_start = 0.0, last_end = 0.0;
  bool any = false;
  for (const RequestOutput& o : outputs) {
    if (!o.success) continue;
    first_start = any ? std::min(first_start, o.start_time) : o.start_time;
    last_end = any ? std::max(last_end, o.start_time + o.latency) : o.start_time + o.latency;
    any = true;
  }
  if (any) {
    const size_t buckets = static_cast<size_t>(std::ceil(last_end - first_start)) + 1;
    std::vector<double> tokens(buckets, 0.0);
    std::vector<std::pair<double, int>> events;
    for (const RequestOutput& o : outputs) {
      if (!o.success) continue;
      double t = o.start_time + o.ttft;
      for (size_t k = 0;; ++k) {
        const double b = std::floor(t - first_start);
        if (b >= 0 && b < static_cast<double>(buckets)) tokens[static_cast<size_t>(b)] += 1;
        if (k == o.itl.size()) break;
        t += o.itl[k];
      }
      events.emplace_back(o.start_time, 1);
      events.emplace_back(o.start_time + o.latency, -1);
    }
    std::sort(events.begin(), events.end());  // at equal times the departure (-1) comes first
    int current = 0;
    for (const auto& e : events) {
      current += e.second;
      m.max_concurrent_requests = std::max(m.max_concurrent_requests, current);
    }
    m.max_output_tokens_per_s = *std::max_element(tokens.begin(), tokens.end());
  }

  m.request_throughput = m.completed / duration_s;
  m.output_throughput = static_cast<double>(m.total_output) / duration_s;
  m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  const std::vector<double>& ps = opt.metric_percentiles;
  m.stats = {{"ttft", summarize_ms(ttfts, ps)},
             {"tpot", summarize_ms(tpots, ps)},
             {"itl", summarize_ms(itls, ps)},
             {"e2el", summarize_ms(e2els, ps)}};
  if (opt.max_concurrency) {
    m.stats.emplace_back("client_queue_time", summarize_ms(queue_times, ps));
    if (!std::isinf(opt.request_rate))
      m.stats.emplace_back("e2el_including_client_queue", summarize_ms(e2els_with_queue, ps));
  }
  return m;
}

std::string render_failures(const std::vector<RequestOutput>& outputs) {
  std::string out;
  int shown = 0;
  for (const RequestOutput& o : outputs) {
    if (o.success || shown == 10) continue;
    if (shown == 0) out += "Failed requests during benchmark run detected (capping to 10):\n";
    out += "Error " + std::to_string(shown++) + ": " + o.error + "\n";
  }
  return out;
}

std::string render_report(const BenchmarkMetrics& m, const ReportOptions& opt) {
  std::string r = center(" Serving Benchmark Result ", 50, '=') + "\n";
  r += row("Successful requests:", std::to_string(m.completed));
  r += row("Failed requests:", std::to_string(m.failed));
  if (opt.max_concurrency) r += row("Maximum request concurrency:", std::to_string(*opt.max_concurrency));
  if (!std::isinf(opt.request_rate)) r += row("Request rate configured (RPS):", fixed2(opt.request_rate));
  r += row("Benchmark duration (s):", fixed2(m.duration));
  r += row("Total input tokens:", std::to_string(m.total_input));
  r += row("Total generated tokens:", std::to_string(m.total_output));
  r += row("Request throughput (req/s):", fixed2(m.request_throughput));
  if (!opt.goodput.empty()) r += row("Request goodput (req/s):", fixed2(m.request_goodput));
  r += row("Output token throughput (tok/s):", fixed2(m.output_throughput));
  r += row("Peak output token throughput (tok/s):", fixed2(m.max_output_tokens_per_s));
  r += row("Peak concurrent requests:", fixed2(m.max_concurrent_requests));
  r += row("Total token throughput (tok/s):", fixed2(m.total_token_throughput));
  for (const MetricName& name : kMetrics) {
    const MetricStats* s = m.find(name.key);
    if (!s || !selected(opt, name.key)) continue;
    r += center(name.header, 50, '-') + "\n";
    r += row(std::string("Mean ") + name.short_ + " (ms):", fixed2(s->mean));
    r += row(std::string("Median ") + name.short_ + " (ms):", fixed2(s->median));
    for (const auto& [p, v] : s->percentiles)
      r += row(std::string("P").append(percentile_name(p)) + " " + name.short_ + " (ms):", fixed2(v));
  }
  r += std::string(50, '=') + "\n";
  return r;
}

std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);  // shortest digits
  std::string s(buf, res.ptr);
  std::string sign;
  if (s.front() == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  const int exp = std::stoi(s.substr(e + 1));
  std::string digits;
  for (char c : s.substr(0, e))
    if (c != '.') digits += c;
  const int point = exp + 1;        // digits before the decimal point
  if (point > -4 && point <= 16) {  // repr's fixed range
    if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
    if (point >= static_cast<int>(digits.size()))
      return sign + digits + std::string(point - digits.size(), '0') + ".0";
    return sign + digits.substr(0, point) + "." + digits.substr(point);
  }
  char e_buf[16];
  std::snprintf(e_buf, sizeof e_buf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + e_buf;
}

std::string percentile_name(double p) {
  if (std::floor(p) == p && std::abs(p) < 1e15) return std::to_string(static_cast<int64_t>(p));
  return python_float(p);
}

ordered_json benchmark_result_json(const BenchmarkMetrics& m, const std::vector<RequestOutput>& outputs,
                                   const ReportOptions& opt) {
  ordered_json input_lens = ordered_json::array(), ttfts = ordered_json::array(),
               itls = ordered_json::array(), latencies = ordered_json::array(),
               starts = ordered_json::array(), queues = ordered_json::array(), texts = ordered_json::array(),
               errors = ordered_json::array();
  for (const RequestOutput& o : outputs) {
    input_lens.push_back(o.prompt_len);
    ttfts.push_back(o.ttft);
    itls.push_back(o.itl);
    latencies.push_back(o.latency);
    starts.push_back(o.start_time);
    queues.push_back(o.client_queue_time);
    texts.push_back(o.generated_text);
    errors.push_back(o.error);
  }
  ordered_json r;
  r["duration"] = m.duration;
  r["completed"] = m.completed;
  r["failed"] = m.failed;
  r["total_input_tokens"] = m.total_input;
  r["total_output_tokens"] = m.total_output;
  r["request_throughput"] = m.request_throughput;
  r["request_goodput"] = opt.goodput.empty() ? ordered_json(nullptr) : ordered_json(m.request_goodput);
  r["output_throughput"] = m.output_throughput;
  r["total_token_throughput"] = m.total_token_throughput;
  r["input_lens"] = input_lens;
  r["output_lens"] = m.output_lens;
  r["ttfts"] = ttfts;
  r["itls"] = itls;
  r["latencies"] = latencies;
  r["start_times"] = starts;
  r["queue_times"] = queues;
  r["generated_texts"] = texts;
  r["errors"] = errors;
  r["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  r["max_concurrent_requests"] = m.max_concurrent_requests;
  r["rtfx"] = 0.0;
  for (const MetricName& name : kMetrics) {
    const MetricStats* s = m.find(name.key);
    if (!s || !selected(opt, name.key)) continue;
    const std::string key = name.key;
    r["mean_" + key + "_ms"] = s->mean;
    r["median_" + key + "_ms"] = s->median;
    r["std_" + key + "_ms"] = s->std;
    for (const auto& [p, v] : s->percentiles)
      r[std::string("p").append(percentile_name(p)) + "_" + key + "_ms"] = v;
  }
  return r;
}

ordered_json result_file_json(const RunInfo& info, const ordered_json& benchmark, bool save_detailed) {
  ordered_json r;
  r["date"] = info.date;
  r["endpoint_type"] = info.backend;
  r["backend"] = info.backend;
  r["label"] = info.label ? ordered_json(*info.label) : ordered_json(nullptr);
  r["model_id"] = info.model_id;
  r["tokenizer_id"] = info.tokenizer_id;
  r["num_prompts"] = info.num_prompts;
  for (const auto& [key, value] : info.metadata) r[key] = value;
  r["request_rate"] = std::isinf(info.request_rate) ? ordered_json("inf") : ordered_json(info.request_rate);
  r["burstiness"] = info.burstiness;
  r["max_concurrency"] = info.max_concurrency ? ordered_json(*info.max_concurrency) : ordered_json(nullptr);
  for (const auto& [key, value] : benchmark.items()) r[key] = value;
  if (!save_detailed)
    for (const char* key :
         {"input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"})
      r.erase(key);
  return r;
}

std::string default_result_filename(const RunInfo& info) {
  std::string model = info.model_id;
  while (model.size() > 1 && model.back() == '/') model.pop_back();
  const size_t slash = model.rfind('/');
  if (slash != std::string::npos) model = model.substr(slash + 1);
  const std::string concurrency =
      info.max_concurrency ? "-concurrency" + std::to_string(*info.max_concurrency) : "";
  return info.label.value_or(info.backend) + "-" + python_float(info.request_rate) + "qps" + concurrency +
         "-" + model + "-" + info.date + ".json";
}

}  // namespace m3::bench
