// Prometheus metrics under vLLM's names (vllm:*), so existing dashboards and routers read them unchanged:
// request counters by finish reason, token counters, TTFT / inter-token / end-to-end latency histograms, and
// gauges (running, waiting, KV usage) sampled from the engine at scrape time. Thread-safe.
#pragma once

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace m3 {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  // Appends the exposition lines for `name` with the `labels` text (e.g. model_name="x").
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  explicit Metrics(std::string model_name);

  void request_finished(const std::string& finish_reason, int prompt_tokens, int generation_tokens,
                        double e2e_seconds);
  void request_aborted(const std::string& reason);  // client_disconnect, shutdown, ...
  void first_token(double ttft_seconds);
  void inter_token(double seconds);
  void http_response(int status);

  std::string render(const EngineStats& engine) const;

 private:
  std::string labels_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> finished_;  // by finish reason
  std::map<std::string, uint64_t> aborted_;
  std::map<int, uint64_t> http_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  Histogram ttft_, itl_, e2e_, prompt_len_, gen_len_;
};

}  // namespace m3
