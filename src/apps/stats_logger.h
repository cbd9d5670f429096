// Periodic engine statistics in the log, as vLLM prints them: prompt and generation throughput over the last
// interval, running / waiting requests, KV cache usage, steps per second and the mean step time. Quiet while
// the engine is idle. A background thread; stops (and joins) on destruction.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/async_engine.h"

namespace m3 {

class StatsLogger {
 public:
  StatsLogger(const AsyncEngine& engine, std::chrono::milliseconds interval);
  ~StatsLogger();
  StatsLogger(const StatsLogger&) = delete;
  StatsLogger& operator=(const StatsLogger&) = delete;

 private:
  void loop();

  const AsyncEngine& engine_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace m3
