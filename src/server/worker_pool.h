// A fixed pool of threads for the routes' CPU work (JSON, templates, tokenization) and for turning engine
// events into response bytes, so the HTTP I/O threads never wait on either. Tasks run in the order posted;
// a task must not block for long (generation is event-driven, see GenerationRun).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace m3 {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);  // <= 0: the hardware's thread count, at least 2
  ~WorkerPool();                     // runs what is queued, then joins

  void post(std::function<void()> task);

 private:
  void work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace m3
