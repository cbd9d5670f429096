// The statistics thread: samples the engine's counters every interval and logs the differences.
#include "apps/stats_logger.h"

#include <cstdio>
#include <string>

#include "common/log.h"

namespace m3 {
namespace {

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

StatsLogger::StatsLogger(const AsyncEngine& engine, std::chrono::milliseconds interval)
    : engine_(engine), interval_(interval) {
  thread_ = std::thread([this] { loop(); });
}

StatsLogger::~StatsLogger() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void StatsLogger::loop() {
  EngineStats last = engine_.stats();
  auto last_time = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval_, [&] { return stop_; })) {
    const EngineStats now = engine_.stats();
    const auto t = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(t - last_time).count();
    const int64_t steps = now.steps - last.steps;
    const bool idle = steps == 0 && now.running == 0 && now.waiting == 0;
    if (!idle && dt > 0) {
      const double usage =
          now.kv_pages_total ? 100.0 * (now.kv_pages_total - now.kv_pages_free) / now.kv_pages_total : 0.0;
      log_fields(
          LogLevel::kInfo, "engine",
          {{"prompt_throughput_tok_s", fixed((now.prompt_tokens - last.prompt_tokens) / dt, 1)},
           {"generation_throughput_tok_s", fixed((now.generated_tokens - last.generated_tokens) / dt, 1)},
           {"running", std::to_string(now.running)},
           {"waiting", std::to_string(now.waiting)},
           {"kv_cache_usage_pct", fixed(usage, 1)},
           {"steps_per_s", fixed(steps / dt, 1)},
           {"mean_step_ms", fixed(steps ? 1e3 * (now.step_seconds - last.step_seconds) / steps : 0.0, 2)},
           {"preemptions", std::to_string(now.preemptions - last.preemptions)}});
    }
    last = now;
    last_time = t;
  }
}

}  // namespace m3
