// Prometheus text exposition format 0.0.4.
#include "server/metrics.h"

#include <sstream>

namespace m3 {
namespace {

std::string num(double v) {
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                             0.75,  1.0,   2.5,  5.0,  7.5,  10,   20,   40,  80,   160};
const std::vector<double> kTokenBuckets = {1,     2,      5,      10,     20,     50,    100,
                                           200,   500,    1000,   2000,   5000,   10000, 20000,
                                           50000, 100000, 200000, 500000, 1000000};

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  out += "# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out +=
        name + "_bucket{" + labels + ",le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum{" + labels + "} " + num(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

Metrics::Metrics(std::string model_name)
    : labels_("model_name=\"" + model_name + "\""),
      ttft_(kLatencyBuckets),
      itl_(kLatencyBuckets),
      e2e_(kLatencyBuckets),
      prompt_len_(kTokenBuckets),
      gen_len_(kTokenBuckets) {}

void Metrics::request_finished(const std::string& reason, int prompt_tokens, int generation_tokens,
                               double e2e) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[reason];
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generation_tokens;
  e2e_.observe(e2e);
  prompt_len_.observe(prompt_tokens);
  gen_len_.observe(generation_tokens);
}

void Metrics::request_aborted(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++aborted_[reason];
}

void Metrics::first_token(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(s);
}

void Metrics::inter_token(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(s);
}

void Metrics::http_response(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_[status];
}

std::string Metrics::render(const EngineStats& e) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  auto gauge = [&](const std::string& name, double v) {
    out += "# TYPE " + name + " gauge\n" + name + "{" + labels_ + "} " + num(v) + "\n";
  };
  auto counter = [&](const std::string& name, double v) {
    out += "# TYPE " + name + " counter\n" + name + "{" + labels_ + "} " + num(v) + "\n";
  };
  gauge("vllm:num_requests_running", static_cast<double>(e.running));
  gauge("vllm:num_requests_waiting", static_cast<double>(e.waiting));
  gauge("vllm:kv_cache_usage_perc",
        e.kv_pages_total ? 1.0 - static_cast<double>(e.kv_pages_free) / e.kv_pages_total : 0.0);
  counter("vllm:num_preemptions_total", static_cast<double>(e.preemptions));
  counter("vllm:prefix_cache_queries_total", static_cast<double>(e.prefix_cache_queries));
  counter("vllm:prefix_cache_hits_total", static_cast<double>(e.prefix_cache_hits));
  if (e.host_pages_total > 0) {  // the host tier: hits restored from it (a share of the hits above), its use
    counter("m3:kv_host_tier_hits_total", static_cast<double>(e.prefix_cache_host_hits));
    gauge("m3:kv_host_tier_usage_perc", static_cast<double>(e.host_pages_used) / e.host_pages_total);
  }
  // Data-parallel attention: each rank's load (the balancer's inputs) and the requests it was given.
  out += "# TYPE m3:dp_rank_num_requests_running gauge\n";
  for (size_t r = 0; r < e.dp_ranks.size(); ++r)
    out += "m3:dp_rank_num_requests_running{" + labels_ + ",dp_rank=\"" + std::to_string(r) + "\"} " +
           num(double(e.dp_ranks[r].running)) + "\n";
  out += "# TYPE m3:dp_rank_kv_cache_usage_perc gauge\n";
  for (size_t r = 0; r < e.dp_ranks.size(); ++r) {
    const DpRankStats& d = e.dp_ranks[r];
    out += "m3:dp_rank_kv_cache_usage_perc{" + labels_ + ",dp_rank=\"" + std::to_string(r) + "\"} " +
           num(d.kv_pages_total ? 1.0 - double(d.kv_pages_free) / d.kv_pages_total : 0.0) + "\n";
  }
  out += "# TYPE m3:dp_rank_requests_total counter\n";
  for (size_t r = 0; r < e.dp_ranks.size(); ++r)
    out += "m3:dp_rank_requests_total{" + labels_ + ",dp_rank=\"" + std::to_string(r) + "\"} " +
           num(double(e.dp_ranks[r].requests)) + "\n";
  // Expert load: tokens routed to each expert over the MoE layers (what --expert-placement balances).
  if (!e.expert_tokens.empty()) {
    out += "# TYPE m3:moe_expert_tokens_total counter\n";
    for (size_t x = 0; x < e.expert_tokens.size(); ++x)
      out += "m3:moe_expert_tokens_total{" + labels_ + ",expert=\"" + std::to_string(x) + "\"} " +
             num(double(e.expert_tokens[x])) + "\n";
  }
  // Structured output: token masks computed, and the host time of the steps' mask work (it overlaps the
  // forward passes: compare TPOT with and without a grammar for what it adds).
  counter("m3:structured_output_masks_total", static_cast<double>(e.grammar_masks));
  counter("m3:structured_output_mask_seconds_total", e.grammar_mask_seconds);
  counter("vllm:prompt_tokens_total", static_cast<double>(prompt_tokens_));
  counter("vllm:generation_tokens_total", static_cast<double>(generation_tokens_));
  out += "# TYPE vllm:request_success_total counter\n";
  for (const auto& [reason, n] : finished_)
    out += "vllm:request_success_total{" + labels_ + ",finished_reason=\"" + reason + "\"} " +
           std::to_string(n) + "\n";
  out += "# TYPE m3:requests_aborted_total counter\n";
  for (const auto& [reason, n] : aborted_)
    out += "m3:requests_aborted_total{" + labels_ + ",reason=\"" + reason + "\"} " + std::to_string(n) + "\n";
  out += "# TYPE m3:http_responses_total counter\n";
  for (const auto& [status, n] : http_)
    out += "m3:http_responses_total{" + labels_ + ",status=\"" + std::to_string(status) + "\"} " +
           std::to_string(n) + "\n";
  ttft_.render(out, "vllm:time_to_first_token_seconds", labels_);
  itl_.render(out, "vllm:inter_token_latency_seconds", labels_);
  e2e_.render(out, "vllm:e2e_request_latency_seconds", labels_);
  prompt_len_.render(out, "vllm:request_prompt_tokens", labels_);
  gen_len_.render(out, "vllm:request_generation_tokens", labels_);
  return out;
}

}  // namespace m3
